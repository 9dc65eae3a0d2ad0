import { Code, ConnectError } from "@connectrpc/connect";
import { TransformationAction, TransformationReason } from "#gen/contextd/v1/compile_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import { withMessageText } from "../model/message-text.js";
import { segmentField, segmentName, type SegmentField } from "../model/segments.js";
import { setRecord, type CompileWork } from "./working-set.js";

/**
 * Stage 9: compile-only text swaps. The message's text parts are replaced by the given text in the
 * payload only (`formatted/text_replacement`); an id not in the named segment is INVALID_ARGUMENT.
 * Replacements apply in request order (a second one for the same message wins). Each segment
 * touched is copied and indexed by id once: a scan and a copy of the segment per replacement made
 * R replacements over n messages cost R × n.
 */
export async function applyTextReplacements(work: CompileWork): Promise<void> {
  const replacements = work.request.textReplacements;
  if (replacements.length === 0) return;
  const edited = new Map<SegmentField, { messages: Message[]; indexOf: Map<string, number> }>();
  for (const [index, replacement] of replacements.entries()) {
    const path = `text_replacements[${index}]`;
    const field = segmentField(replacement.segment, `${path}.segment`);
    let segment = edited.get(field);
    if (segment === undefined) {
      const messages = [...work.segments[field]];
      const indexOf = new Map<string, number>();
      // The first message with an id, as a scan from the start would find.
      messages.forEach((message, at) => indexOf.has(message.id) || indexOf.set(message.id, at));
      edited.set(field, (segment = { messages, indexOf }));
    }
    const at = segment.indexOf.get(replacement.messageId);
    if (at === undefined) {
      throw new ConnectError(
        `${path}.message_id: no message "${replacement.messageId}" in segment ${segmentName(replacement.segment)}`,
        Code.InvalidArgument,
      );
    }
    work.textAllowance.charge(replacement.text.length, `${path} (message "${replacement.messageId}")`);
    if (work.deadline.check("text_replacements")) await work.deadline.pause("text_replacements");
    segment.messages[at] = withMessageText(segment.messages[at]!, replacement.text);
    setRecord(work, replacement.messageId, TransformationAction.FORMATTED, TransformationReason.TEXT_REPLACEMENT, replacement.segment);
  }
  const segments = { ...work.segments };
  for (const [field, segment] of edited) segments[field] = segment.messages;
  work.segments = segments;
}
