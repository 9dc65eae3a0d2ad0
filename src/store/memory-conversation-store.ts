import type { LearntCorrection, TokenCorrection } from "../core/compile/token-calibration.js";
import type { HistoryLimits } from "./version-history.js";
import type { CalibrationBounds, CalibrationRecordKey } from "./calibration-store.js";
import { MemoryCalibrationRecords } from "./memory-calibration-records.js";
import { MemoryUsageLedger } from "./memory-usage-ledger.js";
import type { Change } from "#gen/contextd/v1/conversation_service_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import { Codec } from "../codec/codec.js";
import type { DeltaContext } from "../core/deltas/delta-context.js";
import { tenantOf } from "../core/model/conversation-tenant.js";
import { MessageListLineage } from "../core/model/message-list-lineage.js";
import { SortedIds } from "./sorted-ids.js";
import { emptyConversationState, type CommitPlan } from "./commit-plan.js";
import { CommitEngine, EngineCommittedStore, type CommitIo, type CommitWrite } from "./commit-engine.js";
import type { ConversationPage, ConversationStore } from "./conversation-store.js";
import { defaultMaxIdempotencyBytes, defaultMaxIdempotencyRecords, IdempotencyRecords } from "./idempotency-records.js";
import { MessageIdIndex } from "./message-id-index.js";
import { segmentEdit, storedSegments } from "./segment-edits.js";
import { heldWindowFacts, runningFactsOfWrite } from "./history-running-facts.js";
import { checkWindowQuery, windowOf, type SegmentWindow, type WindowQuery } from "./segment-window.js";
import { entriesToRead, pageOf, positionOf, summaryOf, type ExaminedEntry, type ListQuery } from "./conversation-listing.js";
import { changesNotRetained, requireStorableKey, requireStorableText, versionConflict } from "./store-errors.js";
import { defaultExpirySweepMs, expirySweepBatch, expirySweepBatches, hasExpired, ConversationExpiry } from "./conversation-expiry.js";
import type { HistoryBound } from "./history-bound.js";
import { stringLimits } from "../core/model/string-limits.js";

export interface MemoryStoreOptions {
  /** Changes kept per conversation for Watch resumption (oldest dropped first). */
  maxChangesPerConversation?: number;
  /** What one read of a past version may cost (`--history-read-bytes`; version-history.ts). */
  historyLimits?: HistoryLimits;
  /** How long an idempotency key is remembered. */
  idempotencyTtlMs?: number;
  /** Idempotency records kept (all conversations together); the oldest is forgotten first. */
  maxIdempotencyRecords?: number;
  /** Bytes of idempotency records kept (ids, keys, fingerprints); past it the oldest is forgotten first. */
  maxIdempotencyBytes?: number;
  /** Clock, in Unix milliseconds; injectable for tests. */
  now?: () => number;
  /** Ids for messages committed without one. */
  deltaContext?: DeltaContext;
  /** The server's codec, told which states are immutable (see `Codec.retainState`); a private one otherwise. */
  codec?: Codec;
  /** The idle TTLs conversations expire by; none = only their own (`ConversationState.idle_ttl_ms`). */
  expiry?: ConversationExpiry;
  /** The default prune commits keep histories within (`--prune-*`); none = only `prune_history` deltas prune. */
  historyBound?: HistoryBound;
  /** How often expired conversations are swept, in ms (`expirySweepBatch` per batch); 0 = only as they are met. */
  expirySweepMs?: number;
}

interface Conversation {
  state: ConversationState;
  /** Commit times (Unix ms) of the first and the latest version. */
  createdAtUnixMs: bigint;
  updatedAtUnixMs: bigint;
  /** When it expires (Unix ms); 0n = never. */
  expiresAtUnixMs: bigint;
  changes: Change[];
  /** The ids of every message of `state`, once a commit to a long conversation asked for them. */
  ids?: MessageIdIndex;
}

/** Hex digits of the time part of an update-order key. */
const updateOrderKeyDigits = 14;

/**
 * A conversation's key in the update order: newest first as the keys sort ascending (the time
 * subtracted from the largest safe integer, fixed-width hex), then the id.
 */
function updateOrderKey(updatedAtUnixMs: bigint, conversationId: string): string {
  return (BigInt(Number.MAX_SAFE_INTEGER) - updatedAtUnixMs).toString(16).padStart(updateOrderKeyDigits, "0") + conversationId;
}

/** The update time an `updateOrderKey` holds. */
function updatedAtOfKey(key: string): bigint {
  return BigInt(Number.MAX_SAFE_INTEGER) - BigInt("0x" + key.slice(0, updateOrderKeyDigits));
}

/** A conversation's key in the expiry order: soonest first (the time, fixed-width hex), then the id. */
function expiryOrderKey(expiresAtUnixMs: bigint, conversationId: string): string {
  return expiresAtUnixMs.toString(16).padStart(updateOrderKeyDigits, "0") + conversationId;
}

export const defaultMaxChangesPerConversation = 10_000;
export const defaultIdempotencyTtlMs = 24 * 60 * 60 * 1000;

/**
 * The embedded default store. A commit runs synchronously between awaits, so JavaScript's single
 * thread makes compare, apply and publish atomic without locks. Nothing survives the process.
 */
export class MemoryConversationStore extends EngineCommittedStore implements ConversationStore {
  private readonly conversations = new Map<string, Conversation>();
  /** The conversations' ids in order, so `list` pages without sorting them all. */
  private readonly ids = new SortedIds();
  /** The conversations newest update first (`updateOrderKey`), so `list` by update pages without sorting. */
  private readonly byUpdate = new SortedIds();
  /** The conversations that expire, soonest first (`updateOrderKey`'s width, the time ascending), so a sweep finds them without a scan. */
  private readonly byExpiry = new SortedIds();
  private readonly sweeper: NodeJS.Timeout | undefined;
  private sweeping = false;
  private readonly listeners = new Map<string, Set<() => void>>();
  private readonly maxChanges: number;
  private readonly idempotency: IdempotencyRecords;
  private readonly now: () => number;
  protected readonly engine: CommitEngine;
  private readonly codec: Codec;
  /** Which segment lists the commits made by appending to which. */
  readonly lineage = new MessageListLineage();
  private readonly calibration = new MemoryCalibrationRecords();
  protected readonly usage = new MemoryUsageLedger();

  constructor(options: MemoryStoreOptions = {}) {
    super();
    this.codec = options.codec ?? new Codec();
    this.maxChanges = options.maxChangesPerConversation ?? defaultMaxChangesPerConversation;
    if (options.historyLimits) this.historyLimits = options.historyLimits;
    this.idempotency = new IdempotencyRecords({
      ttlMs: options.idempotencyTtlMs ?? defaultIdempotencyTtlMs,
      maxRecords: options.maxIdempotencyRecords ?? defaultMaxIdempotencyRecords,
      maxBytes: options.maxIdempotencyBytes ?? defaultMaxIdempotencyBytes,
    });
    this.now = options.now ?? Date.now;
    const copies = { copy: (conversationId: string) => this.live(conversationId)?.state, idIndex: this.idIndexOf.bind(this) };
    const io = {
      read: async (conversationId: string, idempotencyKey: string) => ({
        state: this.live(conversationId)?.state ?? emptyConversationState(conversationId),
        record: idempotencyKey === "" ? undefined : this.idempotency.get(conversationId, idempotencyKey, this.now()),
      }),
      // The memory store holds every conversation whole: its index is the copy's (`idIndexOf`), nothing to rebuild.
      write: async (...[conversationId, base, plan, idempotencyKey, fingerprint]: Parameters<CommitIo["write"]>) => this.write(conversationId, base, plan, idempotencyKey, fingerprint),
    };
    this.engine = new CommitEngine({ copies, io, codec: this.codec, lineage: this.lineage, deltaContext: options.deltaContext, now: this.now, expiry: options.expiry ?? new ConversationExpiry(), historyBound: options.historyBound, maxUndoBytes: this.historyLimits.maxUndoBytes });
    const sweepMs = options.expirySweepMs ?? defaultExpirySweepMs;
    if (sweepMs > 0) this.sweeper = setInterval(() => void this.sweepPass(), sweepMs).unref();
  }

  /**
   * The conversation unless it has expired; an expired one is removed as it is met, so every read
   * answers for it as for one never written, whether or not a sweep got to it.
   */
  private live(conversationId: string): Conversation | undefined {
    const conversation = this.conversations.get(conversationId);
    if (conversation === undefined || !hasExpired(conversation.expiresAtUnixMs, this.now())) return conversation;
    this.remove(conversationId, conversation);
    return undefined;
  }

  /**
   * Forgets a conversation, its listing entries, its idempotency records and its usage ledger (the
   * tenant's totals stay), all between two awaits; its watches wake and find nothing more.
   */
  private remove(conversationId: string, conversation: Conversation): void {
    this.conversations.delete(conversationId);
    this.idempotency.forgetConversation(conversationId);
    this.usage.forget(tenantOf(conversationId), conversationId);
    this.ids.delete(conversationId);
    this.byUpdate.delete(updateOrderKey(conversation.updatedAtUnixMs, conversationId));
    if (conversation.expiresAtUnixMs > 0n) this.byExpiry.delete(expiryOrderKey(conversation.expiresAtUnixMs, conversationId));
    for (const callback of this.listeners.get(conversationId) ?? []) callback();
  }

  /** Removes up to `limit` expired conversations, soonest expired first: a bounded step, never a scan of every conversation. */
  sweepExpired(limit: number): number {
    const now = this.now();
    let removed = 0;
    for (const key of this.byExpiry.page("", "", limit)) {
      const conversationId = key.slice(updateOrderKeyDigits);
      const conversation = this.conversations.get(conversationId);
      if (conversation === undefined) {
        this.byExpiry.delete(key);
        continue;
      }
      if (!hasExpired(conversation.expiresAtUnixMs, now)) break;
      this.remove(conversationId, conversation);
      removed++;
    }
    return removed;
  }

  /** Up to `expirySweepBatches` batches of `sweepExpired`, the event loop turning between them (each removal moves the sorted ids after it). */
  private async sweepPass(): Promise<void> {
    if (this.sweeping) return;
    this.sweeping = true;
    try {
      for (let batch = 0; batch < expirySweepBatches && this.sweepExpired(expirySweepBatch) === expirySweepBatch; batch++) await new Promise((resolve) => setImmediate(resolve));
    } finally {
      this.sweeping = false;
    }
  }

  async delete(conversationId: string, expectedVersion: bigint | undefined): Promise<bigint> {
    requireStorableKey("conversation_id", conversationId, stringLimits.id);
    const conversation = this.live(conversationId);
    const current = conversation?.state.version ?? 0n;
    if (expectedVersion !== undefined && expectedVersion !== current) throw versionConflict(conversationId, expectedVersion, current);
    if (conversation !== undefined) this.remove(conversationId, conversation);
    // A ledger can exist without the conversation (usage reported for an id never committed).
    else this.usage.forget(tenantOf(conversationId), conversationId);
    return current;
  }

  /**
   * Counts the messages a commit wrote with the codec's stored estimator (`StoredTokenCounts`),
   * as the Redis and Postgres stores count the entries they write: a compile whose history facts
   * were forgotten takes them instead of counting the history again.
   */
  private noteTokenCounts(base: ConversationState, next: ConversationState): void {
    const counts = this.codec.storedTokenCounts;
    if (counts.estimator === undefined) return;
    for (const segment of storedSegments) {
      const edit = segmentEdit(base[segment], next[segment], this.lineage);
      if (edit === undefined) {
        if (segment === "history" && next.history !== base.history) counts.rememberRunning(next.history, counts.runningOf(base.history));
        continue;
      }
      for (const message of edit.messages) counts.note(message);
      // The history's running facts, as the other stores write them into their entries, kept per
      // list (one epoch: a list's facts are computed for that list object).
      if (segment === "history") runningFactsOfWrite(counts, base.history, next.history, edit, 0n);
    }
  }

  async load(conversationId: string): Promise<ConversationState> {
    requireStorableKey("conversation_id", conversationId, stringLimits.id);
    const state = this.live(conversationId)?.state ?? emptyConversationState(conversationId);
    this.codec.retainState(state, this.lineage);
    return state;
  }

  async readWindow(conversationId: string, query: WindowQuery): Promise<SegmentWindow> {
    requireStorableText("conversation_id", conversationId);
    checkWindowQuery(query);
    const state = this.live(conversationId)?.state ?? emptyConversationState(conversationId);
    const window = windowOf(state, query);
    if (query.segment !== "history") return window;
    const stored = heldWindowFacts(this.codec.storedTokenCounts, state.history, window.start, window.start + window.state.history.length, 0n);
    return stored ? { ...window, stored } : window;
  }

  async currentVersion(conversationId: string): Promise<bigint> {
    requireStorableKey("conversation_id", conversationId, stringLimits.id);
    return this.live(conversationId)?.state.version ?? 0n;
  }

  /** The id index of `base` when it is the conversation's current state, built on first use. */
  private idIndexOf(conversationId: string, base: ConversationState): MessageIdIndex | undefined {
    const conversation = this.conversations.get(conversationId);
    if (conversation?.state !== base) return undefined;
    if (conversation.ids?.state !== base) conversation.ids = MessageIdIndex.of(base);
    return conversation.ids;
  }

  async list(query: ListQuery): Promise<ConversationPage> {
    requireStorableText("prefix", query.prefix);
    const position = positionOf(query);
    const count = entriesToRead(query);
    const keys =
      query.order === "id"
        ? this.ids.page(query.prefix, position?.conversationId ?? "", count)
        : this.byUpdate.page("", position ? updateOrderKey(position.updatedAtUnixMs, position.conversationId) : "", count);
    const read: ExaminedEntry[] = keys.map((key) => {
      const id = query.order === "id" ? key : key.slice(updateOrderKeyDigits);
      const position = { conversationId: id, updatedAtUnixMs: query.order === "id" ? 0n : updatedAtOfKey(key) };
      const conversation = this.live(id);
      if (conversation === undefined) return { position, summary: undefined };
      const { state, createdAtUnixMs, updatedAtUnixMs, expiresAtUnixMs } = conversation;
      return { position: { conversationId: id, updatedAtUnixMs }, summary: summaryOf(id, state.version, createdAtUnixMs, updatedAtUnixMs, state.title, state.labels, expiresAtUnixMs) };
    });
    return pageOf(query, read);
  }

  async *watch(conversationId: string, fromVersion: bigint, signal: AbortSignal): AsyncIterable<Change> {
    requireStorableKey("conversation_id", conversationId, stringLimits.id);
    let last = fromVersion;
    let first = true;
    while (!signal.aborted) {
      const changes = this.live(conversationId)?.changes ?? [];
      if (first && fromVersion > 0n) {
        const current = this.live(conversationId)?.state.version ?? 0n;
        const oldest = changes[0]?.version ?? current + 1n;
        if (current > fromVersion && oldest > fromVersion + 1n) throw changesNotRetained(conversationId, fromVersion, oldest);
      }
      first = false;
      const pending = changes.filter((change) => change.version > last);
      for (const change of pending) {
        if (signal.aborted) return;
        yield change;
        last = change.version;
      }
      if (pending.length === 0) await this.nextCommit(conversationId, signal);
    }
  }

  async readCalibration(key: CalibrationRecordKey, nowMs: number, bounds: CalibrationBounds): Promise<TokenCorrection | undefined> {
    return this.calibration.read(key, nowMs, bounds);
  }

  async reportCalibration(key: CalibrationRecordKey, estimatedTokens: number, actualTokens: number, nowMs: number, bounds: CalibrationBounds): Promise<LearntCorrection> {
    return this.calibration.report(key, estimatedTokens, actualTokens, nowMs, bounds);
  }

  async ping(): Promise<void> {}

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    for (const callbacks of this.listeners.values()) for (const callback of callbacks) callback();
  }

  /**
   * The engine's write: atomic because it runs between awaits (JavaScript's one thread), a
   * compare-and-swap of the conversation's state object.
   */
  private write(conversationId: string, base: ConversationState, plan: CommitPlan, idempotencyKey: string, fingerprint: string): CommitWrite {
    const conversation = this.live(conversationId);
    const current = conversation?.state.version ?? 0n;
    if (idempotencyKey !== "") {
      const record = this.idempotency.get(conversationId, idempotencyKey, this.now());
      if (record) return { outcome: "replay", record, current };
    }
    if (conversation === undefined ? base.version !== 0n : conversation.state !== base) return { outcome: "conflict", current };
    // A fork's lists are its source's, counted when the source committed them.
    if (plan.change.forkedFrom === undefined) this.noteTokenCounts(base, plan.state);
    const updatedAtUnixMs = plan.metadata.updatedAtUnixMs;
    const target: Conversation = conversation ?? { state: base, changes: [], createdAtUnixMs: updatedAtUnixMs, updatedAtUnixMs, expiresAtUnixMs: 0n };
    if (target.expiresAtUnixMs > 0n) this.byExpiry.delete(expiryOrderKey(target.expiresAtUnixMs, conversationId));
    target.expiresAtUnixMs = plan.metadata.expiresAtUnixMs;
    if (target.expiresAtUnixMs > 0n) this.byExpiry.add(expiryOrderKey(target.expiresAtUnixMs, conversationId));
    this.byUpdate.delete(updateOrderKey(target.updatedAtUnixMs, conversationId));
    this.byUpdate.add(updateOrderKey(updatedAtUnixMs, conversationId));
    target.updatedAtUnixMs = updatedAtUnixMs;
    target.ids = target.ids?.advancedTo(plan.state, this.lineage) ?? this.forkedIdIndex(conversation, plan);
    target.state = plan.state;
    target.changes.push(plan.change);
    if (target.changes.length > this.maxChanges) target.changes.splice(0, target.changes.length - this.maxChanges);
    if (idempotencyKey !== "") this.idempotency.add(conversationId, idempotencyKey, fingerprint, plan.state.version, this.now());
    if (conversation === undefined) this.ids.add(conversationId);
    this.conversations.set(conversationId, target);
    for (const callback of this.listeners.get(conversationId) ?? []) callback();
    // Each commit also removes a few expired conversations, so they go faster than commits come.
    if (this.byExpiry.size > 0) this.sweepExpired(8);
    return { outcome: "ok" };
  }

  /**
   * A fork's first write shares its source's id index when the fork holds the source's current
   * lists (a fork at the latest version): otherwise the fork's first commit built its own over
   * every message (20-34 ms at 100,000, docs/history.md).
   */
  private forkedIdIndex(conversation: Conversation | undefined, plan: CommitPlan): MessageIdIndex | undefined {
    const origin = plan.change.forkedFrom;
    if (conversation !== undefined || origin === undefined) return undefined;
    const source = this.live(origin.conversationId);
    return source?.ids?.state === source?.state ? source?.ids?.sharedWith(plan.state) : undefined;
  }

  /** Resolves at the next commit to `conversationId`, or when `signal` aborts or the store closes. */
  private nextCommit(conversationId: string, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      let callbacks = this.listeners.get(conversationId);
      if (!callbacks) this.listeners.set(conversationId, (callbacks = new Set()));
      const done = () => {
        callbacks!.delete(done);
        if (callbacks!.size === 0) this.listeners.delete(conversationId);
        signal.removeEventListener("abort", done);
        resolve();
      };
      callbacks.add(done);
      signal.addEventListener("abort", done, { once: true });
    });
  }
}
