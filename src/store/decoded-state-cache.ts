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
 * Messages that the cached states of several conversations hold as the same objects: what a fork
 * at its source's current version shares with it, per stored segment a prefix of a line of lists
 * (`MessageListLineage.lineOf`). Weighed once, to its first holder still kept (the payer); the
 * others weigh only what they do not share. When the payer leaves or stops holding them, the next
 * holder weighs them: the heap keeps them as long as one cached state does.
 */
interface SharedMessages {
  /** Per stored segment (`storedSegments` order), the line and how many of its first messages. */
  readonly segments: readonly { line: object; length: number }[];
  /** Their weight (`approximateDecodedBytes` of the messages, without the list slots each holder has of its own). */
  readonly bytes: number;
  /** The conversations whose kept states hold them, in the order they took them up: the first pays. */
  readonly holders: Set<string>;
}

interface CachedState {
  state: ConversationState;
  ids?: MessageIdIndex;
  /** `approximateDecodedBytes` of the state, as if it shared nothing. */
  fullBytes: number;
  /** What it shares with other kept states; at most `maxSharesPerState`. */
  shares: SharedMessages[];
}

/**
 * Shared parts one state takes part in at most: a fork of a fork of … inherits each, and each
 * check of a newer state walks them (`holds`). Past it a fork weighs in full what is not shared in
 * the parts it took, as every fork did before.
 */
const maxSharesPerState = 8;
/** What one message's place in a list costs: each holder's lists are its own arrays. */
const listSlotBytes = 8;

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
 *
 * A fork's state and its source's share their messages (`rememberFork`), and each newer state of
 * either keeps sharing what it still starts with (`MessageListLineage.extendsLine`). Those are
 * weighed once (`SharedMessages`): weighed in full, a 100,000-message fork's copy (~85 MB) did not
 * fit beside its source's under the default 128 MiB, so the fork's first commit read it whole
 * (737 ms on Redis, 994 ms on Postgres, docs/history.md).
 */
export class DecodedStateCache {
  private readonly entries: ByteBoundedLru<string, CachedState>;

  constructor(
    maxStates: number,
    private readonly maxBytes: number,
    private readonly lineage: MessageListLineage,
  ) {
    this.entries = new ByteBoundedLru({ maxBytes, maxEntries: maxStates, keepNewest: true, evicted: (conversationId, entry) => this.release(conversationId, entry.shares) });
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
    const conversationId = state.conversationId;
    const was = this.entries.get(conversationId);
    const ids = was?.ids?.advancedTo(state, this.lineage);
    const shares: SharedMessages[] = [];
    const dropped: SharedMessages[] = [];
    for (const shared of was?.shares ?? []) (this.holds(state, shared) ? shares : dropped).push(shared);
    const entry: CachedState = { state, ids, fullBytes: approximateDecodedBytes(state, encodedBytes), shares };
    this.entries.set(conversationId, entry, this.weightOf(conversationId, entry));
    this.release(conversationId, dropped);
  }

  /**
   * Keeps `fork`, a state whose segments are the cached `source`'s own lists (a fork at its
   * current version), with an id index shared with the source's (`MessageIdIndex.sharedWith`),
   * weighing only what it does not share with the source: its rest, and its lists' slots. Only when
   * that fits beside the states kept, so a fork never pushes out its source (whose next commit
   * would then read it whole). False when not kept. `messageBytes` is the encoded messages' part of
   * `encodedBytes`.
   */
  rememberFork(source: ConversationState, fork: ConversationState, encodedBytes: number, messageBytes: number): boolean {
    // A state cached under the fork's id is of a conversation gone since (the fork created it anew).
    this.delete(fork.conversationId);
    const entry = this.entries.get(source.conversationId);
    const fullBytes = approximateDecodedBytes(fork, encodedBytes);
    const shared = entry?.state === source ? this.shareableBytes(entry, messageBytes) : { own: 0, taken: 0 };
    if (this.entries.bytes + Math.max(0, fullBytes - shared.taken - shared.own) > this.maxBytes) return false;
    const shares = entry?.state === source ? this.shareWithFork(entry, fork.conversationId, shared.own) : [];
    const ids = entry?.ids?.state === source ? entry.ids.sharedWith(fork) : undefined;
    const forkEntry: CachedState = { state: fork, ids, fullBytes, shares };
    this.entries.set(fork.conversationId, forkEntry, this.weightOf(fork.conversationId, forkEntry));
    return true;
  }

  /** Marks a cached state as just used, keeping it longer. */
  touch(conversationId: string): void {
    this.entries.use(conversationId);
  }

  delete(conversationId: string): void {
    const entry = this.entries.delete(conversationId);
    if (entry !== undefined) this.release(conversationId, entry.shares);
  }

  get size(): number {
    return this.entries.size;
  }

  /** What the states kept weigh together (`approximateDecodedBytes`, what they share counted once). */
  get keptBytes(): number {
    return this.entries.bytes;
  }

  /**
   * What a fork of `source`'s cached state shares with it: the bytes of the parts the source holds
   * that a fork takes up (`taken`), and of its other messages (`own`), which become one new part.
   */
  private shareableBytes(source: CachedState, messageBytes: number): { own: number; taken: number } {
    let messages = 0;
    for (const segment of storedSegments) messages += source.state[segment].length;
    const taken = source.shares.slice(0, maxSharesPerState).reduce((sum, shared) => sum + shared.bytes, 0);
    const own = source.shares.length < maxSharesPerState ? Math.max(0, messageBytes + messages * (decodedMessageOverheadBytes - listSlotBytes) - taken) : 0;
    return { own, taken };
  }

  /**
   * The parts `forkId`'s state shares with its source's cached one, the fork made a holder of each:
   * the source's, and its other messages (`ownBytes`) as one new part that the source pays for.
   */
  private shareWithFork(source: CachedState, forkId: string, ownBytes: number): SharedMessages[] {
    const state = source.state;
    if (ownBytes > 0) {
      const segments = storedSegments.map((segment) => ({ line: this.lineage.lineOf(state[segment]), length: state[segment].length }));
      source.shares.push({ segments, bytes: ownBytes, holders: new Set([state.conversationId]) });
    }
    const shares = source.shares.slice(0, maxSharesPerState);
    for (const shared of shares) shared.holders.add(forkId);
    return shares;
  }

  /** True when `state` still starts, in every segment, with the messages `shared` names. */
  private holds(state: ConversationState, shared: SharedMessages): boolean {
    return storedSegments.every((segment, index) => {
      const { line, length } = shared.segments[index]!;
      return length === 0 || this.lineage.extendsLine(state[segment], line, length);
    });
  }

  /** What `entry` weighs as `conversationId`'s: in full, less the shared parts another holder pays for. */
  private weightOf(conversationId: string, entry: CachedState): number {
    let bytes = entry.fullBytes;
    for (const shared of entry.shares) if (payerOf(shared) !== conversationId) bytes -= shared.bytes;
    return Math.max(0, bytes);
  }

  /**
   * `conversationId` no longer holds `shares` (its state left, or a newer one cut them): the next
   * holder of each it paid for weighs them from now on, which can push out other states.
   */
  private release(conversationId: string, shares: readonly SharedMessages[]): void {
    for (const shared of shares) {
      const paid = payerOf(shared) === conversationId;
      shared.holders.delete(conversationId);
      const payer = payerOf(shared);
      if (!paid || payer === undefined) continue;
      const entry = this.entries.get(payer);
      if (entry !== undefined) this.entries.reweigh(payer, this.weightOf(payer, entry));
    }
  }
}

function payerOf(shared: SharedMessages): string | undefined {
  for (const holder of shared.holders) return holder;
  return undefined;
}
