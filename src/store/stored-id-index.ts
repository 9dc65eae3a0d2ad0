import { Role, type Message } from "#gen/contextd/v1/message_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import type { MessageListLineage } from "../core/model/message-list-lineage.js";
import type { MessageIdIndex } from "./message-id-index.js";
import { segmentEdit, storedSegments } from "./segment-edits.js";

/**
 * What a commit changes in the id index a store keeps beside a conversation (Redis: a set of its
 * message ids and a hash of its history's call ids; Postgres: the tables `contextd_message_ids` and
 * `contextd_tool_calls`, migration 11; see docs/stores.md, "A commit planned on the stored tail"):
 * every message id of every segment, and per call id made by an ASSISTANT message of history the
 * name of the latest such call. Why it exists: a process that holds no copy of the conversation
 * plans an append on the stored tail (tail-commit.ts), and the index answers what the tail cannot
 * (is this id taken, what was that call named) without reading the head. Computed from the states
 * a commit has, in time proportional to what it writes. An edit of the history that is not an
 * append names each call id it touched by its latest call in the new history: a call id no call
 * makes any more (a rewind or prune dropping a tool round, the usual case: frameworks make each
 * call id once) is known from the in-process id index's counts (`MessageIdIndex.callCount`)
 * without a look; only a call id still made is looked for, from the end. Without the counts a
 * dropped round's call id was looked for in the whole kept history: 13 ms of a rewind at 100,000
 * messages.
 */
export interface IdIndexChanges {
  /**
   * "a": applied when the stored index is current (else left as it is, stale); "t" (a commit
   * planned on the tail): refused when the index is not current or an added id is in it; "b": the
   * index replaced by `addedIds` and `namedCalls` (a clear, a rebuild).
   */
  mode: "a" | "t" | "b";
  addedIds: string[];
  removedIds: string[];
  /** Pairs: call id, name. */
  namedCalls: string[];
  removedCalls: string[];
  /**
   * Every call the added messages of history make, in order, with the 1-based place in `addedIds`
   * of the message making it: the Postgres index keeps calls per stored row (migration 16), so it
   * needs where each is, not only the latest name.
   */
  madeCalls: { id: string; name: string; at: number }[];
}

/**
 * The changes a commit from `base` to `next` makes to the stored index (see `IdIndexChanges`); `mode`
 * "b" lists all of `next`. `baseIndex`, asked only for an edit of history that touches calls, is
 * the in-process id index of `base` when the store keeps one.
 */
export function idIndexChanges(
  base: ConversationState,
  next: ConversationState,
  lineage: MessageListLineage,
  mode: IdIndexChanges["mode"],
  baseIndex?: () => MessageIdIndex | undefined,
): IdIndexChanges {
  if (mode === "b") return wholeIndex(next);
  const changes: IdIndexChanges = { mode, addedIds: [], removedIds: [], namedCalls: [], removedCalls: [], madeCalls: [] };
  let changed = 0;
  let total = 0;
  for (const segment of storedSegments) {
    const before = base[segment];
    const after = next[segment];
    total += after.length;
    const edit = segmentEdit(before, after, lineage);
    if (edit === undefined) continue;
    const removed = edit.keepPrefix ? before.slice(edit.keep) : before.slice(0, before.length - edit.keep);
    for (const message of removed) changes.removedIds.push(message.id);
    for (const message of edit.messages) {
      changes.addedIds.push(message.id);
      if (segment === "history") forEachCall(message, (id, name) => changes.madeCalls.push({ id, name, at: changes.addedIds.length }));
    }
    changed += removed.length + edit.messages.length;
    if (segment !== "history") continue;
    if (removed.length === 0 && edit.keepPrefix) {
      // An append: its calls are the latest of their ids.
      const named = new Map<string, string>();
      for (const message of edit.messages) forEachCall(message, (id, name) => named.set(id, name));
      for (const [id, name] of named) changes.namedCalls.push(id, name);
      continue;
    }
    // Another edit: each call id it touched is named by its latest call in the new history, or gone.
    const touched = new Set<string>();
    for (const message of [...removed, ...edit.messages]) forEachCall(message, (id) => touched.add(id));
    if (touched.size === 0) continue;
    const counts = baseIndex?.();
    if (counts?.state === base) {
      // Made in `next` as often as in `base`, less the removed calls, plus the added ones.
      const made = new Map<string, number>();
      for (const id of touched) made.set(id, counts.callCount("history", id));
      for (const message of removed) forEachCall(message, (id) => made.set(id, made.get(id)! - 1));
      for (const message of edit.messages) forEachCall(message, (id) => made.set(id, made.get(id)! + 1));
      for (const [id, calls] of made) {
        if (calls > 0) continue;
        changes.removedCalls.push(id);
        touched.delete(id);
      }
      if (touched.size === 0) continue;
    }
    const latest = new Map<string, string>();
    for (let index = after.length - 1; index >= 0 && latest.size < touched.size; index--) {
      forEachCall(after[index]!, (id, name) => {
        if (touched.has(id) && !latest.has(id)) latest.set(id, name);
      });
    }
    for (const id of touched) {
      const name = latest.get(id);
      if (name === undefined) changes.removedCalls.push(id);
      else changes.namedCalls.push(id, name);
    }
  }
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
  const named = new Map<string, string>();
  for (const message of state.history) forEachCall(message, (id, name) => named.set(id, name));
  const namedCalls: string[] = [];
  for (const [id, name] of named) namedCalls.push(id, name);
  return { mode: "b", addedIds, removedIds: [], namedCalls, removedCalls: [], madeCalls };
}

/** Calls `use` for each call an ASSISTANT message makes (the calls the index keeps). */
function forEachCall(message: Message, use: (id: string, name: string) => unknown): void {
  if (message.role !== Role.ASSISTANT) return;
  for (const part of message.parts) if (part.kind.case === "toolCall") use(part.kind.value.id, part.kind.value.name);
}

/** The index changes as Redis script arguments: mode, then each list as its count and its items. */
export function idIndexArguments(changes: IdIndexChanges): string[] {
  const args: string[] = [changes.mode];
  for (const list of [changes.addedIds, changes.removedIds, changes.namedCalls, changes.removedCalls]) {
    args.push(String(list.length));
    for (const item of list) args.push(item);
  }
  return args;
}
