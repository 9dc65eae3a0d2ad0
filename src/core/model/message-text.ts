import { create } from "@bufbuild/protobuf";
import { PartSchema, type Message, type Part } from "#gen/contextd/v1/message_pb";

/**
 * The text a message says: its text parts joined by "\n". Formatters, redaction, text
 * replacements and deferred `{{var}}` resolution operate on this text; other parts (images, tool
 * calls and results, reasoning, files) are carried along unchanged.
 */
export function messageText(message: Message): string {
  let text = "";
  let first = true;
  for (const part of message.parts) {
    if (part.kind.case !== "text") continue;
    text = first ? part.kind.value.text : text + "\n" + part.kind.value.text;
    first = false;
  }
  return text;
}

/** True when the message has at least one text part. */
export function hasTextPart(message: Message): boolean {
  return message.parts.some((part) => part.kind.case === "text");
}

/**
 * A copy of `message` whose text parts are replaced by one text part holding `text`, placed where
 * the first text part was (or first, when there was none). Non-text parts keep their order.
 * Messages are never mutated in the pipeline, so copies share unchanged parts safely.
 */
export function withMessageText(message: Message, text: string): Message {
  const textPart = create(PartSchema, { kind: { case: "text", value: { text } } });
  const parts: Part[] = [];
  let placed = false;
  for (const part of message.parts) {
    if (part.kind.case === "text") {
      if (!placed) parts.push(textPart);
      placed = true;
    } else {
      parts.push(part);
    }
  }
  if (!placed) parts.unshift(textPart);
  return { ...message, parts };
}

/** A copy of `message` with every text part passed through `transform` (other parts unchanged). */
export function mapTextParts(message: Message, transform: (text: string) => string): Message {
  let changed = false;
  const parts = message.parts.map((part) => {
    if (part.kind.case !== "text") return part;
    const text = transform(part.kind.value.text);
    if (text === part.kind.value.text) return part;
    changed = true;
    return { ...part, kind: { case: "text" as const, value: { ...part.kind.value, text } } };
  });
  return changed ? { ...message, parts } : message;
}
