import { ImageDetail, Provider } from "#gen/contextd/v1/message_pb";

/**
 * What a provider adds around content, in tokens, for the TOKENIZER estimator. The BPE count of
 * the content alone undercounts a request; these constants close most of the gap.
 *
 * Formula per message: `perMessage + (sender name ? perName : 0) + Σ parts`, where a tool call
 * costs `perToolCall + tokens(name) + tokens(arguments)`, a tool result `perToolResult +
 * tokens(name) + tokens(plain text)`, an image `imageLow` (LOW detail) or `imageHigh` (otherwise),
 * a file `perFile`. Per request: `perRequest` (reply priming), plus, when tool definitions are
 * present, `toolsPreamble + Σ (perToolDefinition + tokens(name) + tokens(description) +
 * tokens(parameters))`.
 *
 * Sources: OpenAI's published chat counting recipe (3 per message, 1 per name, 3 to prime the
 * reply; 85 tokens for a low-detail image, 765 for a 1024×1024 high-detail one); Anthropic
 * documents images at about (width × height) / 750 tokens, ~1,600 for a 1.15 MP image, and no
 * exact framing, so its framing mirrors OpenAI's; Gemini bills 258 tokens per image tile and
 * frames each content with role markers.
 */
export interface ProviderFraming {
  perMessage: number;
  perName: number;
  perRequest: number;
  perToolCall: number;
  perToolResult: number;
  imageLow: number;
  imageHigh: number;
  perFile: number;
  toolsPreamble: number;
  perToolDefinition: number;
}

const openAiFraming: ProviderFraming = {
  perMessage: 3,
  perName: 1,
  perRequest: 3,
  perToolCall: 3,
  perToolResult: 3,
  imageLow: 85,
  imageHigh: 765,
  perFile: 85,
  toolsPreamble: 12,
  perToolDefinition: 8,
};

const framings: Record<number, ProviderFraming> = {
  [Provider.UNSPECIFIED]: openAiFraming,
  [Provider.OPENAI_CHAT]: openAiFraming,
  // Responses items (message, function_call, function_call_output) are framed like chat messages.
  [Provider.OPENAI_RESPONSES]: openAiFraming,
  [Provider.ANTHROPIC_MESSAGES]: { ...openAiFraming, perName: 0, imageLow: 1_600, imageHigh: 1_600, perFile: 1_600 },
  [Provider.GEMINI]: { ...openAiFraming, perName: 0, imageLow: 258, imageHigh: 258, perFile: 258 },
};

/** The framing of `provider`; unknown providers get OpenAI Chat framing. */
export function providerFraming(provider: Provider): ProviderFraming {
  return framings[provider] ?? openAiFraming;
}

/** The image cost for a detail level under a framing. */
export function imageTokens(framing: ProviderFraming, detail: ImageDetail): number {
  return detail === ImageDetail.LOW ? framing.imageLow : framing.imageHigh;
}
