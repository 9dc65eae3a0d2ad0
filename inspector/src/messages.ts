import type { Message, Part } from "#gen/contextd/v1/message_pb";
import { Role } from "#gen/contextd/v1/message_pb";

/** One row of the history as shown: a message alone, or a tool round (the call and its results). */
export type HistoryItem = { kind: "message"; message: Message } | { kind: "round"; call: Message; results: Message[] };

/**
 * Groups an assistant message that calls tools with the tool messages after it that answer those
 * calls (by tool_call_id), in order; anything else stays a single message.
 */
export function groupToolRounds(history: readonly Message[]): HistoryItem[] {
  const items: HistoryItem[] = [];
  for (let index = 0; index < history.length; index++) {
    const message = history[index]!;
    const callIds = new Set(message.parts.flatMap((part) => (part.kind.case === "toolCall" ? [part.kind.value.id] : [])));
    if (callIds.size === 0) {
      items.push({ kind: "message", message });
      continue;
    }
    const results: Message[] = [];
    while (index + 1 < history.length && answers(history[index + 1]!, callIds)) results.push(history[++index]!);
    items.push({ kind: "round", call: message, results });
  }
  return items;
}

function answers(message: Message, callIds: ReadonlySet<string>): boolean {
  return message.parts.length > 0 && message.parts.every((part) => part.kind.case === "toolResult" && callIds.has(part.kind.value.toolCallId));
}

export function roleName(role: Role): string {
  return (Role[role] ?? String(role)).toLowerCase();
}

export function isSummary(message: Message): boolean {
  return message.provenance?.kind.case === "summary";
}

/** A part as one line of text. */
export function partText(part: Part): string {
  switch (part.kind.case) {
    case "text":
      return part.kind.value.text;
    case "reasoning":
      return `(reasoning) ${part.kind.value.text}`;
    case "toolCall":
      return `${part.kind.value.name}(${part.kind.value.arguments?.text || part.kind.value.arguments?.data || ""})`;
    case "toolResult": {
      const payload = part.kind.value.payload;
      return `${part.kind.value.isError ? "error: " : ""}${payload?.text || payload?.data || part.kind.value.contentParts.map(partText).join(" ")}`;
    }
    case "image":
      return "(image)";
    case "file":
      return "(file)";
    default:
      return "";
  }
}
