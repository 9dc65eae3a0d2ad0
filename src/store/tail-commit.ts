import { Role, type Message } from "#gen/contextd/v1/message_pb";
import type { ConversationState, Delta } from "#gen/contextd/v1/state_pb";
import type { DeltaContext } from "../core/deltas/delta-context.js";
import { segmentCheck } from "../core/deltas/segment-operations.js";
import type { MessageListLineage } from "../core/model/message-list-lineage.js";
import { assertValidExtension } from "../core/model/tool-rounds.js";
import { MessageIdIndex } from "./message-id-index.js";

/**
 * A commit planned on the stored tail of a conversation's history instead of its whole state: what
 * a process that holds no copy of the conversation (a fresh sidecar, one with more conversations
 * than its caches) reads to commit an append. Why it exists: such a commit read and decoded the
 * whole state first — 740 ms of a 100,000-message conversation's first commit on a fresh sidecar
 * against 1.37 ms warm (`node dist/bench/fleet-cold-commit-parts.js`), and every turn of a
 * sidecar meeting 10,000 conversations in random order.
 *
 * What the batch's rules need of the history, and where the tail plan gets it:
 * - the tool round the batch may continue (open calls, the unit its extension is checked from):
 *   the tail starts at a message carrying no tool result, so every check that walks back from the
 *   end stops inside it, where it stops in the whole history;
 * - whether a message id is taken anywhere in the conversation: the store's id index, checked by
 *   the write itself, atomically with the version (an id taken makes the write refuse, and the
 *   commit is planned again on the whole state, which names it as before);
 * - the name of the latest call an `append_tool_result` answers far back: the store's call index,
 *   read with the tail for the calls the batch names (`headToolCallName`).
 * Anything else (an edit of the history, a clear, a summary, any error) is planned on the whole
 * state, so errors and stored states are those of a whole-state commit.
 */

/** Messages of history a tail read asks for first; 8x more each time the window is only tool results. */
export const tailWindowMessages = 64;
/** The longest window a tail read asks for before the commit reads the whole state instead. */
export const maxTailWindowMessages = 4_096;

/** What a store's tail read found (`CommitIo.readTail`). */
export interface TailRead {
  version: bigint;
  /** The idempotency key's record, when a key was given and the store keeps one. */
  record?: { fingerprint: string; version: bigint };
  /** The whole state, when the read had it all anyway (a conversation never written). */
  whole?: ConversationState;
  /** The tail to plan on; undefined (and no `whole`) = plan on the whole state (the store's id index not current among the reasons). */
  tail?: CommitTail;
}

/** A conversation's state whose history is only its stored tail. */
export interface CommitTail {
  /** At the stored version; `history` holds messages [start, length) of the stored history, the rest is whole. */
  state: ConversationState;
  start: number;
  length: number;
  /** Per call id the batch answers, the name of the latest call with it in the whole stored history (undefined: none). */
  headCallNames: ReadonlyMap<string, string | undefined>;
}

/** Thrown by a tail plan's lookups when the tail cannot answer: the commit is planned on the whole state. */
export class TailCannotDecide extends Error {}

/** The operations a tail plan decides as a whole-state plan would: appends, and changes of the state's rest. */
const appendingOperations: ReadonlySet<Delta["operation"]["case"]> = new Set([
  "appendMessages",
  "appendUser",
  "appendAssistant",
  "appendToolResult",
  "appendToolRound",
  "truncateAssistant",
  "cancelToolCalls",
  "appendProviderResponse",
  "appendProviderStream",
  "upsertArtifact",
  "removeArtifacts",
  "remember",
  "forget",
  "setToolDefinitions",
  "setMetadata",
]);

/**
 * Whether a tail plan may decide `deltas`: only appending operations, and no message that is a
 * summary (a summary's coverage is checked against every summary of the conversation).
 */
export function plannableOnTail(deltas: readonly Delta[]): boolean {
  for (const delta of deltas) {
    const operation = delta.operation;
    if (!appendingOperations.has(operation.case)) return false;
    if (broughtMessages(delta).some((message) => message.provenance?.kind.case === "summary")) return false;
  }
  return true;
}

/** The messages a delta brings as they are (the operations that build theirs make no summary). */
function broughtMessages(delta: Delta): readonly Message[] {
  const operation = delta.operation;
  switch (operation.case) {
    case "appendMessages":
      return operation.value.messages;
    case "appendUser":
      return operation.value.message ? [operation.value.message] : [];
    case "appendToolRound":
      return operation.value.assistant ? [operation.value.assistant, ...operation.value.results] : operation.value.results;
    default:
      return [];
  }
}

/** The call ids the batch's `append_tool_result` deltas answer without a name: the tail read looks their names up. */
export function answeredCallIds(deltas: readonly Delta[]): string[] {
  const ids = new Set<string>();
  for (const delta of deltas) if (delta.operation.case === "appendToolResult" && delta.operation.value.name === "") ids.add(delta.operation.value.toolCallId);
  return [...ids];
}

/**
 * Where in a window of history a tail may start: its first message that carries no tool result
 * (checks that walk back from the end stop there at the latest). -1 when every message carries one.
 */
export function tailStartIn(window: readonly Message[]): number {
  for (let index = 0; index < window.length; index++) {
    const message = window[index]!;
    if (message.role !== Role.TOOL && !message.parts.some((part) => part.kind.case === "toolResult")) return index;
  }
  return -1;
}

/**
 * Records the tail's history as valid for the commit's tool-round check (what was stored passed
 * it), checking the tail once; false when the check refuses it (stored under other rules: the
 * commit is planned on the whole state).
 */
export function trustTail(history: readonly Message[], strictToolRounds: boolean): boolean {
  try {
    assertValidExtension([], history, "history", segmentCheck("history", { strictToolRounds }));
    return true;
  } catch {
    return false;
  }
}

/**
 * The lookups a plan on `tail` applies its batch with: ids in the tail and what the batch appends
 * (the head's are checked by the store's write), call names in the head from `headCallNames`.
 */
export function tailLookups(tail: CommitTail, lineage: MessageListLineage): Pick<DeltaContext, "lineage" | "messageIds" | "toolCallIds" | "headToolCallName"> {
  let ids: MessageIdIndex | undefined;
  return {
    lineage,
    messageIds: (state) => (ids ??= MessageIdIndex.ofAll(tail.state)).lookupFor(state, lineage),
    // Walk the tail (and what the batch appended) first; the head is asked only after it.
    toolCallIds: () => undefined,
    headToolCallName: (_state, callId) => {
      if (!tail.headCallNames.has(callId)) throw new TailCannotDecide(`the tail read did not look up call "${callId}"`);
      return tail.headCallNames.get(callId);
    },
  };
}
