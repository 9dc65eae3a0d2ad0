import type { Message } from "#gen/contextd/v1/message_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import type { MessageListLineage } from "../core/model/message-list-lineage.js";
import { segmentCheck } from "../core/deltas/segment-operations.js";
import { assertValidExtension, trustHead } from "../core/model/tool-rounds.js";

/**
 * What a store writes for a commit, found by comparing the state before and after it: shared by
 * the stores that keep one row or list element per message (Redis, Postgres), so that an append
 * writes about the appended messages and nothing else.
 */

/** The segments stored one message per element or row, in the order both stores lay them out. */
export const storedSegments = ["system", "history", "memory", "tools"] as const;
export type StoredSegment = (typeof storedSegments)[number];

/**
 * How `after` differs from `before`, by message identity: undefined for the same messages;
 * otherwise how many to keep from the head (`keepPrefix`) or from the tail, and the messages to
 * write beside them. When `lineage` knows `after` was made by appending to `before` (every append
 * of core records it), the appended messages alone, in time proportional to them; when it knows
 * `after` is a prefix of `before` (a rewind's undone state, change-undo.ts), in constant time; otherwise linear
 * in the list (one identity comparison per message), with no allocation beyond the messages written.
 */
export function segmentEdit(before: readonly Message[], after: readonly Message[], lineage?: MessageListLineage): { keepPrefix: boolean; keep: number; messages: Message[] } | undefined {
  if (after === before) return undefined;
  if (lineage?.extends(after, before)) {
    return after.length === before.length ? undefined : { keepPrefix: true, keep: before.length, messages: after.slice(before.length) };
  }
  if (lineage?.extends(before, after)) return { keepPrefix: true, keep: after.length, messages: [] };
  const shorter = Math.min(before.length, after.length);
  const prefix = sharedHeadLength(before, after);
  if (prefix === before.length && prefix === after.length) return undefined;
  let suffix = 0;
  while (suffix < shorter - prefix && after[after.length - 1 - suffix] === before[before.length - 1 - suffix]) suffix++;
  if (prefix >= suffix) return { keepPrefix: true, keep: prefix, messages: after.slice(prefix) };
  return { keepPrefix: false, keep: suffix, messages: after.slice(0, after.length - suffix) };
}

/**
 * How many first messages `a` and `b` share (the same objects): what `lineage` knows of (in time
 * proportional to the lines it walks), then one identity comparison per further shared message.
 */
export function sharedHeadLength(a: readonly Message[], b: readonly Message[], lineage?: MessageListLineage): number {
  const shorter = Math.min(a.length, b.length);
  let prefix = a === b ? shorter : Math.min(shorter, lineage?.sharedPrefix(a, b) ?? 0);
  while (prefix < shorter && a[prefix] === b[prefix]) prefix++;
  return prefix;
}

/** Whether anything but the segments and the version differs (core shares what a batch left alone). */
export function restDiffers(before: ConversationState, after: ConversationState): boolean {
  for (const key of Object.keys(after) as (keyof ConversationState)[]) {
    if (key === "version" || (storedSegments as readonly string[]).includes(key)) continue;
    if (after[key] !== before[key]) return true;
  }
  return false;
}

/**
 * Records that `caughtUp`, a segment list a store read as `cached` followed by the messages stored
 * since, is valid as far as the store's commits check tool rounds (`segmentCheck`, strict or not),
 * checking only what the new messages can change (`assertValidExtension`). Without it, the next commit appended to a list it had never seen checked all of
 * it: a sidecar one version behind (round-robin) spent ~1.3 ms per commit at 10,000 messages
 * re-checking the history its peer had appended one message to. A list the check refuses (stored
 * under other rules) is left unrecorded: the next commit to it checks it whole, and answers as it would have.
 */
export function trustCaughtUpSegment(segment: StoredSegment, cached: readonly Message[], caughtUp: readonly Message[], strictToolRounds: boolean): void {
  try {
    assertValidExtension(cached, caughtUp, segment, segmentCheck(segment, { strictToolRounds }));
  } catch {
    // Left unrecorded (see above).
  }
}

/**
 * Records, for each segment of a rewound state `after` that `lineage` knows is a head of
 * `before`'s, that it passes the store's tool-round check when `before`'s did (`trustHead`), and
 * for one that extends `before`'s, what `trustCaughtUpSegment` records: either way the next commit
 * appended to it checks only what it appends (the whole 100,000-message history was analysed again).
 */
export function trustRewoundSegments(before: ConversationState, after: ConversationState, lineage: MessageListLineage, strictToolRounds: boolean): void {
  for (const segment of storedSegments) {
    if (after[segment] === before[segment]) continue;
    if (lineage.extends(before[segment], after[segment])) trustHead(before[segment], after[segment], segmentCheck(segment, { strictToolRounds }));
    else if (lineage.extends(after[segment], before[segment])) trustCaughtUpSegment(segment, before[segment], after[segment], strictToolRounds);
  }
}
