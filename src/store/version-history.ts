import { Code, ConnectError } from "@connectrpc/connect";
import { equals } from "@bufbuild/protobuf";
import { setImmediate as nextTurn } from "node:timers/promises";
import { MessageSchema, type Message } from "#gen/contextd/v1/message_pb";
import type { Change } from "#gen/contextd/v1/conversation_service_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import { applyDeltas } from "../core/deltas/apply-deltas.js";
import { stringLimits } from "../core/model/string-limits.js";
import type { DeltaContext } from "../core/deltas/delta-context.js";
import { MessageListLineage } from "../core/model/message-list-lineage.js";
import { emptyConversationState, indexedLookups } from "./commit-plan.js";
import { MessageIdIndex } from "./message-id-index.js";
import type { ConversationStore } from "./conversation-store.js";
import { storedSegments } from "./segment-edits.js";
import { requireStorableKey } from "./store-errors.js";
import { undoable, undoMessages, undoneState } from "./change-undo.js";

/**
 * Past versions of a conversation, rebuilt from its change log. Why it exists: every store already
 * keeps the last changes of a conversation for `Watch` (the change log, `--history-retention-
 * versions` of them), and since a change records the ids the store assigned
 * (`Change.assigned_message_ids`), applying the logged deltas again from the empty state gives each
 * committed state back exactly. So version history is that log read from its start, not a second
 * copy of the states beside it: one owner, every store alike, no new stored thing. A version is
 * readable while the log still holds every change from the conversation's first (or its fork's
 * first, whose base is the source's history) up to it; what it costs is the changes read and
 * applied, bounded by `HistoryLimits`.
 */

/** What one read of a past version may cost. */
export interface HistoryLimits {
  /**
   * Messages the logged deltas one read applies may bring at most, all changes together
   * (`--history-read-messages`; RESOURCE_EXHAUSTED naming it): what bounds a read's work, since
   * every change is bounded by the request that brought it.
   */
  maxReplayMessages: number;
  /** Forks of forks one read follows back to their first source at most. */
  maxForkDepth: number;
  /**
   * Bytes the undo a commit records with its change may hold (`--history-undo-bytes`,
   * change-undo.ts): past it the change is not undoable. 0 = commits record no undo.
   */
  maxUndoBytes: number;
}

export const defaultHistoryLimits: HistoryLimits = { maxReplayMessages: 1_000_000, maxForkDepth: 16, maxUndoBytes: 1_048_576 };

/** What the history reads of a store: its versions and its change log (what Watch serves), and its lineage (what an undone head is recorded in). */
export type HistorySource = Pick<ConversationStore, "load" | "currentVersion" | "watch" | "lineage">;

/** The id index a replay keeps of its running state, and the lineage of the lists it appends. */
interface Replayed {
  lineage: MessageListLineage;
  index: MessageIdIndex | undefined;
}

/** Changes applied between two turns of the event loop, so a long replay never holds it. */
const changesPerTurn = 64;

/**
 * The state of `conversationId` at `version`: the current state when it is the current version,
 * else the current state with the logged undos of the changes since `version` applied newest first
 * (change-undo.ts), or, when one of them has no undo (logged by an older build, or past
 * `--history-undo-bytes`), rebuilt from the change log forward. OUT_OF_RANGE when `version` is past
 * the current one or before what the log can rebuild (naming the oldest readable version).
 */
export async function stateAtVersion(source: HistorySource, conversationId: string, version: bigint, limits: HistoryLimits = defaultHistoryLimits): Promise<ConversationState> {
  requireStorableKey("conversation_id", conversationId, stringLimits.id);
  if (version < 0n) throw new ConnectError(`at_version: must not be negative, got ${version}`, Code.InvalidArgument);
  if (version === 0n) return emptyConversationState(conversationId);
  const latest = await source.load(conversationId);
  const current = latest.version;
  if (version > current) {
    throw new ConnectError(`conversation "${conversationId}": version ${version} is past its current version ${current}`, Code.OutOfRange);
  }
  if (version === current) return latest;
  const budget = { messages: limits.maxReplayMessages };
  const backward = await changesSince(source, latest, version, limits, budget);
  if ("changes" in backward) return undoneState(latest, backward.changes, version, source.lineage);
  try {
    return await replay(source, conversationId, version, current, limits, budget, 0);
  } catch (error) {
    if (!(error instanceof ConnectError) || error.code !== Code.OutOfRange || typeof error.cause !== "string") throw error;
    // Neither way reaches it: the versions from the change without an undo on can still be read.
    throw outsideWindow(conversationId, version, current, `${backward.why}, and the log replayed forward does not reach it either: ${error.cause}`, backward.blocker);
  }
}

/**
 * The logged changes `version` + 1 up to `latest`'s version, when every one of them can be undone;
 * else why not (a change without an undo: the read replays forward instead), having weighed only
 * what it read against `budget`.
 */
async function changesSince(
  source: HistorySource,
  latest: ConversationState,
  version: bigint,
  limits: HistoryLimits,
  budget: { messages: number },
): Promise<{ changes: Change[] } | { why: string; blocker: bigint }> {
  const { conversationId, version: current } = latest;
  const changes: Change[] = [];
  const controller = new AbortController();
  try {
    for await (const change of source.watch(conversationId, version, controller.signal)) {
      if (change.version !== version + BigInt(changes.length) + 1n) {
        throw outsideWindow(conversationId, version, current, `its change log has version ${change.version} where ${version + BigInt(changes.length) + 1n} was expected`);
      }
      if (!undoable(change)) {
        const why = change.undo?.notUndoable;
        return { why: why ? `version ${change.version} cannot be undone: ${why}` : `version ${change.version} was logged without an undo (by an older build)`, blocker: change.version };
      }
      budget.messages -= undoMessages(change);
      if (budget.messages < 0) {
        throw new ConnectError(
          `conversation "${conversationId}": reading version ${version} undoes logged changes that bring back more than ${limits.maxReplayMessages} messages (the history read limit, --history-read-messages)`,
          Code.ResourceExhausted,
        );
      }
      changes.push(change);
      if (change.version >= current) break;
      if (changes.length % changesPerTurn === 0) await nextTurn();
    }
  } catch (error) {
    // The log no longer holds the change after `version` (Watch's OUT_OF_RANGE): outside the window.
    if (!(error instanceof ConnectError) || error.code !== Code.OutOfRange || changes.length > 0) throw error;
    const oldest = await oldestLogged(source, conversationId, current);
    throw outsideWindow(conversationId, version, current, `its change log starts at version ${oldest}`, oldest - 1n);
  } finally {
    controller.abort();
  }
  if (changes.at(-1)?.version !== current) throw outsideWindow(conversationId, version, current, "its change log does not reach the current version");
  return { changes };
}

/**
 * The state at `version` (0 < version < the current one) rebuilt by applying the change log forward
 * from the conversation's first version, undos left aside: what a read does when a change since
 * `version` has no undo, and what the contract suite compares the backward reads with.
 */
export async function replayedState(source: HistorySource, conversationId: string, version: bigint, limits: HistoryLimits = defaultHistoryLimits): Promise<ConversationState> {
  const current = await source.currentVersion(conversationId);
  return replay(source, conversationId, version, current, limits, { messages: limits.maxReplayMessages }, 0);
}

/** Rebuilds `version` (0 < version < current) from the log; `budget` is shared by the forks it follows. */
async function replay(
  source: HistorySource,
  conversationId: string,
  version: bigint,
  current: bigint,
  limits: HistoryLimits,
  budget: { messages: number },
  depth: number,
): Promise<ConversationState> {
  const changes = await loggedChanges(source, conversationId, version, current, limits, budget);
  // Only the states a later rewind in the read returns to are kept beside the running one.
  const rewindTargets = new Set<bigint>();
  for (const change of changes) if (change.rewoundToVersion !== undefined) rewindTargets.add(change.rewoundToVersion);
  const kept = new Map<bigint, ConversationState>([[0n, emptyConversationState(conversationId)]]);
  let state = kept.get(0n)!;
  // The ids of the state so far, moved on by each append, as a store keeps them for its commits:
  // looked up in place, each append of a replay compared every stored id.
  const ids: Replayed = { lineage: new MessageListLineage(), index: undefined };
  for (const [index, change] of changes.entries()) {
    if (index > 0 && index % changesPerTurn === 0) await nextTurn();
    state = await applyChange(source, conversationId, state, change, kept, current, limits, budget, depth, ids);
    ids.index = ids.index?.advancedTo(state, ids.lineage) ?? MessageIdIndex.of(state);
    if (rewindTargets.has(change.version)) kept.set(change.version, state);
  }
  return state;
}

/** The state after `change`, from the state before it. */
async function applyChange(
  source: HistorySource,
  conversationId: string,
  before: ConversationState,
  change: Change,
  kept: Map<bigint, ConversationState>,
  current: bigint,
  limits: HistoryLimits,
  budget: { messages: number },
  depth: number,
  ids: Replayed,
): Promise<ConversationState> {
  if (change.forkedFrom !== undefined) {
    const origin = change.forkedFrom;
    if (depth + 1 > limits.maxForkDepth) {
      throw new ConnectError(
        `conversation "${conversationId}": its forks reach back more than ${limits.maxForkDepth} conversations (the fork depth a history read follows); versions before its current ${current} cannot be read`,
        Code.OutOfRange,
      );
    }
    let source_: ConversationState;
    try {
      const sourceCurrent = await source.currentVersion(origin.conversationId);
      source_ =
        origin.version === sourceCurrent
          ? await source.load(origin.conversationId)
          : origin.version > sourceCurrent
            ? (() => { throw new ConnectError(`version ${origin.version} is past its current ${sourceCurrent}`, Code.OutOfRange); })()
            : await replay(source, origin.conversationId, origin.version, sourceCurrent, limits, budget, depth + 1);
    } catch (error) {
      if (!(error instanceof ConnectError) || error.code !== Code.OutOfRange) throw error;
      throw outsideWindow(conversationId, change.version, current, `it was forked from "${origin.conversationId}" at version ${origin.version}, which that conversation's history no longer holds (${error.rawMessage})`);
    }
    return { ...source_, conversationId, version: change.version, forkedFrom: origin };
  }
  if (change.rewoundToVersion !== undefined) {
    const target = kept.get(change.rewoundToVersion);
    if (target === undefined) throw outsideWindow(conversationId, change.version, current, `version ${change.version} rewound to version ${change.rewoundToVersion}, which the log no longer holds`);
    return rewoundState(before, target, change.version);
  }
  const assigned = change.assignedMessageIds;
  let next = 0;
  const context: DeltaContext = {
    newMessageId: () => {
      if (next < assigned.length) return assigned[next++]!;
      throw outsideWindow(conversationId, change.version, current, `version ${change.version} was committed before the store recorded the ids it assigned`);
    },
    ...indexedLookups(ids.lineage, () => ids.index),
  };
  return { ...applyDeltas(before, change.deltas, context), conversationId, version: change.version };
}

/**
 * The state a rewind to `target` commits on top of `base`: the target's contents and metadata at
 * the new version, with the larger experience counter so an experience id is never given twice,
 * and the conversation's fork origin (a conversation's, not a version's).
 */
export function rewoundState(base: ConversationState, target: ConversationState, version: bigint): ConversationState {
  const lastExperienceNumber = base.lastExperienceNumber > target.lastExperienceNumber ? base.lastExperienceNumber : target.lastExperienceNumber;
  return { ...target, conversationId: base.conversationId, version, lastExperienceNumber, forkedFrom: base.forkedFrom };
}

/**
 * `target` with every segment message that equals the message at the same position of `base`
 * replaced by `base`'s object, from the head and from the tail: a store writes by message
 * identity (`segmentEdit`), so a rewind to a version whose history is a prefix of the current one
 * trims the list instead of writing it again. Costs one comparison per message, except for a
 * segment `lineage` knows is a head of `base`'s or `base`'s followed by more (`undoneState`): nothing to share.
 */
export function sharedWith(base: ConversationState, target: ConversationState, lineage?: MessageListLineage): ConversationState {
  const shared = { ...target };
  for (const segment of storedSegments) {
    const before = base[segment];
    const after = target[segment];
    if (before === after || before.length === 0 || after.length === 0) continue;
    // A head of `base` is `base`'s objects; `base` followed by messages it does not hold has nothing to share.
    if (lineage !== undefined && (lineage.extends(before, after) || lineage.extends(after, before))) continue;
    const messages = after.slice();
    let head = 0;
    while (head < messages.length && head < before.length && sameMessage(messages[head]!, before[head]!)) messages[head] = before[head]!, head++;
    for (let tail = 1; tail <= messages.length - head && tail <= before.length - head; tail++) {
      const at = messages.length - tail;
      const was = before.length - tail;
      if (!sameMessage(messages[at]!, before[was]!)) break;
      messages[at] = before[was]!;
    }
    shared[segment] = messages;
  }
  return shared;
}

function sameMessage(a: Message, b: Message): boolean {
  return a === b || (a.id === b.id && equals(MessageSchema, a, b));
}

/** The logged changes 1..`version`, all of them, within the replay budget. */
async function loggedChanges(source: HistorySource, conversationId: string, version: bigint, current: bigint, limits: HistoryLimits, budget: { messages: number }): Promise<Change[]> {
  const changes: Change[] = [];
  const controller = new AbortController();
  try {
    for await (const change of source.watch(conversationId, 0n, controller.signal)) {
      if (change.version !== BigInt(changes.length) + 1n) {
        throw outsideWindow(conversationId, version, current, `its change log starts at version ${change.version}`);
      }
      budget.messages -= loggedMessages(change);
      if (budget.messages < 0) {
        throw new ConnectError(
          `conversation "${conversationId}": rebuilding version ${version} applies more than ${limits.maxReplayMessages} logged messages (the history read limit, --history-read-messages)`,
          Code.ResourceExhausted,
        );
      }
      changes.push(change);
      if (change.version >= version) break;
    }
  } finally {
    controller.abort();
  }
  if (changes.length === 0 || changes.at(-1)!.version !== version) throw outsideWindow(conversationId, version, current, "its change log does not reach it");
  return changes;
}

/** What a logged change weighs against the replay budget: the messages its deltas bring (at least 1 a delta). */
function loggedMessages(change: Change): number {
  let messages = 0;
  for (const { operation } of change.deltas) {
    switch (operation.case) {
      case "appendMessages":
      case "replaceSegment":
        messages += Math.max(1, operation.value.messages.length);
        break;
      case "appendToolRound":
        messages += 1 + operation.value.results.length;
        break;
      case "appendProviderStream":
        messages += Math.max(1, operation.value.events.length);
        break;
      default:
        messages += 1;
    }
  }
  return messages;
}

/** The version of the oldest change the log holds (`current` + 1 when it holds none). */
async function oldestLogged(source: HistorySource, conversationId: string, current: bigint): Promise<bigint> {
  const controller = new AbortController();
  try {
    for await (const change of source.watch(conversationId, 0n, controller.signal)) return change.version;
  } finally {
    controller.abort();
  }
  return current + 1n;
}

/** OUT_OF_RANGE naming why and the oldest readable version (`oldest`, the current one by default); `why` is its cause. */
function outsideWindow(conversationId: string, version: bigint, current: bigint, why: string, oldest = current): ConnectError {
  return new ConnectError(
    `conversation "${conversationId}": version ${version} is outside its history window (${why}); the oldest readable version is ${oldest}${oldest === current ? ", the current one" : ""}`,
    Code.OutOfRange,
    undefined,
    undefined,
    why,
  );
}
