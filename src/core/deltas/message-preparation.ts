import { Code, ConnectError } from "@connectrpc/connect";
import { Role, type Message } from "#gen/contextd/v1/message_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import { assertMessageJsonDepth } from "../model/json-depth.js";
import { assertToolArgumentsAreObjects, firstInvalidToolCall, keepsStoredInvalidCalls } from "../model/tool-call-arguments.js";
import type { DeltaContext, MessageIdLookup } from "./delta-context.js";

/**
 * Readies messages a delta brings into the state: every message needs a role and parts whose
 * variant is set, tool-call arguments must be JSON objects (what providers take; a call stored
 * otherwise could never be rendered), messages without an id get one from the injected id source,
 * tool calls without an id get `givenToolCallId(message id, n)` (and a result without a call id
 * later in the same list answers the first such call still unanswered), and ids must stay unique across all segments of the conversation (a compile of the state would
 * reject duplicates).
 * `where` names the field the messages came from, for error messages ("messages", "results"); a
 * singular message field ("message", "assistant", "summary") is named without an index, as the
 * field path of a BadRequest violation must be (`append_user.message.role`).
 * `defaultRole` fills an unset role where the operation implies one (append_user → USER).
 * `replacedMessages` (replace_segment: the segment being replaced) may be stored again with the
 * invalid tool-call arguments they already had.
 */
const singularMessageFields: ReadonlySet<string> = new Set(["message", "assistant", "summary"]);

export function prepareMessages(
  state: ConversationState,
  messages: readonly Message[],
  context: DeltaContext,
  where: string,
  defaultRole?: Role,
  removedIds: ReadonlySet<string> = new Set(),
  replacedMessages: readonly Message[] = [],
  batchId?: string,
): Message[] {
  const inConversation = conversationHasId(state, removedIds, messages.length, context.messageIds?.(state));
  // `batchId`: a message the same delta brings before these (append_tool_round's assistant).
  const inBatch = new Set<string>(batchId === undefined ? [] : [batchId]);
  // Ids given to calls of this batch that had none, not yet answered: a result without a call id
  // later in the batch answers the first of them (a LangChain AIMessage and its ToolMessages).
  let unansweredGivenIds: string[] = [];
  // Ids of the summaries in the conversation and this batch, built only when a summary arrives.
  let summaryIds: Set<string> | undefined;
  return messages.map((message, index) => {
    const path = singularMessageFields.has(where) ? where : `${where}[${index}]`;
    let role = message.role;
    if (role === Role.UNSPECIFIED) {
      if (defaultRole === undefined) throw new ConnectError(`${path}.role is required`, Code.InvalidArgument);
      role = defaultRole;
    } else if (defaultRole !== undefined && role !== defaultRole) {
      throw new ConnectError(`${path}.role must be ${Role[defaultRole]} or unset, got ${Role[role] ?? role}`, Code.InvalidArgument);
    }
    message.parts.forEach((part, partIndex) => {
      if (part.kind.case === undefined) {
        throw new ConnectError(`${path}.parts[${partIndex}]: no content variant set`, Code.InvalidArgument);
      }
    });
    // Nothing stored may be too deep to render later.
    assertMessageJsonDepth(message, path);
    const id = message.id === "" ? context.newMessageId() : message.id;
    if (firstInvalidToolCall(message) && !keepsStoredInvalidCalls(message, replacedMessages)) assertToolArgumentsAreObjects(message, path, id);
    if (inBatch.has(id) || inConversation(id)) throw new ConnectError(`${path}: duplicate message id "${id}"`, Code.InvalidArgument);
    inBatch.add(id);
    if (message.provenance?.kind.case === "summary") {
      summaryIds ??= summaryIdsOf(state);
      const nested = message.provenance.kind.value.coveredMessageIds.find((covered) => summaryIds!.has(covered));
      if (nested !== undefined) {
        throw new ConnectError(
          `${path}.provenance.summary.covered_message_ids names "${nested}", which is a summary: a summary replaces an earlier one instead of covering it (take over its covered_message_ids and name it in replaced_summary_ids)`,
          Code.InvalidArgument,
        );
      }
      summaryIds.add(id);
    }
    let parts = message.parts;
    if (role === Role.ASSISTANT) {
      const given = withGivenCallIds(parts, id);
      if (given) {
        parts = given.parts;
        unansweredGivenIds = given.ids;
      } else if (hasToolCall(parts)) unansweredGivenIds = [];
    } else if (role === Role.TOOL && unansweredGivenIds.length > 0) {
      parts = withAnsweredGivenIds(parts, unansweredGivenIds);
    }
    return id === message.id && role === message.role && parts === message.parts ? message : { ...message, id, role, parts };
  });
}

/** Ids of the summary messages of every segment of `state`. */
function summaryIdsOf(state: ConversationState): Set<string> {
  const ids = new Set<string>();
  for (const segment of [state.system, state.history, state.memory, state.tools]) {
    for (const message of segment) if (message.provenance?.kind.case === "summary") ids.add(message.id);
  }
  return ids;
}

/**
 * The id a tool call without one is stored with: `call_<message id>_<n>`, n its place among the
 * message's tool calls (from 0). Deterministic, so a result committed later can name it, and unique
 * within its round (the round is one message); made of the message id's characters, so a UUID
 * message id gives an id every provider accepts.
 */
export function givenToolCallId(messageId: string, callIndex: number): string {
  return `call_${messageId}_${callIndex}`;
}

/** `parts` with every id-less tool call given its id, and those ids; undefined when every call has one. */
function withGivenCallIds(parts: Message["parts"], messageId: string): { parts: Message["parts"]; ids: string[] } | undefined {
  let given: Message["parts"] | undefined;
  const ids: string[] = [];
  let callIndex = 0;
  parts.forEach((part, index) => {
    if (part.kind.case !== "toolCall") return;
    if (part.kind.value.id === "") {
      const id = givenToolCallId(messageId, callIndex);
      given ??= parts.slice();
      given[index] = { ...part, kind: { case: "toolCall", value: { ...part.kind.value, id } } };
      ids.push(id);
    }
    callIndex++;
  });
  return given && { parts: given, ids };
}

/** `parts` with results that have no call id answering `unanswered` in order (taken from it). */
export function withAnsweredGivenIds(parts: Message["parts"], unanswered: string[]): Message["parts"] {
  let answered: Message["parts"] | undefined;
  parts.forEach((part, index) => {
    if (part.kind.case !== "toolResult" || part.kind.value.toolCallId !== "" || unanswered.length === 0) return;
    answered ??= parts.slice();
    answered[index] = { ...part, kind: { case: "toolResult", value: { ...part.kind.value, toolCallId: unanswered.shift()! } } };
  });
  return answered ?? parts;
}

function hasToolCall(parts: Message["parts"]): boolean {
  for (const part of parts) if (part.kind.case === "toolCall") return true;
  return false;
}

const segmentFields = ["system", "history", "memory", "tools"] as const;

/** Up to this many incoming messages, their ids are looked for in place instead of indexed. */
const largestBatchLookedUpInPlace = 8;

/**
 * Whether a message of the conversation other than those in `removedIds` has the id. A commit
 * usually brings one or two messages into a long conversation: looking for those few ids in place
 * costs ~2 µs at 1,000 messages, where indexing every id first cost ~50 µs, half of a commit's CPU
 * outside Redis. Larger batches (a replace_segment, an import) get the index.
 */
function conversationHasId(state: ConversationState, removedIds: ReadonlySet<string>, incoming: number, indexed: MessageIdLookup | undefined): (id: string) => boolean {
  if (indexed) return (id) => !removedIds.has(id) && indexed.has(id);
  if (incoming > largestBatchLookedUpInPlace) {
    const ids = new Set<string>();
    for (const field of segmentFields) for (const message of state[field]) if (!removedIds.has(message.id)) ids.add(message.id);
    return (id) => ids.has(id);
  }
  return (id) => {
    if (removedIds.has(id)) return false;
    for (const field of segmentFields) {
      const messages = state[field];
      for (let index = 0; index < messages.length; index++) if (messages[index]!.id === id) return true;
    }
    return false;
  };
}
