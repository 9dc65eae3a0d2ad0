import { Code, ConnectError } from "@connectrpc/connect";
import { TransformationAction, TransformationReason } from "../../../gen/ts/contextd/v1/compile_pb.js";
import { withMessageText } from "../model/message-text.js";
import { segmentField, segmentName } from "../model/segments.js";
import { setRecord, type CompileWork } from "./working-set.js";

/**
 * Stage 8: compile-only text swaps. The message's text parts are replaced by the given text in the
 * payload only (`formatted/text_replacement`); an id not in the named segment is INVALID_ARGUMENT.
 */
export async function applyTextReplacements(work: CompileWork): Promise<void> {
  for (const [index, replacement] of work.request.textReplacements.entries()) {
    const path = `text_replacements[${index}]`;
    const field = segmentField(replacement.segment, `${path}.segment`);
    const messages = work.segments[field];
    const at = messages.findIndex((message) => message.id === replacement.messageId);
    if (at < 0) {
      throw new ConnectError(
        `${path}.message_id: no message "${replacement.messageId}" in segment ${segmentName(replacement.segment)}`,
        Code.InvalidArgument,
      );
    }
    work.textAllowance.charge(replacement.text.length, `${path} (message "${replacement.messageId}")`);
    if (work.deadline.check("text_replacements")) await work.deadline.pause("text_replacements");
    const next = [...messages];
    next[at] = withMessageText(messages[at]!, replacement.text);
    work.segments = { ...work.segments, [field]: next };
    setRecord(work, replacement.messageId, TransformationAction.FORMATTED, TransformationReason.TEXT_REPLACEMENT, replacement.segment);
  }
}
