import { create } from "@bufbuild/protobuf";
import type { LearntCorrection, TokenCorrection } from "../core/compile/token-calibration.js";
import type { CalibrationBounds, CalibrationRecordKey } from "./calibration-store.js";
import { MemoryCalibrationRecords } from "./memory-calibration-records.js";
import { randomUUID } from "node:crypto";
import type { Change, ConversationSummary } from "#gen/contextd/v1/conversation_service_pb";
import { ConversationSummarySchema } from "#gen/contextd/v1/conversation_service_pb";
import type { ConversationState, Delta } from "#gen/contextd/v1/state_pb";
import { Codec } from "../codec/codec.js";
import type { DeltaContext } from "../core/deltas/delta-context.js";
import { MessageListLineage } from "../core/model/message-list-lineage.js";
import { SortedIds } from "./sorted-ids.js";
import { clearStateDeltas, deltasFingerprint, emptyConversationState, indexedLookups, planCommit, presetMessageIds } from "./commit-plan.js";
import type { CommitOutcome, ConversationPage, ConversationStore } from "./conversation-store.js";
import { defaultMaxIdempotencyBytes, defaultMaxIdempotencyRecords, IdempotencyRecords, type IdempotencyRecord } from "./idempotency-records.js";
import { MessageIdIndex } from "./message-id-index.js";
import { segmentEdit, storedSegments } from "./segment-edits.js";
import { heldWindowFacts, runningFactsOfWrite } from "./history-running-facts.js";
import { checkWindowQuery, windowOf, type SegmentWindow, type WindowQuery } from "./segment-window.js";
import { decodePageToken, encodePageToken } from "./page-token.js";
import { changesNotRetained, idempotencyKeyReused, requireStorableKey, requireStorableText, versionConflict } from "./store-errors.js";
import { stringLimits } from "../core/model/string-limits.js";

export interface MemoryStoreOptions {
  /** Changes kept per conversation for Watch resumption (oldest dropped first). */
  maxChangesPerConversation?: number;
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
}

interface Conversation {
  state: ConversationState;
  changes: Change[];
  /** The ids of every message of `state`, once a commit to a long conversation asked for them. */
  ids?: MessageIdIndex;
}

export const defaultMaxChangesPerConversation = 10_000;
export const defaultIdempotencyTtlMs = 24 * 60 * 60 * 1000;

/**
 * The embedded default store. A commit runs synchronously between awaits, so JavaScript's single
 * thread makes compare, apply and publish atomic without locks. Nothing survives the process.
 */
export class MemoryConversationStore implements ConversationStore {
  private readonly conversations = new Map<string, Conversation>();
  /** The conversations' ids in order, so `list` pages without sorting them all. */
  private readonly ids = new SortedIds();
  private readonly listeners = new Map<string, Set<() => void>>();
  private readonly maxChanges: number;
  private readonly idempotency: IdempotencyRecords;
  private readonly now: () => number;
  private readonly deltaContext: DeltaContext;
  private readonly codec: Codec;
  /** Which segment lists the commits made by appending to which. */
  readonly lineage = new MessageListLineage();
  private readonly calibration = new MemoryCalibrationRecords();

  constructor(options: MemoryStoreOptions = {}) {
    this.codec = options.codec ?? new Codec();
    this.maxChanges = options.maxChangesPerConversation ?? defaultMaxChangesPerConversation;
    this.idempotency = new IdempotencyRecords({
      ttlMs: options.idempotencyTtlMs ?? defaultIdempotencyTtlMs,
      maxRecords: options.maxIdempotencyRecords ?? defaultMaxIdempotencyRecords,
      maxBytes: options.maxIdempotencyBytes ?? defaultMaxIdempotencyBytes,
    });
    this.now = options.now ?? Date.now;
    this.deltaContext = options.deltaContext ?? { newMessageId: () => randomUUID() };
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
    const state = this.conversations.get(conversationId)?.state ?? emptyConversationState(conversationId);
    this.codec.retainState(state, this.lineage);
    return state;
  }

  async readWindow(conversationId: string, query: WindowQuery): Promise<SegmentWindow> {
    requireStorableText("conversation_id", conversationId);
    checkWindowQuery(query);
    const state = this.conversations.get(conversationId)?.state ?? emptyConversationState(conversationId);
    const window = windowOf(state, query);
    if (query.segment !== "history") return window;
    const stored = heldWindowFacts(this.codec.storedTokenCounts, state.history, window.start, window.start + window.state.history.length, 0n);
    return stored ? { ...window, stored } : window;
  }

  async currentVersion(conversationId: string): Promise<bigint> {
    requireStorableKey("conversation_id", conversationId, stringLimits.id);
    return this.conversations.get(conversationId)?.state.version ?? 0n;
  }

  get strictToolRounds(): boolean {
    return this.deltaContext.strictToolRounds === true;
  }

  idLookupsFor(conversationId: string, base: ConversationState): Pick<DeltaContext, "lineage" | "messageIds" | "toolCallIds"> {
    return indexedLookups(this.lineage, () => this.idIndexOf(conversationId, base));
  }

  /** The id index of `base` when it is the conversation's current state, built on first use. */
  private idIndexOf(conversationId: string, base: ConversationState): MessageIdIndex | undefined {
    const conversation = this.conversations.get(conversationId);
    if (conversation?.state !== base) return undefined;
    if (conversation.ids?.state !== base) conversation.ids = MessageIdIndex.of(base);
    return conversation.ids;
  }

  async commit(
    conversationId: string,
    expectedVersion: bigint | undefined,
    deltas: Delta[],
    idempotencyKey: string,
    requestFingerprint?: string,
    messageIds?: readonly string[],
  ): Promise<CommitOutcome> {
    const outcome = await this.apply(conversationId, expectedVersion, deltas, idempotencyKey, false, requestFingerprint, messageIds);
    if (outcome.state) this.codec.retainState(outcome.state, this.lineage);
    return outcome;
  }

  async clear(conversationId: string, expectedVersion: bigint | undefined): Promise<bigint> {
    return (await this.apply(conversationId, expectedVersion, [...clearStateDeltas], "", true)).version;
  }

  async list(prefix: string, pageSize: number, pageToken: string): Promise<ConversationPage> {
    requireStorableText("prefix", prefix);
    const after = decodePageToken(pageToken);
    // One more than the page says whether another page follows.
    const ids = this.ids.page(prefix, after, pageSize + 1);
    const page = ids.slice(0, pageSize);
    const conversations: ConversationSummary[] = page.map((id) =>
      create(ConversationSummarySchema, { conversationId: id, version: this.conversations.get(id)!.state.version }),
    );
    return { conversations, nextPageToken: ids.length > pageSize ? encodePageToken(page[page.length - 1]!) : "" };
  }

  async *watch(conversationId: string, fromVersion: bigint, signal: AbortSignal): AsyncIterable<Change> {
    requireStorableKey("conversation_id", conversationId, stringLimits.id);
    let last = fromVersion;
    let first = true;
    while (!signal.aborted) {
      const changes = this.conversations.get(conversationId)?.changes ?? [];
      if (first && fromVersion > 0n) {
        const current = this.conversations.get(conversationId)?.state.version ?? 0n;
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
    for (const callbacks of this.listeners.values()) for (const callback of callbacks) callback();
  }

  private async apply(
    conversationId: string,
    expectedVersion: bigint | undefined,
    deltas: Delta[],
    idempotencyKey: string,
    cleared: boolean,
    requestFingerprint?: string,
    messageIds?: readonly string[],
  ): Promise<CommitOutcome> {
    requireStorableKey("conversation_id", conversationId, stringLimits.id);
    requireStorableKey("idempotency_key", idempotencyKey, stringLimits.idempotencyKey);
    const conversation = this.conversations.get(conversationId);
    const fingerprint = idempotencyKey === "" ? "" : (requestFingerprint ?? deltasFingerprint(deltas));
    if (idempotencyKey !== "") {
      const record = this.idempotency.get(conversationId, idempotencyKey, this.now());
      if (record) {
        if (record.fingerprint !== fingerprint) throw idempotencyKeyReused(conversationId, idempotencyKey);
        return this.replay(conversation, record);
      }
    }
    const base = conversation?.state ?? emptyConversationState(conversationId);
    if (expectedVersion !== undefined && expectedVersion !== base.version) {
      throw versionConflict(conversationId, expectedVersion, base.version);
    }
    const ids = messageIds ? presetMessageIds(messageIds, this.deltaContext) : this.deltaContext;
    const plan = planCommit(base, deltas, {
      deltaContext: ids,
      lineage: this.lineage,
      idIndex: () => this.idIndexOf(conversationId, base),
      idempotencyKey,
      committedAtUnixMs: BigInt(this.now()),
      cleared,
    });
    this.noteTokenCounts(base, plan.state);
    const target: Conversation = conversation ?? { state: base, changes: [] };
    target.ids = target.ids?.advancedTo(plan.state, this.lineage);
    target.state = plan.state;
    target.changes.push(plan.change);
    if (target.changes.length > this.maxChanges) target.changes.splice(0, target.changes.length - this.maxChanges);
    const outcome: CommitOutcome = { version: plan.state.version, state: plan.state, replayed: false };
    if (idempotencyKey !== "") this.idempotency.add(conversationId, idempotencyKey, fingerprint, plan.state.version, this.now());
    if (conversation === undefined) this.ids.add(conversationId);
    this.conversations.set(conversationId, target);
    for (const callback of this.listeners.get(conversationId) ?? []) callback();
    return outcome;
  }

  /** A retried commit's outcome: its version, and its state while that is still the current one. */
  private replay(conversation: Conversation | undefined, record: IdempotencyRecord): CommitOutcome {
    const current = conversation?.state;
    return { version: record.version, state: current?.version === record.version ? current : undefined, replayed: true };
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
