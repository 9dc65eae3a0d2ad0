import type { ConversationState } from "#gen/contextd/v1/state_pb";
import { ByteBoundedLru } from "../core/byte-bounded-lru.js";
import type { MessageListLineage } from "../core/model/message-list-lineage.js";
import { MessageIdIndex } from "./message-id-index.js";
import { storedSegments } from "./segment-edits.js";

/** `--decoded-state-bytes`: what the decoded states a store keeps may weigh in the heap, approximately. */
export const defaultDecodedStateBytes = 128 * 1024 * 1024;
/** Conversations whose decoded states a store keeps at most, whatever their weight. */
export const defaultDecodedStates = 1_000;

/**
 * Heap bytes a decoded message costs beyond its encoding: its objects (message, part, the part's
 * oneof and body), their headers, and its entries in the id index. Measured with a forced GC
 * around decoding 20,000 stored entries, one shape per process: one text part of 20 / 250 / 4,000
 * characters took 642 / 874 / 4,618 heap bytes a message, against an estimate of 690 / 923 /
 * 4,673; eight parts of 20 characters took 2,210 against 872 (each further part ~220 bytes the
 * estimate does not see: it is low for messages of many short parts).
 */
export const decodedMessageOverheadBytes = 640;

/**
 * What a decoded state weighs in the heap, approximately: its encoding (strings decode into at most
 * as many bytes as their UTF-8 takes, one-byte strings for Latin-1 text) plus a fixed overhead per
 * message. O(1): the segments' lengths, not their messages, so a commit does not walk its history.
 */
export function approximateDecodedBytes(state: ConversationState, encodedBytes: number): number {
  let messages = 0;
  for (const segment of storedSegments) messages += state[segment].length;
  return encodedBytes + messages * decodedMessageOverheadBytes;
}

/**
 * The decoded states a store keeps in this process, the least recently used leaving first, bounded
 * by count and by what they weigh in the heap (`approximateDecodedBytes`). The byte bound is what
 * keeps memory in check: one state of a long conversation can weigh as much as thousands of short
 * ones, and decoded it takes about three times its encoding for ~250-byte messages (more for
 * shorter ones). It is counted by the decoded weight, not the encoding, so that
 * `--decoded-state-bytes` is what the heap holds for it (issue 30: a sidecar whose caches were
 * bounded by encodings reached 1.94 GB of heap). The newest state is kept even when it alone is
 * over the bound. Beside a state of a long conversation it keeps the index of its message ids
 * (`MessageIdIndex`, counted in the per-message overhead), carried forward to each newer state of
 * the conversation that extends it (per `lineage`).
 */
export class DecodedStateCache {
  private readonly entries: ByteBoundedLru<string, { state: ConversationState; ids?: MessageIdIndex }>;

  constructor(
    maxStates: number,
    private readonly maxBytes: number,
    private readonly lineage: MessageListLineage,
  ) {
    this.entries = new ByteBoundedLru({ maxBytes, maxEntries: maxStates, keepNewest: true });
  }

  get(conversationId: string): ConversationState | undefined {
    return this.entries.get(conversationId)?.state;
  }

  /**
   * The id index of `state` when it is the cached state of its conversation: the one kept, or one
   * built now (undefined for a conversation short enough to look in place, or a state not cached).
   */
  idIndex(state: ConversationState): MessageIdIndex | undefined {
    const entry = this.entries.get(state.conversationId);
    if (entry?.state !== state) return undefined;
    if (entry.ids?.state !== state) entry.ids = MessageIdIndex.of(state);
    return entry.ids;
  }

  /** Keeps `state`, `encodedBytes` long when encoded, as the most recently used. */
  remember(state: ConversationState, encodedBytes: number): void {
    const ids = this.entries.get(state.conversationId)?.ids?.advancedTo(state, this.lineage);
    this.entries.set(state.conversationId, { state, ids }, approximateDecodedBytes(state, encodedBytes));
  }

  /**
   * Keeps `fork`, a state whose segments are the cached `source`'s own lists (a fork at its
   * current version), with an id index shared with the source's (`MessageIdIndex.sharedWith`),
   * only when it fits beside the states kept: it is weighed in full, as the messages it shares
   * would be once the source leaves, so a fork never pushes out its source (whose next commit
   * would then read it whole). False when not kept.
   */
  rememberFork(source: ConversationState, fork: ConversationState, encodedBytes: number): boolean {
    const weight = approximateDecodedBytes(fork, encodedBytes);
    if (this.entries.bytes + weight > this.maxBytes) return false;
    const entry = this.entries.get(source.conversationId);
    const ids = entry?.state === source && entry.ids?.state === source ? entry.ids.sharedWith(fork) : undefined;
    this.entries.set(fork.conversationId, { state: fork, ids }, weight);
    return true;
  }

  /** Marks a cached state as just used, keeping it longer. */
  touch(conversationId: string): void {
    this.entries.use(conversationId);
  }

  delete(conversationId: string): void {
    this.entries.delete(conversationId);
  }

  get size(): number {
    return this.entries.size;
  }

  /** What the states kept weigh together (`approximateDecodedBytes`). */
  get keptBytes(): number {
    return this.entries.bytes;
  }
}
