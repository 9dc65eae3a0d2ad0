import { create } from "@bufbuild/protobuf";
import { MessageSchema, PartSchema, Role, ToolPayloadSchema, ToolResultPartSchema, type Message } from "#gen/contextd/v1/message_pb";

/**
 * The text of a tool call closed by cancellation (semantics §2, matching the agent framework
 * exactly): `<Tool execution cancelled by user. Tool: NAME.` + ` Reason: R` when given + `>`.
 */
export function cancelledToolResultText(toolName: string, abortReason: string): string {
  return `<Tool execution cancelled by user. Tool: ${toolName}.${abortReason === "" ? "" : ` Reason: ${abortReason}`}>`;
}

/** A TOOL message closing `toolCallId` as cancelled (`is_error` true). The id is left to the caller. */
export function cancelledToolResultMessage(toolCallId: string, toolName: string, abortReason: string): Message {
  const result = create(ToolResultPartSchema, {
    toolCallId,
    name: toolName,
    isError: true,
    payload: create(ToolPayloadSchema, { text: cancelledToolResultText(toolName, abortReason) }),
  });
  return create(MessageSchema, { role: Role.TOOL, parts: [create(PartSchema, { kind: { case: "toolResult", value: result } })] });
}
