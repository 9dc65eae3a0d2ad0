import { Provider, type Message, type Part } from "#gen/contextd/v1/message_pb";
import { assistantMessage, reasoningPart, textPart, toolArgumentsPayload, toolCallPart } from "../assistant-message.js";
import { streamEventHint } from "../stream-events.js";
import { openAIResponsesCompactionPart } from "../provider-compaction.js";
import { expectArray, expectObject, expectString, malformed, optionalArray, optionalString, parseJsonObject } from "../json-reader.js";

/** Reasoning summary parts are joined into one `ReasoningPart.text` with this separator. */
export const reasoningSummarySeparator = "\n\n";

/**
 * An OpenAI Responses response (`object: "response"`) → one ASSISTANT message with its output items
 * in order: `message` text (output_text and refusal), `reasoning` (item id, summary text and
 * encrypted content byte for byte), `function_call` (call_id, name, arguments, and its item `id` as
 * `ToolCallPart.item_id`, which renderOpenAIResponses sends back), `compaction` (its id and
 * encrypted content as `ProviderCompactionPart`). Other item types (built-in tools) are
 * INVALID_ARGUMENT. `/responses/compact` answers `object: "response.compaction"` with the
 * conversation's user messages and one compaction item: that is a replacement for the stored
 * history, not an answer to append, and is refused with a hint.
 */
export function parseOpenAIResponsesResponse(json: Uint8Array): Message[] {
  const root = parseJsonObject(json, "OpenAI Responses");
  if (typeof root["type"] === "string" && root["type"].startsWith("response.")) throw malformed("type", streamEventHint(root["type"]));
  const object = expectString(root["object"], "object");
  if (object === "response.compaction") {
    throw malformed("object", "a /responses/compact answer replaces the conversation's input rather than answering it: append its compaction item (output item of type \"compaction\") with the messages you keep, or use context_management on responses.create");
  }
  if (object !== "response") throw malformed("object", `expected "response", got "${object}"`);
  const parts: Part[] = [];
  expectArray(root["output"], "output").forEach((value, index) => {
    const path = `output[${index}]`;
    const item = expectObject(value, path);
    const type = expectString(item["type"], `${path}.type`);
    switch (type) {
      case "message": {
        const role = expectString(item["role"], `${path}.role`);
        if (role !== "assistant") throw malformed(`${path}.role`, `expected "assistant", got "${role}"`);
        expectArray(item["content"], `${path}.content`).forEach((contentValue, contentIndex) => {
          const contentPath = `${path}.content[${contentIndex}]`;
          const content = expectObject(contentValue, contentPath);
          const contentType = expectString(content["type"], `${contentPath}.type`);
          if (contentType === "output_text") parts.push(textPart(expectString(content["text"], `${contentPath}.text`)));
          else if (contentType === "refusal") parts.push(textPart(expectString(content["refusal"], `${contentPath}.refusal`)));
          else throw malformed(`${contentPath}.type`, `unknown message content type "${contentType}"`);
        });
        return;
      }
      case "reasoning": {
        const summary = optionalArray(item["summary"], `${path}.summary`).map((summaryValue, summaryIndex) => {
          const summaryPath = `${path}.summary[${summaryIndex}]`;
          return expectString(expectObject(summaryValue, summaryPath)["text"], `${summaryPath}.text`);
        });
        parts.push(
          reasoningPart(Provider.OPENAI_RESPONSES, {
            itemId: expectString(item["id"], `${path}.id`),
            text: summary.join(reasoningSummarySeparator),
            redactedData: optionalString(item["encrypted_content"], `${path}.encrypted_content`),
          }),
        );
        return;
      }
      case "function_call":
        parts.push(
          toolCallPart(
            expectString(item["call_id"], `${path}.call_id`),
            expectString(item["name"], `${path}.name`),
            toolArgumentsPayload(expectString(item["arguments"], `${path}.arguments`)),
            { itemId: optionalString(item["id"], `${path}.id`) },
          ),
        );
        return;
      case "compaction":
        parts.push(openAIResponsesCompactionPart(item, path));
        return;
      default:
        throw malformed(`${path}.type`, `unknown output item type "${type}"`);
    }
  });
  return parts.length > 0 ? [assistantMessage(parts)] : [];
}
