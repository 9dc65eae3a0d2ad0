import { Provider, type Message, type Part } from "#gen/contextd/v1/message_pb";
import { assistantMessage, reasoningPart, textPart, toolArgumentsPayload, toolCallPart } from "../assistant-message.js";
import { streamEventHint } from "../stream-events.js";
import { anthropicCompactionPart } from "../provider-compaction.js";
import { expectArray, expectObject, expectString, malformed, parseJsonObject } from "../json-reader.js";

/**
 * An Anthropic Messages response (`type: "message"`) → one ASSISTANT message with its blocks in
 * order: text, `thinking` (text + signature), `redacted_thinking` (data), `tool_use` (input as
 * compact JSON text), `compaction` (beta compaction: summary, encrypted content, signature and tool
 * changes as `ProviderCompactionPart`). Other block types (server tools, citations-only blocks) are INVALID_ARGUMENT:
 * contextd could not send them back faithfully.
 */
export function parseAnthropicResponse(json: Uint8Array): Message[] {
  const root = parseJsonObject(json, "Anthropic Messages");
  const type = expectString(root["type"], "type");
  if (type.startsWith("message_") || type.startsWith("content_block_")) throw malformed("type", streamEventHint(type));
  if (type !== "message") throw malformed("type", `expected "message", got "${type}"`);
  const role = expectString(root["role"], "role");
  if (role !== "assistant") throw malformed("role", `expected "assistant", got "${role}"`);
  const parts: Part[] = expectArray(root["content"], "content").map((value, index) => {
    const path = `content[${index}]`;
    const block = expectObject(value, path);
    const blockType = expectString(block["type"], `${path}.type`);
    switch (blockType) {
      case "text":
        return textPart(expectString(block["text"], `${path}.text`));
      case "thinking":
        return reasoningPart(Provider.ANTHROPIC_MESSAGES, {
          text: expectString(block["thinking"], `${path}.thinking`),
          signature: expectString(block["signature"], `${path}.signature`),
        });
      case "redacted_thinking":
        return reasoningPart(Provider.ANTHROPIC_MESSAGES, { redactedData: expectString(block["data"], `${path}.data`) });
      case "tool_use":
        return toolCallPart(
          expectString(block["id"], `${path}.id`),
          expectString(block["name"], `${path}.name`),
          toolArgumentsPayload(JSON.stringify(expectObject(block["input"], `${path}.input`))),
        );
      case "compaction":
        return anthropicCompactionPart(block, path);
      default:
        throw malformed(`${path}.type`, `unknown content block type "${blockType}"`);
    }
  });
  return parts.length > 0 ? [assistantMessage(parts)] : [];
}
