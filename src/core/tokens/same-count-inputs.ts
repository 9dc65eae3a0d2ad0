import type { Message, Part, ToolPayload } from "#gen/contextd/v1/message_pb";

/**
 * True when every estimator must count `a` and `b` the same: equal role, sender name and, part by
 * part, equal texts, tool names and payload texts. Only the common part shapes are compared (text,
 * reasoning, tool calls, tool results without nested parts, payloads with text or data only);
 * anything else answers false, which only means "count it again", never a wrong count.
 *
 * Comparing two strings is a length check and a block compare; looking a freshly decoded text up in
 * the text count table hashes a sample of it first, so for a re-sent conversation this is the
 * cheaper way to learn that nothing changed.
 */
export function sameCountInputs(a: Message, b: Message): boolean {
  if (a === b) return true;
  if (a.role !== b.role || a.senderName !== b.senderName) return false;
  const partsA = a.parts;
  const partsB = b.parts;
  if (partsA.length !== partsB.length) return false;
  for (let index = 0; index < partsA.length; index++) if (!samePart(partsA[index]!, partsB[index]!)) return false;
  return true;
}

function samePart(a: Part, b: Part): boolean {
  const kindA = a.kind;
  const kindB = b.kind;
  switch (kindA.case) {
    case "text":
      return kindB.case === "text" && kindA.value.text === kindB.value.text;
    case "reasoning":
      return kindB.case === "reasoning" && kindA.value.text === kindB.value.text;
    case "toolCall":
      // The CHARS estimator reads the call id too.
      return (
        kindB.case === "toolCall" &&
        kindA.value.id === kindB.value.id &&
        kindA.value.name === kindB.value.name &&
        samePlainPayload(kindA.value.arguments, kindB.value.arguments)
      );
    case "toolResult":
      return (
        kindB.case === "toolResult" &&
        kindA.value.contentParts.length === 0 &&
        kindB.value.contentParts.length === 0 &&
        kindA.value.toolCallId === kindB.value.toolCallId &&
        kindA.value.name === kindB.value.name &&
        samePlainPayload(kindA.value.payload, kindB.value.payload)
      );
    default:
      return false;
  }
}

/** Equal payloads carrying at most `text` and `data` (the other variants answer false). */
function samePlainPayload(a: ToolPayload | undefined, b: ToolPayload | undefined): boolean {
  if (!a || !b) return a === b;
  return a.text === b.text && a.data === b.data && isPlain(a) && isPlain(b);
}

function isPlain(payload: ToolPayload): boolean {
  return !payload.error && !payload.progress && !payload.control && !payload.binary;
}
