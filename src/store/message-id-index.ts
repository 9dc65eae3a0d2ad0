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
 * is counted, not just held; a commit that otherwise removes or replaces messages leaves it behind
 * (the next commit builds it again: that commit is linear in the conversation, as the edit was).
 */
export class MessageIdIndex {
  private constructor(
    private current: ConversationState,
    private readonly ids: Set<string>,
    /** Per segment, the ids of the calls its ASSISTANT messages make, each with how many calls make it (rounds reuse ids). */
    private readonly callIds: Record<StoredSegment, Map<string, number>>,
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
    const ids = new Set<string>();
    const callIds = { system: new Map<string, number>(), history: new Map<string, number>(), memory: new Map<string, number>(), tools: new Map<string, number>() };
    for (const segment of storedSegments) {
      for (const message of state[segment]) {
        ids.add(message.id);
        addCallIds(callIds[segment], message);
      }
    }
    return new MessageIdIndex(state, ids, callIds);
  }

  /** The state whose ids this holds. */
  get state(): ConversationState {
    return this.current;
  }

  /**
   * The ids of `state` when each of its segments extends this index's state (per `lineage`): the
   * index, plus the messages appended since looked up in place (a batch's own few). Undefined when
   * a segment is not known to extend it (the caller then looks in place).
   */
  lookupFor(state: ConversationState, lineage: MessageListLineage): MessageIdLookup | undefined {
    if (state === this.current) return this.ids;
    if (!this.extendedBy(state, lineage)) return undefined;
    const base = this.current;
    const ids = this.ids;
    return {
      has(id: string): boolean {
        if (ids.has(id)) return true;
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
    const calls = this.callIds[segment];
    if (state === this.current) return calls;
    const base = this.current[segment];
    const messages = state[segment];
    if (!lineage.extends(messages, base)) return undefined;
    return {
      has(callId: string): boolean {
        if (calls.has(callId)) return true;
        for (let index = base.length; index < messages.length; index++) if (makesCall(messages[index]!, callId)) return true;
        return false;
      },
    };
  }

  /**
   * This index moved on to `next` when each segment of `next` extends its state's (the appended
   * ids added) or is a head of it (the dropped ids removed), per `lineage`, for the store to keep
   * beside `next`; undefined otherwise. Costs the messages appended and dropped. The index then no
   * longer answers for the state it held before.
   */
  advancedTo(next: ConversationState, lineage: MessageListLineage): MessageIdIndex | undefined {
    if (next === this.current) return this;
    for (const segment of storedSegments) {
      if (!lineage.extends(next[segment], this.current[segment]) && !lineage.extends(this.current[segment], next[segment])) return undefined;
    }
    for (const segment of storedSegments) {
      const messages = next[segment];
      const was = this.current[segment];
      for (let index = was.length; index < messages.length; index++) {
        this.ids.add(messages[index]!.id);
        addCallIds(this.callIds[segment], messages[index]!);
      }
      // Ids are unique in a conversation, so a dropped message's id is free again.
      for (let index = messages.length; index < was.length; index++) {
        this.ids.delete(was[index]!.id);
        removeCallIds(this.callIds[segment], was[index]!);
      }
    }
    this.current = next;
    return this;
  }

  private extendedBy(state: ConversationState, lineage: MessageListLineage): boolean {
    for (const segment of storedSegments) if (!lineage.extends(state[segment], this.current[segment])) return false;
    return true;
  }
}

/** Counts the calls `message` makes, if it is an ASSISTANT message (as tool-round checks count them). */
function addCallIds(into: Map<string, number>, message: Message): void {
  if (message.role !== Role.ASSISTANT) return;
  for (const part of message.parts) if (part.kind.case === "toolCall") into.set(part.kind.value.id, (into.get(part.kind.value.id) ?? 0) + 1);
}

/** Uncounts the calls `message` makes (`addCallIds`), an id leaving once no call makes it. */
function removeCallIds(from: Map<string, number>, message: Message): void {
  if (message.role !== Role.ASSISTANT) return;
  for (const part of message.parts) {
    if (part.kind.case !== "toolCall") continue;
    const calls = (from.get(part.kind.value.id) ?? 0) - 1;
    if (calls > 0) from.set(part.kind.value.id, calls);
    else from.delete(part.kind.value.id);
  }
}

function makesCall(message: Message, callId: string): boolean {
  if (message.role !== Role.ASSISTANT) return false;
  for (const part of message.parts) if (part.kind.case === "toolCall" && part.kind.value.id === callId) return true;
  return false;
}
