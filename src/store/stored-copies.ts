import { Code, ConnectError } from "@connectrpc/connect";
import { fromBinary } from "@bufbuild/protobuf";
import { randomUUID } from "node:crypto";
import type { Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, type ConversationState, type ForkOrigin } from "#gen/contextd/v1/state_pb";
import type { Codec } from "../codec/codec.js";
import type { RunningFacts } from "../codec/stored-token-counts.js";
import type { MessageListLineage } from "../core/model/message-list-lineage.js";
import { DecodedStateCache, defaultDecodedStateBytes, defaultDecodedStates } from "./decoded-state-cache.js";
import { heldWindowFacts, runningFactsOfWrite } from "./history-running-facts.js";
import { plainValues, type StoredValues } from "./at-rest-encryption.js";
import type { CommitCopies } from "./commit-engine.js";
import type { MessageIdIndex } from "./message-id-index.js";
import { restDiffers, segmentEdit, sharedHeadLength, storedSegments, trustCaughtUpSegment } from "./segment-edits.js";
import { windowOf, type SegmentWindow, type WindowQuery } from "./segment-window.js";
import { corruptConversation } from "./store-errors.js";
import { KeptTails, defaultKeptTailBytes, type KeptTail } from "./kept-tails.js";
import { maxTailWindowMessages, tailStartIn, tailWindowMessages, trustTail, type CommitTail } from "./tail-commit.js";

/**
 * The decoded copies a store of one element or row per message (Redis, Postgres) keeps of the
 * states it read or wrote, with where each stands in storage (`StoredLayout`), and the two
 * translations between them that both stores make alike: what a commit writes for a new state
 * (`writeOf`: per segment nothing, the appended messages, or the part beside the longer kept
 * head or tail) and the state a load's reply builds on top of the copy (`assemble`: only what the
 * copy lacks crossed the wire). Why it exists: both stores wrote these out, line for line; the
 * wire formats (script arguments, SQL arrays) are theirs alone.
 */

/** One segment list as stored: its last rewrite (the version that did more than append), its length, and its messages' encoded size. */
export interface SegmentLayout {
  at: string;
  length: number;
  bytes: number;
}

/** Where a state the process holds stands in storage, so a load sends only what it lacks, and its encoded size for the cache's byte bound. */
export interface StoredLayout {
  /** A random id written by the conversation's first commit: a copy never mixes lists of a conversation lost and recreated. */
  created: string;
  restAt: string;
  restBytes: number;
  /** In `storedSegments` order. */
  segments: SegmentLayout[];
}

/** What a commit writes to one segment: "=" nothing, "p" keep `keep` from the head, "s" from the tail, and write `encodings` beside them. */
export interface SegmentWrite {
  mode: "=" | "p" | "s";
  baseLength: number;
  keep: number;
  encodings: Buffer[];
}

/**
 * One segment of a fork at a past version (`StoredCopies.forkTails`): how many first messages of
 * the source's current list it shares, and the rest of the past segment, its own, with their
 * encodings for the fork.
 */
export interface ForkTail {
  shared: number;
  messages: readonly Message[];
  encodings: Buffer[];
}

/** What a commit writes, and the layout it leaves. */
export interface StoredWrite {
  created: string;
  /** The state's encoding without segments and version; undefined when unchanged. */
  rest: Buffer | undefined;
  /** In `storedSegments` order. */
  segments: SegmentWrite[];
  /** The bytes of messages and rest written. */
  bytes: number;
  layout: StoredLayout;
}

/** One segment as a load received it: the stored list's `at`, the messages from position `from` on. */
export interface ReceivedSegment {
  at: string;
  from: number;
  items: Buffer[];
  /** The stored length, when the reply says it apart from the items (checked against them). */
  length?: number;
  /** Per item, the conversation that sealed it when not this one (`Sealers`); none = every item is this conversation's. */
  sealers?: Sealers;
}

/**
 * Per stored entry of a read (same index as its items), the conversation that sealed it, where
 * that is not the reader: a shared row (Postgres migration 17) stays sealed for the conversation
 * that wrote it, named by the storage the row is read from. Undefined entries are the reader's.
 */
export type Sealers = readonly (string | undefined)[];

/** How a store names its parts in messages (DATA_LOSS details and internal errors). */
export interface StoredNames {
  /** "redis store: the load script", "postgres store: the load". */
  loader: string;
  /** The header as a message names it: "the header <key>", "the header row". */
  header(conversationId: string): string;
  /** The place of the rest in the header: "the header <key> field rest", "the header row's rest". */
  rest(conversationId: string): string;
  /** A segment list: "history list <key>", "history segment". */
  segment(conversationId: string, segment: string): string;
}

export interface StoredCopiesOptions {
  codec: Codec;
  lineage: MessageListLineage;
  /** Copies kept (default `defaultDecodedStates`). */
  cacheSize: number | undefined;
  /** Approximate heap bytes of the copies kept (`--decoded-state-bytes`; default `defaultDecodedStateBytes`). */
  cacheBytes: number | undefined;
  strictToolRounds: boolean;
  names: StoredNames;
  /** How entries and rests are kept: sealed under `--encryption-key-file` (at-rest-encryption.ts); as they are by default. */
  values?: StoredValues;
  /** Approximate heap bytes of the tails kept of conversations committed on without a copy (`--kept-tail-bytes`; default `defaultKeptTailBytes`; 0 keeps none). */
  keptTailBytes?: number;
}

/** A kept tail's call names of the head: none known, so a batch answering a call not in the tail reads the tail afresh. */
const noHeadCallNames: ReadonlyMap<string, string | undefined> = new Map();

export class StoredCopies implements CommitCopies {
  private readonly cache: DecodedStateCache;
  private readonly tails: KeptTails;
  private readonly layouts = new WeakMap<ConversationState, StoredLayout>();
  private readonly codec: Codec;
  private readonly lineage: MessageListLineage;
  private readonly names: StoredNames;
  /** Every stored entry and rest goes through it, both ways: the one place a store's contents become stored bytes. */
  readonly values: StoredValues;

  constructor(private readonly options: StoredCopiesOptions) {
    this.codec = options.codec;
    this.values = options.values ?? plainValues;
    this.lineage = options.lineage;
    this.names = options.names;
    this.cache = new DecodedStateCache(options.cacheSize ?? defaultDecodedStates, options.cacheBytes ?? defaultDecodedStateBytes, options.lineage);
    this.tails = new KeptTails(options.keptTailBytes ?? defaultKeptTailBytes);
  }

  /** The copy of the conversation's state kept, if any. */
  copy(conversationId: string): ConversationState | undefined {
    return this.cache.get(conversationId);
  }

  /** The kept copy with its layout: what a read may ask only the difference from. */
  withLayout(conversationId: string): { state: ConversationState; layout: StoredLayout } | undefined {
    const state = this.cache.get(conversationId);
    const layout = state && this.layouts.get(state);
    return layout && { state: state!, layout };
  }

  /** The id index of `base` when it is the kept copy (see `DecodedStateCache.idIndex`). */
  idIndex(_conversationId: string, base: ConversationState): MessageIdIndex | undefined {
    return this.cache.idIndex(base);
  }

  /** Keeps `state` (as stored per `layout`) as the conversation's copy. */
  remember(state: ConversationState, layout: StoredLayout): void {
    // The whole copy decides what a kept tail would.
    this.tails.delete(state.conversationId);
    this.layouts.set(state, layout);
    const messageBytes = layout.segments.reduce((sum, segment) => sum + segment.bytes, 0);
    // A fork the engine wrote (Redis Cluster, a fork into another tenant under encryption) holds
    // its source's lists as they are: weighed once with them, as a shared fork's copy is. Weighed
    // in full, a 100,000-message fork's copy pushed its source's out under the default bound.
    const source = state.forkedFrom !== undefined && state.version === 1n ? this.cache.get(state.forkedFrom.conversationId) : undefined;
    if (source !== undefined && storedSegments.every((segment) => source[segment] === state[segment]) && this.cache.rememberFork(source, state, messageBytes + layout.restBytes, messageBytes)) return;
    this.cache.remember(state, messageBytes + layout.restBytes);
  }

  /**
   * After the store forked the source's current version by sharing its lists or rows (the Redis
   * fork script, Postgres' `contextd_fork_shared`): the fork's copy is the held copy of the source
   * at `forkedFrom.version`, under the fork's id, at version 1, every segment and the rest as the
   * fork was written (`_at` 1, `created`, the rest with `addedRestBytes` appended). Why: without
   * it the fork's first commit that wants the state back read the fork whole (478 ms on Redis, 557
   * ms on Postgres at 100,000 messages, docs/history.md). The copy weighs only what it does not
   * share with the source's. Nothing when no such copy is held, or when the fork's copy does not
   * fit beside the copies kept (`DecodedStateCache.rememberFork`).
   */
  rememberFork(forkedFrom: ForkOrigin, newConversationId: string, created: string, addedRestBytes: number): void {
    const held = this.withLayout(forkedFrom.conversationId);
    if (held === undefined || held.state.version !== forkedFrom.version) return;
    const state: ConversationState = { ...held.state, conversationId: newConversationId, version: 1n, forkedFrom };
    const layout: StoredLayout = {
      created,
      restAt: "1",
      restBytes: held.layout.restBytes + addedRestBytes,
      segments: held.layout.segments.map((segment) => ({ ...segment, at: "1" })),
    };
    this.tails.delete(newConversationId);
    this.layouts.set(state, layout);
    const messageBytes = layout.segments.reduce((sum, segment) => sum + segment.bytes, 0);
    if (!this.cache.rememberFork(held.state, state, messageBytes + layout.restBytes, messageBytes)) this.layouts.delete(state);
  }

  /** Marks the copy as just used. */
  touch(conversationId: string): void {
    this.cache.touch(conversationId);
  }

  forget(conversationId: string): void {
    this.cache.delete(conversationId);
    this.tails.delete(conversationId);
  }

  /** The tail kept of a conversation committed on without a copy (kept-tails.ts), for the engine's next plan on it. */
  keptTail(conversationId: string): CommitTail | undefined {
    const tail = this.tails.get(conversationId);
    return tail && { ...tail, headCallNames: noHeadCallNames };
  }

  /** Keeps a tail a read found (`tailOf`), at its version; a write planned on it replaces it. */
  keepTail(tail: KeptTail): void {
    this.tails.keep(tail, this.encodedBytesOf(tail.state));
  }

  /** Forgets the kept tail (a write planned on it did not apply: the next commit reads the tail afresh). */
  dropTail(conversationId: string): void {
    this.tails.delete(conversationId);
  }

  /**
   * Keeps `next`, the state a plan on `tail` wrote (stored as `layout`, history relative to the
   * tail), as the conversation's tail, trimmed back to what a fresh tail read would hold once it
   * is twice that long: from the first message carrying no tool result among the last
   * `tailWindowMessages`. Not kept when a fresh read would not plan on it either (`tailOf`'s
   * rules: the history's stored facts through its last message unknown under a stored estimator,
   * or under `--strict-tool-rounds` not known clean), or when it has no such message within
   * `maxTailWindowMessages`.
   */
  keepWrittenTail(tail: KeptTail, next: ConversationState, layout: StoredLayout): void {
    const conversationId = next.conversationId;
    this.tails.delete(conversationId);
    const counts = this.codec.storedTokenCounts;
    const historyIndex = storedSegments.indexOf("history");
    const running = counts.runningOf(next.history);
    const known = running !== undefined && running.epoch === BigInt(layout.segments[historyIndex]!.at);
    if (next.history.length > 0 && counts.estimator !== undefined && !known) return;
    if (this.options.strictToolRounds && tail.start > 0 && !(known && running.clean)) return;
    let kept: KeptTail = { state: next, start: tail.start, length: tail.start + next.history.length };
    let keptLayout = layout;
    if (next.history.length > 2 * tailWindowMessages) {
      const from = next.history.length - tailWindowMessages;
      const first = tailStartIn(next.history.slice(from));
      if (first < 0) {
        if (next.history.length > maxTailWindowMessages) return;
      } else {
        const history = next.history.slice(from + first);
        if (running !== undefined) counts.rememberRunning(history, running);
        if (!trustTail(history, this.options.strictToolRounds)) return;
        const was = layout.segments[historyIndex]!;
        const segments = layout.segments.map((segment, index) =>
          index === historyIndex ? { ...was, length: history.length, bytes: Math.round((was.bytes * history.length) / Math.max(1, next.history.length)) } : segment,
        );
        keptLayout = { ...layout, segments };
        kept = { state: { ...next, history }, start: tail.start + from + first, length: kept.length };
      }
    }
    this.layouts.set(kept.state, keptLayout);
    this.tails.keep(kept, this.encodedBytesOf(kept.state));
  }

  /** Entries a read took from a kept tail instead of decoding them (`decodeHistoryWithFacts`), for tests. */
  private reusedEntries = 0;

  /** The kept tails' count and approximate heap bytes, and the entries reads took from them undecoded (for tests and gauges). */
  get keptTails(): { count: number; bytes: number; reusedEntries: number } {
    return { count: this.tails.size, bytes: this.tails.keptBytes, reusedEntries: this.reusedEntries };
  }

  /** The decoded states kept: how many, and their approximate heap bytes (`approximateDecodedBytes`). */
  get decodedStates(): { count: number; bytes: number } {
    return { count: this.cache.size, bytes: this.cache.keptBytes };
  }

  /** A state's encoded size as its layout says (0 without one). */
  private encodedBytesOf(state: ConversationState): number {
    const layout = this.layouts.get(state);
    return layout ? layout.segments.reduce((sum, segment) => sum + segment.bytes, layout.restBytes) : 0;
  }

  /**
   * What storage needs written for `next`, computed from `base`: per segment list nothing when it
   * is the same list, its new messages when it extends the base list, and otherwise the part that
   * differs from the longer of the kept prefix and the kept suffix (compaction keeps the tail, a
   * removal near the end keeps the head); `rest` only when something besides the segments changed.
   * Lists are compared by message identity: core never mutates a message, so the same object is
   * the same message, and a changed one is a new object.
   */
  writeOf(base: ConversationState, next: ConversationState): StoredWrite {
    const counts = this.codec.storedTokenCounts;
    const { values } = this;
    const conversationId = next.conversationId;
    const baseLayout = this.layouts.get(base);
    const first = base.version === 0n || baseLayout === undefined;
    const version = String(next.version);
    let bytes = 0;
    const writes: SegmentWrite[] = [];
    const segments: SegmentLayout[] = [];
    storedSegments.forEach((segment, index) => {
      const before = base[segment];
      const after = next[segment];
      const was = baseLayout?.segments[index] ?? { at: version, length: 0, bytes: 0 };
      const edit = segmentEdit(before, after, this.lineage);
      if (edit === undefined) {
        if (after !== before) counts.rememberRunning(after, counts.runningOf(before));
        writes.push({ mode: "=", baseLength: before.length, keep: before.length, encodings: [] });
        segments.push(first ? { ...was, at: version } : was);
        return;
      }
      const appended = edit.keepPrefix && edit.keep === before.length;
      const at = appended && !first ? was.at : version;
      // The history's entries carry what a reader of its tail needs of the head (history-running-facts.ts).
      const running = segment === "history" ? runningFactsOfWrite(counts, before, after, edit, BigInt(at)) : undefined;
      const encodings = edit.messages.map((message, position) => values.seal(conversationId, "message", this.codec.encodeStoredEntry(message, running?.[position])));
      const added = encodings.reduce((sum, encoding) => sum + encoding.length, 0);
      bytes += added;
      writes.push({ mode: edit.keepPrefix ? "p" : "s", baseLength: before.length, keep: edit.keep, encodings });
      // The kept part's size is only counted for the cache's byte bound: proportional is close enough.
      const kept = edit.keep === before.length ? was.bytes : Math.round((was.bytes * edit.keep) / Math.max(1, before.length));
      segments.push({ at, length: after.length, bytes: kept + added });
    });
    const rest = first || restDiffers(base, next) ? values.seal(conversationId, "rest", this.codec.encodeStateRest(next)) : undefined;
    bytes += rest?.length ?? 0;
    const created = baseLayout?.created ?? randomUUID();
    return {
      created,
      rest,
      segments: writes,
      bytes,
      layout: { created, restAt: rest ? version : baseLayout!.restAt, restBytes: rest ? rest.length : baseLayout!.restBytes, segments },
    };
  }

  /**
   * What a fork at a past version `past` of a source now at `current` writes of its own beside
   * what it shares: per segment the first messages of the current list it shares (the same
   * objects, `sharedHeadLength`: the undos since made a new list only where they changed it) and
   * the rest of the past segment encoded for the fork, sealed for it, the history's entries with
   * the running facts a first write gives them (the fork's lists are written at its version 1).
   * Why: a fork at a version before a rewind, a removal or a compaction went through the engine,
   * writing every message (2.1 s at 100,000 on Redis Cluster); now it writes what differs.
   */
  forkTails(newConversationId: string, current: ConversationState, past: ConversationState): ForkTail[] {
    return storedSegments.map((segment) => {
      const now = current[segment];
      const was = past[segment];
      const shared = sharedHeadLength(now, was, this.lineage);
      const messages = was.slice(shared);
      const running =
        segment === "history" && messages.length > 0
          ? runningFactsOfWrite(this.codec.storedTokenCounts, shared === now.length ? now : was.slice(0, shared), was, { keepPrefix: true, keep: shared, messages }, 1n)
          : undefined;
      const encodings = messages.map((message, position) => this.values.seal(newConversationId, "message", this.codec.encodeStoredEntry(message, running?.[position])));
      return { shared, messages, encodings };
    });
  }

  /**
   * The state a load's reply describes, on top of `cached` (the copy the load was asked the
   * difference from) for whatever the reply left out; kept as the conversation's copy. DATA_LOSS
   * for anything that does not decode, does not add up or belongs to another conversation.
   */
  assemble(
    conversationId: string,
    version: bigint,
    header: { created: string; restAt: string; rest: Buffer | null },
    received: readonly ReceivedSegment[],
    cached: ConversationState | undefined,
  ): ConversationState {
    const { loader } = this.names;
    const cachedLayout = cached && this.layouts.get(cached);
    let rest: ConversationState;
    let restBytes: number;
    if (header.rest !== null) {
      rest = this.decodeRest(conversationId, header.rest);
      if (rest.conversationId !== conversationId) throw corruptConversation(conversationId, `${this.names.header(conversationId)} holds the rest of "${rest.conversationId}"`);
      restBytes = header.rest.length;
    } else {
      if (!cached || !cachedLayout) throw new ConnectError(`${loader} left out the rest of "${conversationId}" without a cached copy`, Code.Internal);
      rest = cached;
      restBytes = cachedLayout.restBytes;
    }
    const segments: SegmentLayout[] = [];
    const lists: Message[][] = [];
    storedSegments.forEach((segment, index) => {
      const { at, from, items, length, sealers } = received[index]!;
      if (from > 0 && (!cached || !cachedLayout || cached[segment].length !== from)) {
        throw new ConnectError(`${loader} sent ${segment} of "${conversationId}" from ${from} without a cached copy that long`, Code.Internal);
      }
      if (length !== undefined && from + items.length !== length) {
        throw corruptConversation(conversationId, `the ${segment} segment has ${from + items.length} message rows but the header row says ${length}`);
      }
      let bytes = from > 0 ? cachedLayout!.segments[index]!.bytes : 0;
      for (const item of items) bytes += item.length;
      const { messages: decoded, running } = this.decodeWithFacts(conversationId, items, from, segment, sealers);
      // The cached list itself where nothing was added (an empty one too), so what was derived
      // from it by identity (encodings, token counts) is found again.
      const unchanged = cached !== undefined && decoded.length === 0 && cached[segment].length === from;
      const list = unchanged ? cached[segment] : from === 0 ? decoded : cached![segment].concat(decoded);
      if (from > 0 && list !== cached![segment]) {
        this.lineage.appended(cached![segment], list);
        trustCaughtUpSegment(segment, cached![segment], list, this.options.strictToolRounds);
      }
      // What the next commit's history facts continue from (history-running-facts.ts).
      const last = running[running.length - 1];
      if (segment === "history" && decoded.length > 0 && last?.epoch === BigInt(at)) this.codec.storedTokenCounts.rememberRunning(list, last);
      lists.push(list);
      segments.push({ at, length: from + decoded.length, bytes });
    });
    const [system, history, memory, tools] = lists as [Message[], Message[], Message[], Message[]];
    const state: ConversationState = { ...rest, conversationId, version, system, history, memory, tools };
    this.remember(state, { created: header.created, restAt: header.restAt, restBytes, segments });
    return state;
  }

  /**
   * The state a tail read's reply describes (tail-commit.ts): the rest and the segments but
   * history whole, history from its first message that carries no tool result on (`tailStartIn`),
   * with a layout so that `writeOfTail` writes what a commit appends to it; not kept as the
   * conversation's copy. "wider" when the window holds no such message and starts after the
   * first; undefined when the commit must read the whole state: the history's stored facts
   * through its last message are not known (its appended entries would be written without them),
   * or under `--strict-tool-rounds` the facts do not say the whole history is clean, or the tail
   * itself fails the commit's tool-round check.
   */
  tailOf(
    conversationId: string,
    version: bigint,
    header: { created: string; restAt: string; rest: Buffer | null },
    received: readonly (ReceivedSegment & { length: number })[],
  ): Omit<CommitTail, "headCallNames"> | "wider" | undefined {
    if (header.rest === null) throw corruptConversation(conversationId, `${this.names.header(conversationId)} has no rest`);
    const rest = this.decodeRest(conversationId, header.rest);
    if (rest.conversationId !== conversationId) throw corruptConversation(conversationId, `${this.names.header(conversationId)} holds the rest of "${rest.conversationId}"`);
    const counts = this.codec.storedTokenCounts;
    const lists: Message[][] = [];
    let start = 0;
    let length = 0;
    for (const [index, segment] of storedSegments.entries()) {
      const { at, from, items, sealers } = received[index]!;
      if (from + items.length !== received[index]!.length) throw corruptConversation(conversationId, `the ${segment} list sent ${items.length} messages from ${from} of ${received[index]!.length}`);
      if (segment !== "history") {
        lists.push(this.decode(conversationId, items, from, segment, sealers));
        continue;
      }
      const { messages, running } = this.decodeHistoryWithFacts(conversationId, items, from, at, header.created, sealers);
      const first = from === 0 ? 0 : tailStartIn(messages);
      if (first < 0) return "wider";
      const tail = first === 0 ? messages : messages.slice(first);
      const last = running[running.length - 1];
      if (tail.length > 0) {
        const known = last !== undefined && last.epoch === BigInt(at);
        if (counts.estimator !== undefined && !known) return undefined;
        if (this.options.strictToolRounds && from + first > 0 && !(known && last.clean)) return undefined;
        if (known) counts.rememberRunning(tail, last);
      }
      if (!trustTail(tail, this.options.strictToolRounds)) return undefined;
      lists.push(tail);
      start = from + first;
      length = received[index]!.length;
    }
    const [system, history, memory, tools] = lists as [Message[], Message[], Message[], Message[]];
    const state: ConversationState = { ...rest, conversationId, version, system, history, memory, tools };
    this.layouts.set(state, {
      created: header.created,
      restAt: header.restAt,
      restBytes: header.rest.length,
      // The bytes of what the tail holds, for the kept tails' byte bound.
      segments: storedSegments.map((_, index) => ({ at: received[index]!.at, length: lists[index]!.length, bytes: encodedBytes(received[index]!.items, received[index]!.items.length - lists[index]!.length) })),
    });
    return { state, start, length };
  }

  /** `writeOf` for a plan made on `tail` (`tailOf`): its history write placed after the stored head. */
  writeOfTail(tail: Omit<CommitTail, "headCallNames">, next: ConversationState): StoredWrite {
    const write = this.writeOf(tail.state, next);
    const history = write.segments[storedSegments.indexOf("history")]!;
    if (!(history.mode === "=" || history.mode === "p") || history.keep !== history.baseLength) {
      throw new ConnectError(`a commit planned on the tail of "${tail.state.conversationId}" edits its history instead of appending to it`, Code.Internal);
    }
    history.baseLength += tail.start;
    history.keep += tail.start;
    return write;
  }

  /** A window of the kept copy, with the stored facts of its history entries where this process knows them (`heldWindowFacts`). */
  heldWindow(cached: ConversationState, query: WindowQuery): SegmentWindow {
    const window = windowOf(cached, query);
    const layout = this.layouts.get(cached);
    if (query.segment !== "history" || !layout) return window;
    const stored = heldWindowFacts(this.codec.storedTokenCounts, cached.history, window.start, window.start + window.state.history.length, BigInt(layout.segments[1]!.at));
    return stored ? { ...window, stored } : window;
  }

  /** The rest of a state as stored (its parts but the segments), or DATA_LOSS naming where it is. */
  decodeRest(conversationId: string, stored: Buffer): ConversationState {
    const bytes = this.values.open(conversationId, "rest", stored, () => this.names.rest(conversationId));
    try {
      return fromBinary(ConversationStateSchema, bytes);
    } catch (error) {
      throw corruptConversation(conversationId, `${this.names.rest(conversationId)} does not decode: ${(error as Error).message}`);
    }
  }

  /** Stored entries of `segment` from position `from` on, as messages (`sealers`: who sealed which, `Sealers`); DATA_LOSS naming the first that does not decode. */
  decode(conversationId: string, items: readonly Buffer[], from: number, segment: string, sealers?: Sealers): Message[] {
    const open = this.values.opener(conversationId, "message");
    return items.map((stored, position) => {
      const item = open(stored, () => this.entryName(conversationId, from + position, segment), sealers?.[position]);
      try {
        return this.codec.decodeStoredEntry(item);
      } catch (error) {
        throw this.undecodable(conversationId, from + position, segment, error);
      }
    });
  }

  /** `decode`, with each entry's stored running facts. */
  decodeWithFacts(conversationId: string, items: readonly Buffer[], from: number, segment: string, sealers?: Sealers): { messages: Message[]; running: (RunningFacts | undefined)[] } {
    const running: (RunningFacts | undefined)[] = [];
    const open = this.values.opener(conversationId, "message");
    const messages = items.map((stored, position) => {
      const item = open(stored, () => this.entryName(conversationId, from + position, segment), sealers?.[position]);
      try {
        const entry = this.codec.storedTokenCounts.decodeEntryWithFacts(item);
        running.push(entry.running);
        return entry.message;
      } catch (error) {
        throw this.undecodable(conversationId, from + position, segment, error);
      }
    });
    return { messages, running };
  }

  /**
   * `decodeWithFacts` for history entries read from position `from` on, where the history's `_at`
   * is `at` and the conversation's `created` is `created`: an entry at a position the kept tail
   * holds at the same `created` and `_at` is the kept message, its count record read but the
   * message not decoded again. The list only grew since (the rule the load script catches copies
   * up by), so the entry is the one the kept tail was read or written as. Why: a sidecar taking
   * turns with another (round-robin) reads its conversation's tail at every commit and a window at
   * every compile, and decoded again the 64-128 of their entries it already held (the decoding's
   * CPU about halved in docs/benchmarks.md, "Round-robin").
   */
  decodeHistoryWithFacts(conversationId: string, items: readonly Buffer[], from: number, at: string, created: string, sealers?: Sealers): { messages: Message[]; running: (RunningFacts | undefined)[] } {
    const kept = this.tails.get(conversationId);
    const layout = kept && this.layouts.get(kept.state);
    const historyIndex = storedSegments.indexOf("history");
    if (!kept || !layout || layout.created !== created || layout.segments[historyIndex]!.at !== at) return this.decodeWithFacts(conversationId, items, from, "history", sealers);
    const held = kept.state.history;
    const running: (RunningFacts | undefined)[] = [];
    const open = this.values.opener(conversationId, "message");
    const counts = this.codec.storedTokenCounts;
    const messages = items.map((stored, position) => {
      const item = open(stored, () => this.entryName(conversationId, from + position, "history"), sealers?.[position]);
      const message = held[from + position - kept.start];
      try {
        if (message !== undefined && from + position >= kept.start) {
          this.reusedEntries++;
          running.push(counts.factsOfEntry(item, message));
          return message;
        }
        const entry = counts.decodeEntryWithFacts(item);
        running.push(entry.running);
        return entry.message;
      } catch (error) {
        throw this.undecodable(conversationId, from + position, "history", error);
      }
    });
    return { messages, running };
  }

  /** Where a stored entry is, as DATA_LOSS details name it. */
  private entryName(conversationId: string, position: number, segment: string): string {
    return `message ${position} of the ${this.names.segment(conversationId, segment)}`;
  }

  private undecodable(conversationId: string, position: number, segment: string, error: unknown): ConnectError {
    return corruptConversation(conversationId, `${this.entryName(conversationId, position, segment)} does not decode: ${(error as Error).message}`);
  }
}

/** What `items` from position `from` on weigh encoded. */
function encodedBytes(items: readonly Buffer[], from: number): number {
  let bytes = 0;
  for (let index = from; index < items.length; index++) bytes += items[index]!.length;
  return bytes;
}

/** The bytes as a Buffer (what the database clients send as binary), without copying them. */
export function bufferOf(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
