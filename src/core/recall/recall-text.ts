import type { Message, Part } from "#gen/contextd/v1/message_pb";
import { toolPayloadText } from "../model/payload-text.js";

/**
 * Why it exists: a recall searches and shows a stored message as one text, and both must read the
 * same text, so that an excerpt shows the words a search matched. Tool calls count with their name
 * and arguments and tool results with their name and output, because what an agent looks for in
 * its dropped history is mostly there: the paths it read, the commands it ran, the errors they gave.
 */

/** The text a recall searches and shows for `message`: its parts, one per line, in order. */
export function recallText(message: Message): string {
  const lines: string[] = [];
  appendParts(message.parts, lines);
  return lines.join("\n");
}

function appendParts(parts: readonly Part[], lines: string[]): void {
  for (const part of parts) {
    const kind = part.kind;
    switch (kind.case) {
      case "text":
        lines.push(kind.value.text);
        break;
      case "toolCall":
        lines.push(`tool call ${kind.value.name} (${kind.value.id}): ${toolPayloadText(kind.value.arguments)}`);
        break;
      case "toolResult":
        lines.push(`${kind.value.isError ? "tool error" : "tool result"} of ${kind.value.name} (${kind.value.toolCallId}): ${toolPayloadText(kind.value.payload)}`);
        appendParts(kind.value.contentParts, lines);
        break;
      case "reasoning":
        if (kind.value.text !== "") lines.push(`reasoning: ${kind.value.text}`);
        break;
      case "providerCompaction":
        if (kind.value.summary) lines.push(`provider compaction: ${kind.value.summary}`);
        break;
      case "image":
        lines.push("[image]");
        break;
      case "file":
        lines.push("[file]");
        break;
      default:
        break;
    }
  }
}

/** The tool a TOOL message answers or an assistant message calls, for a hit's header; "" for none. */
export function recallToolName(message: Message): string {
  for (const part of message.parts) {
    if (part.kind.case === "toolResult" || part.kind.case === "toolCall") return part.kind.value.name;
  }
  return "";
}
