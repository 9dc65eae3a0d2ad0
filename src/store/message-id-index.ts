import { Role, type Message } from "#gen/contextd/v1/message_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import type { MessageIdLookup } from "../core/deltas/delta-context.js";
import type { MessageListLineage } from "../core/model/message-list-lineage.js";
import { storedSegments, type StoredSegment } from "./segment-edits.js";

/** Below this many messages a commit looks for its new ids in place; from it on, in an index. */
export const indexedFromMessages = 1_024;

/**
 * The ids of every message of one state of a conversation, kept by a store beside that state (the
 * in-memory store's current state, the Redis and Postgres stores' cached decoded state).
 *
 * Why it exists: every message a commit brings must have an id unused in the whole conversation.
 * Looked for in place, a one-message append to 100,000 stored messages compared 100,000 ids
 * (~5 ms of a ~11 ms Redis commit, bench:scale store commit lines); the index answers in constant
 * time and follows appends at the cost of the appended ids. It keeps the same for tool-call ids:
 * they need be unique only within their round (`call_0` on every turn is normal), so the set says
 * whether some round made a call, and `append_tool_result` walks back to the latest one only when
 * one did (a result for a call never made here is stored without walking 150,000 messages). Built once, on the first commit that
 * needs it; it follows a truncation the lineage knows of (a rewind to an earlier version, whose
 * history is a head of the current one) at the cost of the dropped ids, which is why a call id
 * is counted, not just held; and a removal by id (`remove_messages`) at the cost of the removed ids
 * (it was built again, ~28 ms at 100,000 messages on the next commit); a commit that otherwise
 * replaces messages leaves it behind (the next commit builds it again: linear in the conversation, as the edit was).
 */
export class MessageIdIndex {
  private constructor(
    private current: ConversationState,
    /** What this index shares with the indexes of forks (`sharedWith`): frozen, read under `own`. */
    private shared: FrozenIds | undefined,
    /** The ids and call counts since `shared` (all of them without it). */
    private own: IdChanges,
  ) {}

  /** The index of `state`'s ids, or undefined for a conversation short enough to look in place. */
  static of(state: ConversationState): MessageIdIndex | undefined {
    let messages = 0;
    for (const segment of storedSegments) messages += state[segment].length;
    if (messages < indexedFromMessages) return undefined;
    return MessageIdIndex.ofAll(state);
  }

  /** The index of `state`'s ids whatever its length (a commit's tail, tail-commit.ts). */
  static ofAll(state: ConversationState): MessageIdIndex {
    const own = emptyChanges();
    for (const segment of storedSegments) {
      for (const message of state[segment]) {
        own.added.add(message.id);
        countCalls(own.calls[segment], message, 1);
      }
    }
    return new MessageIdIndex(state, undefined, own);
  }

  /** The state whose ids this holds. */
  get state(): ConversationState {
    return this.current;
  }

  /**
   * The index of `fork`, whose segments are this index's state's own lists (a fork at the
   * current version shares them), sharing what this index holds instead of copying it: both go
   * on from the ids frozen now, each recording only its own changes. Why: a fork of a 100,000-
   * message conversation built its index whole on its first commit (20-34 ms, docs/history.md);
   * this costs nothing per message (a chain deeper than `maxSharedDepth` is merged once, O(ids)).
   * Undefined when `fork`'s segments are not this state's lists.
   */
  sharedWith(fork: ConversationState): MessageIdIndex | undefined {
    for (const segment of storedSegments) if (fork[segment] !== this.current[segment]) return undefined;
    let frozen: FrozenIds = { parent: this.shared, depth: (this.shared?.depth ?? 0) + 1, changes: this.own };
    if (frozen.depth > maxSharedDepth) frozen = merged(frozen);
    this.shared = frozen;
    this.own = emptyChanges();
    return new MessageIdIndex(fork, frozen, emptyChanges());
  }

  /**
   * The ids of `state` when each of its segments extends this index's state (per `lineage`): the
   * index, plus the messages appended since looked up in place (a batch's own few). Undefined when
   * a segment is not known to extend it (the caller then looks in place).
   */
  lookupFor(state: ConversationState, lineage: MessageListLineage): MessageIdLookup | undefined {
    const held: MessageIdLookup = { has: (id) => this.hasId(id) };
    if (state === this.current) return held;
    if (!this.extendedBy(state, lineage)) return undefined;
    const base = this.current;
    return {
      has(id: string): boolean {
        if (held.has(id)) return true;
        for (const segment of storedSegments) {
          const messages = state[segment];
          for (let index = base[segment].length; index < messages.length; index++) if (messages[index]!.id === id) return true;
        }
        return false;
      },
    };
  }

  /** `lookupFor` for the tool-call ids of `state`'s `segment` (see `callIds`). */
  toolCallLookupFor(state: ConversationState, segment: StoredSegment, lineage: MessageListLineage): MessageIdLookup | undefined {
    const held: MessageIdLookup = { has: (callId) => this.callsOf(segment, callId) > 0 };
    if (state === this.current) return held;
    const base = this.current[segment];
    const messages = state[segment];
    if (!lineage.extends(messages, base)) return undefined;
    return {
      has(callId: string): boolean {
        if (held.has(callId)) return true;
        for (let index = base.length; index < messages.length; index++) if (makesCall(messages[index]!, callId)) return true;
        return false;
      },
    };
  }

  /**
   * This index moved on to `next` when each segment of `next` extends its state's (the appended
   * ids added), is a head of it (the dropped ids removed) or extends it with some messages removed
   * (`MessageListLineage.removed`: those ids removed, then the appended added), per `lineage`, for the store to keep
   * beside `next`; undefined otherwise. Costs the messages appended and dropped. The index then no
   * longer answers for the state it held before.
   */
  advancedTo(next: ConversationState, lineage: MessageListLineage): MessageIdIndex | undefined {
    if (next === this.current) return this;
    const removals = new Map<StoredSegment, readonly number[]>();
    for (const segment of storedSegments) {
      if (lineage.extends(next[segment], this.current[segment]) || lineage.extends(this.current[segment], next[segment])) continue;
      const removed = lineage.removalFrom(next[segment], this.current[segment]);
      if (removed === undefined) return undefined;
      removals.set(segment, removed);
    }
    const { own } = this;
    for (const segment of storedSegments) {
      const messages = next[segment];
      const was = this.current[segment];
      const removed = removals.get(segment);
      // What `messages` shares with `was` before its appended messages.
      let kept = was.length;
      if (removed !== undefined) {
        // A removal (then appends): the removed ids go first, so that one appended again is taken.
        for (const position of removed) {
          const message = was[position]!;
          if (!own.added.delete(message.id)) own.removed.add(message.id);
          countCalls(own.calls[segment], message, -1);
        }
        kept = was.length - removed.length;
      }
      for (let index = kept; index < messages.length; index++) {
        const id = messages[index]!.id;
        // An id dropped from the shared ids comes back by no longer being dropped.
        if (!own.removed.delete(id)) own.added.add(id);
        countCalls(own.calls[segment], messages[index]!, 1);
      }
      // Ids are unique in a conversation, so a dropped message's id is free again.
      for (let index = messages.length; removed === undefined && index < was.length; index++) {
        const id = was[index]!.id;
        if (!own.added.delete(id)) own.removed.add(id);
        countCalls(own.calls[segment], was[index]!, -1);
      }
    }
    this.current = next;
    return this;
  }

  private hasId(id: string): boolean {
    if (this.own.added.has(id)) return true;
    if (this.own.removed.has(id)) return false;
    for (let layer = this.shared; layer !== undefined; layer = layer.parent) {
      if (layer.changes.added.has(id)) return true;
      if (layer.changes.removed.has(id)) return false;
    }
    return false;
  }

  /** How many calls of `segment` make `callId`: the counts of every layer added up. */
  private callsOf(segment: StoredSegment, callId: string): number {
    let calls = this.own.calls[segment].get(callId) ?? 0;
    for (let layer = this.shared; layer !== undefined; layer = layer.parent) calls += layer.changes.calls[segment].get(callId) ?? 0;
    return calls;
  }

  private extendedBy(state: ConversationState, lineage: MessageListLineage): boolean {
    for (const segment of storedSegments) if (!lineage.extends(state[segment], this.current[segment])) return false;
    return true;
  }
}

/**
 * The ids one index added and removed over the ids it shares (`added` never holds a shared id,
 * `removed` only shared ones), and per segment how the count of calls making each call id
 * changed (the counts themselves without shared ids).
 */
interface IdChanges {
  added: Set<string>;
  removed: Set<string>;
  calls: Record<StoredSegment, Map<string, number>>;
}

/** Changes frozen when an index was shared (`MessageIdIndex.sharedWith`), over their parent's; never changed again. */
interface FrozenIds {
  readonly parent: FrozenIds | undefined;
  readonly depth: number;
  readonly changes: IdChanges;
}

/** Layers a lookup walks at most: a fork of a fork of … shares until then, and the chain is merged into one once. */
const maxSharedDepth = 8;

function emptyChanges(): IdChanges {
  return { added: new Set(), removed: new Set(), calls: { system: new Map(), history: new Map(), memory: new Map(), tools: new Map() } };
}

/** `layer` and its parents as one layer of the ids they hold: O(ids), once per `maxSharedDepth` forks of forks. */
function merged(layer: FrozenIds): FrozenIds {
  const layers: FrozenIds[] = [];
  for (let at: FrozenIds | undefined = layer; at !== undefined; at = at.parent) layers.unshift(at);
  const changes = emptyChanges();
  for (const { changes: next } of layers) {
    for (const id of next.removed) changes.added.delete(id);
    for (const id of next.added) changes.added.add(id);
    for (const segment of storedSegments) {
      for (const [callId, delta] of next.calls[segment]) {
        const calls = (changes.calls[segment].get(callId) ?? 0) + delta;
        if (calls !== 0) changes.calls[segment].set(callId, calls);
        else changes.calls[segment].delete(callId);
      }
    }
  }
  return { parent: undefined, depth: 1, changes };
}

/** Adds `by` (1 or -1) to the count of each call `message` makes, if it is an ASSISTANT message (as tool-round checks count them); a count back at 0 leaves the map. */
function countCalls(into: Map<string, number>, message: Message, by: 1 | -1): void {
  if (message.role !== Role.ASSISTANT) return;
  for (const part of message.parts) {
    if (part.kind.case !== "toolCall") continue;
    const calls = (into.get(part.kind.value.id) ?? 0) + by;
    if (calls !== 0) into.set(part.kind.value.id, calls);
    else into.delete(part.kind.value.id);
  }
}

function makesCall(message: Message, callId: string): boolean {
  if (message.role !== Role.ASSISTANT) return false;
  for (const part of message.parts) if (part.kind.case === "toolCall" && part.kind.value.id === callId) return true;
  return false;
}
