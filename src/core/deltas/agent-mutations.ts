import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  MessageSchema,
  PartSchema,
  Role,
  ToolPayloadSchema,
  ToolResultPartSchema,
  type Message,
  type Part,
} from "../../../gen/ts/contextd/v1/message_pb.js";
import type {
  AppendAssistant,
  AppendToolResult,
  AppendToolRound,
  AppendUser,
  CancelToolCalls,
  ConversationState,
  TruncateAssistant,
} from "../../../gen/ts/contextd/v1/state_pb.js";
import { assertCompleteToolRound, findOpenToolRound, type HistoryUnit, type ToolRoundShape } from "../model/tool-rounds.js";
import type { DeltaContext } from "./delta-context.js";
import { prepareMessages } from "./message-preparation.js";
import { withAppendedMessages } from "./segment-operations.js";

// The agent mutations of the Python agent framework (semantics §2). Every one appends to history
// and keeps tool rounds whole; the texts of truncation and cancellation must match exactly.

export function appendToolRound(state: ConversationState, delta: AppendToolRound, context: DeltaContext): ConversationState {
  if (!delta.assistant) throw new ConnectError("assistant is required", Code.InvalidArgument);
  const [assistant] = prepareMessages(state, [delta.assistant], context, "assistant", Role.ASSISTANT);
  // Checked against the state and the assistant (not a copy of history with it: the state's id
  // index, when the store keeps one, answers for the state alone).
  const results = prepareMessages(state, delta.results, context, "results", Role.TOOL, undefined, undefined, assistant!.id);
  assertCompleteToolRound(assistant!, results, "append_tool_round");
  assertNoOpenRound(state.history, "a new tool round");
  return withAppendedMessages(state, "history", [assistant!, ...results], context);
}

/** Appends nothing when there is neither text nor a call; reasoning alone is not a turn. */
export function appendAssistant(state: ConversationState, delta: AppendAssistant, context: DeltaContext): ConversationState {
  if (delta.text === "" && delta.toolCalls.length === 0) return state;
  assertNoOpenRound(state.history, "an assistant message");
  const parts: Part[] = [
    ...delta.reasoning.map((reasoning) => create(PartSchema, { kind: { case: "reasoning", value: reasoning } })),
    ...(delta.text === "" ? [] : [textPart(delta.text)]),
    ...delta.toolCalls.map((call) => create(PartSchema, { kind: { case: "toolCall", value: call } })),
  ];
  const message = create(MessageSchema, { id: delta.messageId, role: Role.ASSISTANT, parts });
  return appendToHistory(state, message, context);
}

export function appendToolResult(state: ConversationState, delta: AppendToolResult, context: DeltaContext): ConversationState {
  if (delta.toolCallId === "") throw new ConnectError("tool_call_id is required", Code.InvalidArgument);
  const open = findOpenToolRound(state.history);
  if (!open || !open.round.missingCallIds.includes(delta.toolCallId)) {
    const openIds = open ? ` (open calls: ${quoteList(open.round.missingCallIds)})` : " (no tool round is open)";
    throw new ConnectError(`tool call "${delta.toolCallId}" is not an open call of the last assistant message${openIds}`, Code.InvalidArgument);
  }
  const result = create(ToolResultPartSchema, {
    toolCallId: delta.toolCallId,
    name: delta.name === "" ? (open.round.callNames.get(delta.toolCallId) ?? "") : delta.name,
    payload: delta.payload,
    isError: delta.isError,
    contentParts: delta.contentParts,
  });
  const message = create(MessageSchema, {
    id: delta.messageId,
    role: Role.TOOL,
    parts: [create(PartSchema, { kind: { case: "toolResult", value: result } })],
  });
  return appendToHistory(state, message, context);
}

export function appendUser(state: ConversationState, delta: AppendUser, context: DeltaContext): ConversationState {
  if (!delta.message) throw new ConnectError("message is required", Code.InvalidArgument);
  assertNoOpenRound(state.history, "a user message");
  const [message] = prepareMessages(state, [delta.message], context, "message", Role.USER);
  return withAppendedMessages(state, "history", [message!], context);
}

export function truncateAssistant(state: ConversationState, delta: TruncateAssistant, context: DeltaContext): ConversationState {
  assertNoOpenRound(state.history, "a truncated assistant message");
  const reason = delta.abortReason === "" ? "" : ` Reason: ${delta.abortReason}`;
  const text = `${delta.partialText}<Truncated due to cancel from user.${reason}>`;
  return appendToHistory(state, create(MessageSchema, { role: Role.ASSISTANT, parts: [textPart(text)] }), context);
}

/**
 * Closes open calls of the last assistant message with an error result each, after the results
 * that already arrived (those are kept). With no ids and nothing open there is nothing to do.
 */
export function cancelToolCalls(state: ConversationState, delta: CancelToolCalls, context: DeltaContext): ConversationState {
  const open = findOpenToolRound(state.history);
  if (!open) {
    if (delta.toolCallIds.length === 0) return state;
    throw new ConnectError(`cannot cancel ${quoteList(delta.toolCallIds)}: no tool round is open`, Code.InvalidArgument);
  }
  delta.toolCallIds.forEach((id, index) => {
    if (!open.round.missingCallIds.includes(id)) {
      throw new ConnectError(
        `tool_call_ids[${index}]: "${id}" is not an open call of the last assistant message (open calls: ${quoteList(open.round.missingCallIds)})`,
        Code.InvalidArgument,
      );
    }
  });
  const chosen = new Set(delta.toolCallIds.length === 0 ? open.round.missingCallIds : delta.toolCallIds);
  const reason = delta.abortReason === "" ? "" : ` Reason: ${delta.abortReason}`;
  const closing = open.round.missingCallIds
    .filter((id) => chosen.has(id))
    .map((id) => {
      const name = open.round.callNames.get(id) ?? "";
      const result = create(ToolResultPartSchema, {
        toolCallId: id,
        name,
        isError: true,
        payload: create(ToolPayloadSchema, { text: `<Tool execution cancelled by user. Tool: ${name}.${reason}>` }),
      });
      return create(MessageSchema, { role: Role.TOOL, parts: [create(PartSchema, { kind: { case: "toolResult", value: result } })] });
    });
  const prepared = prepareMessages(state, closing, context, "cancelled");
  return withAppendedMessages(state, "history", prepared, context);
}

function appendToHistory(state: ConversationState, message: Message, context: DeltaContext): ConversationState {
  const [prepared] = prepareMessages(state, [message], context, "message");
  return withAppendedMessages(state, "history", [prepared!], context);
}

/** Rejects appending `what` after an open round, listing the calls still waiting for results. */
export function assertNoOpenRound(history: readonly Message[], what: string): void {
  const open: (HistoryUnit & { round: ToolRoundShape }) | undefined = findOpenToolRound(history);
  if (open) {
    throw new ConnectError(
      `tool round still open, missing results for ${open.round.missingCallIds.join(", ")}; cannot append ${what} before they arrive or are cancelled`,
      Code.InvalidArgument,
    );
  }
}

function textPart(text: string): Part {
  return create(PartSchema, { kind: { case: "text", value: { text } } });
}

function quoteList(ids: readonly string[]): string {
  return ids.map((id) => `"${id}"`).join(", ");
}
