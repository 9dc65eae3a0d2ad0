import { Code, ConnectError } from "@connectrpc/connect";
import { Provider, type Message } from "../../../gen/ts/contextd/v1/message_pb.js";
import { parseOpenAIChatResponse } from "./openai-chat/parse-response.js";

/**
 * Parses a provider's non-streaming response body into typed ASSISTANT messages (text, tool calls
 * with their arguments as `ToolPayload.data` JSON text, reasoning with signatures, redacted data
 * and item ids byte for byte). The messages have no ids yet. A malformed or unknown shape is
 * INVALID_ARGUMENT naming the JSON path.
 */
export function parseProviderResponse(provider: Provider, json: Uint8Array): Message[] {
  switch (provider) {
    case Provider.OPENAI_CHAT:
      return parseOpenAIChatResponse(json);
    case Provider.OPENAI_RESPONSES:
    case Provider.ANTHROPIC_MESSAGES:
    case Provider.GEMINI:
      throw new ConnectError(`append_provider_response.provider: parsing ${Provider[provider]} responses is not implemented yet`, Code.Unimplemented);
    case Provider.UNSPECIFIED:
      throw new ConnectError("append_provider_response.provider: a provider is required", Code.InvalidArgument);
    default:
      throw new ConnectError(`append_provider_response.provider: unknown provider ${provider}`, Code.InvalidArgument);
  }
}
