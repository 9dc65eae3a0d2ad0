import { Code, ConnectError } from "@connectrpc/connect";
import { Provider, type Message } from "#gen/contextd/v1/message_pb";
import { parseAnthropicResponse } from "./anthropic/parse-response.js";
import { parseGeminiResponse } from "./gemini/parse-response.js";
import { parseOpenAIChatResponse } from "./openai-chat/parse-response.js";
import { parseOpenAIResponsesResponse } from "./openai-responses/parse-response.js";

/**
 * Parses a provider's non-streaming response body into typed ASSISTANT messages (text, tool calls
 * with their arguments as `ToolPayload.data` JSON text, reasoning with signatures, redacted data
 * and item ids byte for byte). The messages have no ids yet. A malformed or unknown shape is
 * INVALID_ARGUMENT naming the JSON path.
 *
 * `callIdSeed` only matters for Gemini, which may omit call ids: synthesized ids hash the seed with
 * the body, so pass something that differs per append (for example conversation id + version).
 */
export function parseProviderResponse(provider: Provider, json: Uint8Array, options: { callIdSeed?: string } = {}): Message[] {
  switch (provider) {
    case Provider.OPENAI_CHAT:
      return parseOpenAIChatResponse(json);
    case Provider.OPENAI_RESPONSES:
      return parseOpenAIResponsesResponse(json);
    case Provider.ANTHROPIC_MESSAGES:
      return parseAnthropicResponse(json);
    case Provider.GEMINI:
      return parseGeminiResponse(json, options.callIdSeed ?? "");
    case Provider.UNSPECIFIED:
      throw new ConnectError("append_provider_response.provider: a provider is required", Code.InvalidArgument);
    default:
      throw new ConnectError(`append_provider_response.provider: unknown provider ${provider}`, Code.InvalidArgument);
  }
}
