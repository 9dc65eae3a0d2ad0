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
} from "#gen/contextd/v1/message_pb";
import type {
  AppendAssistant,
  AppendToolResult,
  AppendToolRound,
  AppendUser,
  CancelToolCalls,
  ConversationState,
  TruncateAssistant,
} from "#gen/contextd/v1/state_pb";
import { assertCompleteToolRound, findOpenToolRound, type HistoryUnit, type ToolRoundShape } from "../model/tool-rounds.js";
import type { DeltaContext } from "./delta-context.js";
import { prepareMessages, withAnsweredGivenIds } from "./message-preparation.js";
import { withAppendedMessages } from "./segment-operations.js";

// The agent mutations of the Python agent framework (semantics §2). Every one appends to history
// and keeps tool rounds whole; the texts of truncation and cancellation must match exactly.

export function appendToolRound(state: ConversationState, delta: AppendToolRound, context: DeltaContext): ConversationState {
  if (!delta.assistant) throw new ConnectError("assistant is required", Code.InvalidArgument);
  const [assistant] = prepareMessages(state, [delta.assistant], context, "assistant", Role.ASSISTANT);
  // Results without a call id answer the calls that came without one, in order, as in
  // append_messages: the assistant was prepared alone, so its given ids are handed on here.
  const given = givenCallIds(delta.assistant, assistant!);
  const answering = given.length === 0 ? delta.results : delta.results.map((result) => answeringGiven(result, given));
  // Checked against the state and the assistant (not a copy of history with it: the state's id
  // index, when the store keeps one, answers for the state alone).
  const results = prepareMessages(state, answering, context, "results", Role.TOOL, undefined, undefined, assistant!.id);
  assertCompleteToolRound(assistant!, results, "append_tool_round");
  assertNoOpenRound(state.history, "a new tool round", context);
  return withAppendedMessages(state, "history", [assistant!, ...results], context);
}

/** The ids the preparation gave `prepared`'s calls that `original` sent without one, in call order. */
function givenCallIds(original: Message, prepared: Message): string[] {
  const ids: string[] = [];
  original.parts.forEach((part, index) => {
    const stored = prepared.parts[index]?.kind;
    if (part.kind.case === "toolCall" && part.kind.value.id === "" && stored?.case === "toolCall") ids.push(stored.value.id);
  });
  return ids;
}

/** `result` with its call-id-less results answering `unanswered` (taken from it); the request's message is left as it was. */
function answeringGiven(result: Message, unanswered: string[]): Message {
  const parts = withAnsweredGivenIds(result.parts, unanswered);
  return parts === result.parts ? result : { ...result, parts };
}

/** Appends nothing when there is neither text nor a call; reasoning alone is not a turn. */
export function appendAssistant(state: ConversationState, delta: AppendAssistant, context: DeltaContext): ConversationState {
  if (delta.text === "" && delta.toolCalls.length === 0) return state;
  assertNoOpenRound(state.history, "an assistant message", context);
  const parts: Part[] = [
    ...delta.reasoning.map((reasoning) => create(PartSchema, { kind: { case: "reasoning", value: reasoning } })),
    ...(delta.text === "" ? [] : [textPart(delta.text)]),
    ...delta.toolCalls.map((call) => create(PartSchema, { kind: { case: "toolCall", value: call } })),
  ];
  const message = create(MessageSchema, { id: delta.messageId, role: Role.ASSISTANT, parts });
  return appendToHistory(state, message, context);
}

/**
 * Appends a TOOL message with the result. It usually answers an open call of the last assistant
 * message; it may also come later (after a user message while an approval was pending) or without
 * its call in this conversation (a detached run): both are stored, and the compile pairs the result
 * with the latest round that made the call and left it unanswered, or leaves it out (semantics,
 * "Tool rounds"). With `strictToolRounds` only an open call of the last assistant message may be
 * answered. An empty `name` is the call's.
 */
export function appendToolResult(state: ConversationState, delta: AppendToolResult, context: DeltaContext): ConversationState {
  if (delta.toolCallId === "") throw new ConnectError("tool_call_id is required", Code.InvalidArgument);
  const open = findOpenToolRound(state.history);
  const answersOpenCall = open !== undefined && open.round.missingCallIds.includes(delta.toolCallId);
  if (!answersOpenCall && context.strictToolRounds) {
    const openIds = open ? ` (open calls: ${quoteList(open.round.missingCallIds)})` : " (no tool round is open)";
    throw new ConnectError(`tool call "${delta.toolCallId}" is not an open call of the last assistant message${openIds}`, Code.InvalidArgument);
  }
  let name = delta.name;
  if (name === "") name = (answersOpenCall ? open!.round.callNames.get(delta.toolCallId) : latestCallName(state, delta.toolCallId, context)) ?? "";
  const result = create(ToolResultPartSchema, {
    toolCallId: delta.toolCallId,
    name,
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
  assertNoOpenRound(state.history, "a user message", context);
  const [message] = prepareMessages(state, [delta.message], context, "message", Role.USER);
  return withAppendedMessages(state, "history", [message!], context);
}

export function truncateAssistant(state: ConversationState, delta: TruncateAssistant, context: DeltaContext): ConversationState {
  assertNoOpenRound(state.history, "a truncated assistant message", context);
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

/**
 * The name of the latest call in history with this id, if any: walks back from the end, after
 * asking the caller's index (when it keeps one) whether any round made the call at all, and asks
 * the caller about the history before `state.history` when that holds only its tail.
 */
function latestCallName(state: ConversationState, callId: string, context: DeltaContext): string | undefined {
  if (context.toolCallIds?.(state, "history")?.has(callId) === false) return undefined;
  const history = state.history;
  for (let index = history.length - 1; index >= 0; index--) {
    const message = history[index]!;
    if (message.role !== Role.ASSISTANT) continue;
    for (const part of message.parts) if (part.kind.case === "toolCall" && part.kind.value.id === callId) return part.kind.value.name;
  }
  return context.headToolCallName?.(state, callId);
}

/**
 * In strict mode (`context.strictToolRounds`), rejects appending `what` after an open round,
 * listing the calls still waiting for results. Otherwise anything may follow an open round (the
 * approval flow, a detached resume); the compile closes it for the provider.
 */
export function assertNoOpenRound(history: readonly Message[], what: string, context: DeltaContext): void {
  if (!context.strictToolRounds) return;
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
