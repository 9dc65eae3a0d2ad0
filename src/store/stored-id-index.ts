import { Role, type Message } from "#gen/contextd/v1/message_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import type { MessageListLineage } from "../core/model/message-list-lineage.js";
import { segmentEdit, storedSegments } from "./segment-edits.js";

/**
 * What a commit changes in the id index a store keeps beside a conversation (Redis: per segment
 * list a hash of its message ids to their positions and one of its history calls; Postgres: per
 * storage, migration 16; see docs/stores.md, "A commit planned on the stored tail"): every message
 * id of every segment, and every call made by an ASSISTANT message of history with the message
 * making it. Why it exists: a process that holds no copy of the conversation plans an append on
 * the stored tail (tail-commit.ts), and the index answers what the tail cannot (is this id taken,
 * what was that call named) without reading the head. Computed from the states a commit has, in
 * time proportional to what it writes. Both stores key the index by where a message is stored, so
 * a call's latest name is the call at the highest position a conversation reads, and neither needs
 * it named here.
 */
export interface IdIndexChanges {
  /**
   * "a": applied when the stored index is current (else left as it is, stale); "t" (a commit
   * planned on the tail): refused when the index is not current or an added id is in it; "b": the
   * index replaced by `addedIds` and `madeCalls` (a clear, a rebuild).
   */
  mode: "a" | "t" | "b";
  /** The ids of the messages the commit writes, in segment order and in each in order (mode "b": every id of the new state). */
  addedIds: string[];
  /** The ids of the messages the commit removes, in segment order (the Redis script tells each segment's by its edit's counts). */
  removedIds: string[];
  /** Every call the added messages of history make, in order, with the 1-based place in `addedIds` of the message making it. */
  madeCalls: { id: string; name: string; at: number }[];
  /** Each call id the removed messages of history made, once: the Redis index drops their calls by position. */
  removedCalls: string[];
}

/** The changes a commit from `base` to `next` makes to the stored index (see `IdIndexChanges`); `mode` "b" lists all of `next`. */
export function idIndexChanges(base: ConversationState, next: ConversationState, lineage: MessageListLineage, mode: IdIndexChanges["mode"]): IdIndexChanges {
  if (mode === "b") return wholeIndex(next);
  const changes: IdIndexChanges = { mode, addedIds: [], removedIds: [], madeCalls: [], removedCalls: [] };
  const removedCalls = new Set<string>();
  let changed = 0;
  let total = 0;
  for (const segment of storedSegments) {
    const before = base[segment];
    const after = next[segment];
    total += after.length;
    const edit = segmentEdit(before, after, lineage);
    if (edit === undefined) continue;
    const removed = edit.keepPrefix ? before.slice(edit.keep) : before.slice(0, before.length - edit.keep);
    for (const message of removed) {
      changes.removedIds.push(message.id);
      if (segment === "history") forEachCall(message, (id) => removedCalls.add(id));
    }
    for (const message of edit.messages) {
      changes.addedIds.push(message.id);
      if (segment === "history") forEachCall(message, (id, name) => changes.madeCalls.push({ id, name, at: changes.addedIds.length }));
    }
    changed += removed.length + edit.messages.length;
  }
  changes.removedCalls = [...removedCalls];
  // Rewriting the index is cheaper than a change longer than it (a clear, a replaced history).
  return mode === "a" && changed > total ? wholeIndex(next) : changes;
}

/** The whole index of `state`. */
function wholeIndex(state: ConversationState): IdIndexChanges {
  const addedIds: string[] = [];
  const madeCalls: IdIndexChanges["madeCalls"] = [];
  for (const segment of storedSegments) {
    for (const message of state[segment]) {
      addedIds.push(message.id);
      if (segment === "history") forEachCall(message, (id, name) => madeCalls.push({ id, name, at: addedIds.length }));
    }
  }
  return { mode: "b", addedIds, removedIds: [], madeCalls, removedCalls: [] };
}

/** Calls `use` for each call an ASSISTANT message makes (the calls the index keeps). */
export function forEachCall(message: Message, use: (id: string, name: string) => unknown): void {
  if (message.role !== Role.ASSISTANT) return;
  for (const part of message.parts) if (part.kind.case === "toolCall") use(part.kind.value.id, part.kind.value.name);
}

/**
 * The index changes as Redis script arguments: mode, then the added ids, the removed ids, the made
 * calls (call id, name, place in the added ids: three items each) and the removed call ids, each
 * list as its count and its items.
 */
export function idIndexArguments(changes: IdIndexChanges): string[] {
  const args: string[] = [changes.mode];
  for (const list of [changes.addedIds, changes.removedIds]) {
    args.push(String(list.length));
    for (const item of list) args.push(item);
  }
  args.push(String(changes.madeCalls.length));
  for (const call of changes.madeCalls) args.push(call.id, call.name, String(call.at));
  args.push(String(changes.removedCalls.length));
  for (const id of changes.removedCalls) args.push(id);
  return args;
}
