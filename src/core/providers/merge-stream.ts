import { Code, ConnectError } from "@connectrpc/connect";
import { Provider } from "#gen/contextd/v1/message_pb";
import { mergeAnthropicStream } from "./anthropic/merge-stream.js";
import { mergeGeminiStream } from "./gemini/merge-stream.js";
import { mergeOpenAIChatStream } from "./openai-chat/merge-stream.js";
import { mergeOpenAIResponsesStream } from "./openai-responses/merge-stream.js";
import type { MergedStream } from "./stream-events.js";

/**
 * Merges a provider's streamed response events into the non-streaming body they stand for, so the
 * one body parser (`parseProviderResponse`) turns both into the same messages. Limits and the
 * event formats: `stream-events.ts` and the proto comment of `AppendProviderStream`.
 */
export function mergeProviderStream(provider: Provider, events: readonly Uint8Array[]): MergedStream {
  switch (provider) {
    case Provider.OPENAI_CHAT:
      return mergeOpenAIChatStream(events);
    case Provider.OPENAI_RESPONSES:
      return mergeOpenAIResponsesStream(events);
    case Provider.ANTHROPIC_MESSAGES:
      return mergeAnthropicStream(events);
    case Provider.GEMINI:
      return mergeGeminiStream(events);
    case Provider.UNSPECIFIED:
      throw new ConnectError("provider: a provider is required", Code.InvalidArgument);
    default:
      throw new ConnectError(`provider: unknown provider ${provider}`, Code.InvalidArgument);
  }
}
