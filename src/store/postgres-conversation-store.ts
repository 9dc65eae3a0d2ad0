import { create, toBinary } from "@bufbuild/protobuf";
import { randomUUID } from "node:crypto";
import type { HistoryLimits } from "./version-history.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { ChangeSchema, type Change } from "#gen/contextd/v1/conversation_service_pb";
import { ConversationStateSchema, type ConversationState, type ForkOrigin } from "#gen/contextd/v1/state_pb";
import { Codec } from "../codec/codec.js";
import type { DeltaContext } from "../core/deltas/delta-context.js";
import { MessageListLineage } from "../core/model/message-list-lineage.js";
import { emptyConversationState, type CommitPlan } from "./commit-plan.js";
import { CommitEngine, EngineCommittedStore, type CommitRead, type CommitWrite } from "./commit-engine.js";
import { forEachCall, idIndexChanges } from "./stored-id-index.js";
import { maxTailWindowMessages, tailWindowMessages, type CommitTail, type TailRead } from "./tail-commit.js";
import type { ConversationPage, ConversationStore, HeldCopies } from "./conversation-store.js";
import { FollowedConversations } from "./followed-conversations.js";
import { RecentIds, defaultListedIdBytes } from "./recent-ids.js";
import { defaultIdempotencyTtlMs, defaultMaxChangesPerConversation } from "./memory-conversation-store.js";
import { entriesToRead, pageOf, positionOf, summaryOf, type ExaminedEntry, type ListQuery } from "./conversation-listing.js";
import { PostgresChangeFeed } from "./postgres-change-feed.js";
import { plainValues, type StoredValues } from "./at-rest-encryption.js";
import { PostgresConnection } from "./postgres-connection.js";
import { changesChannel } from "./postgres-schema.js";
import { windowQuery, type WindowRow } from "./postgres-window-query.js";
import { calibrationWindow, maxCorrection, maxCorrectionStep, minCorrection, type LearntCorrection, type TokenCorrection } from "../core/compile/token-calibration.js";
import { calibrationField, type CalibrationBounds, type CalibrationRecordKey } from "./calibration-store.js";
import { checkWindowQuery, windowBounds, windowMoved, windowOf, type SegmentWindow, type WindowQuery } from "./segment-window.js";
import { storedSegments } from "./segment-edits.js";
import { bufferOf, StoredCopies, type ForkTail } from "./stored-copies.js";
import { corruptConversation, redactUrl, requireStorableKey, requireStorableText, versionConflict } from "./store-errors.js";
import { defaultExpirySweepMs, expirySweepBatch, expirySweepBatches, ConversationExpiry } from "./conversation-expiry.js";
import type { HistoryBound } from "./history-bound.js";
import { stringLimits } from "../core/model/string-limits.js";
import { tenantOf } from "../core/model/conversation-tenant.js";
import { PostgresUsageLedger } from "./postgres-usage-ledger.js";

export interface PostgresStoreOptions {
  /** Changes kept per conversation for Watch resumption (the oldest deleted by the commit that goes past it). */
  maxChangesPerConversation?: number;
  /** What one read of a past version may cost (`--history-read-bytes`; version-history.ts). */
  historyLimits?: HistoryLimits;
  idempotencyTtlMs?: number;
  /** Decoded states kept in this process, validated against the stored version on every use. */
  cacheSize?: number;
  /** Approximate heap bytes of the states kept (`--decoded-state-bytes`, see DecodedStateCache). */
  cacheBytes?: number;
  /** `--kept-tail-bytes`: what the tails kept of conversations committed on without a copy may weigh (kept-tails.ts). */
  keptTailBytes?: number;
  /**
   * `--prefetch-conversations`: most conversations this process follows, catching its copy up on
   * other processes' commit notifications (followed-conversations.ts); 0 or none = none.
   */
  prefetchConversations?: number;
  /** `--listed-id-bytes`: what the memo of conversations whose stored id index was found stale may weigh (recent-ids.ts). */
  listedIdBytes?: number;
  /** How often a Watch reads its changes again without a notification (covers notifications missed while the listener reconnects). */
  watchPollMs?: number;
  /** Retries of a commit without expected version when another writer got there first. */
  maxCommitAttempts?: number;
  /** Connections in the pool. */
  poolSize?: number;
  now?: () => number;
  deltaContext?: DeltaContext;
  /** The server's codec: encodes states for storage and is told which are immutable; a private one otherwise. */
  codec?: Codec;
  /** How contents are kept: AES-256-GCM under `--encryption-key-file` (at-rest-encryption.ts); as they are by default. */
  values?: StoredValues;
  /**
   * Under encryption, whether a fork shares the source's stored messages, each opened as its
   * sealer's (`--share-encrypted-forks`, default true), or goes through the engine, every message
   * sealed again for the fork (what a previous release's sidecars read).
   */
  shareEncryptedForks?: boolean;
  /** The idle TTLs conversations expire by; none = only their own (`ConversationState.idle_ttl_ms`). */
  expiry?: ConversationExpiry;
  /** The default prune commits keep histories within (`--prune-*`); none = only `prune_history` deltas prune. */
  historyBound?: HistoryBound;
  /** How often expired conversations are deleted (batches of `expirySweepBatch`), in ms; 0 = never (reads treat them as absent anyway). */
  expirySweepMs?: number;
}

/** A row of `contextd_load` (int8 columns arrive as decimal strings). */
interface LoadRow {
  segment: number | null;
  message: Buffer | null;
  /** A message row's link (NULL: the own storage; n: the n-th of the header's `owners`). */
  link: number | null;
  version: string | null;
  current: boolean | null;
  created: string | null;
  rest_at: string | null;
  segment_at: string[] | null;
  segment_from: number[] | null;
  segment_length: number[] | null;
  fingerprint: string | null;
  recorded: string | null;
  /** The header's: per link, the conversation that wrote (and sealed) its rows. */
  owners: Buffer[] | null;
}


interface CommitRow {
  outcome: "ok" | "replay" | "conflict" | "stale" | "unindexed" | "taken";
  version: string;
  fingerprint: string | null;
  recorded: string | null;
  /** "ok": whether the id index is current at the new version. */
  indexed: boolean | null;
}

/** A row of `contextd_commit_tail_linked` (the header first, then message rows). */
interface TailRow {
  segment: number | null;
  message: Buffer | null;
  link: number | null;
  version: string | null;
  created: string | null;
  rest_at: string | null;
  segment_at: string[] | null;
  segment_from: number[] | null;
  segment_length: number[] | null;
  fingerprint: string | null;
  recorded: string | null;
  indexed: boolean | null;
  names: (Buffer | null)[] | null;
  owners: Buffer[] | null;
}


/**
 * The Postgres store. Same contract, same commit engine (commit-engine.ts) and same caching
 * (`StoredCopies`) as the Redis store: a commit is computed in the sidecar from the cached (or
 * freshly read) state, then one call of `contextd_commit_shared` (migration 16; `contextd_commit_listened` before) locks the conversation's header
 * row, compares the version, writes the rows the batch changed, the id index's changes, the change
 * and the idempotency record, bumps the version and notifies watchers if some sidecar listens, in
 * one transaction. A load
 * sends only what the cached copy lacks; a commit without a copy and without the state asked for
 * reads the stored tail (`contextd_commit_tail_linked`, tail-commit.ts). Reads name each row's link and each link's
 * owner (migration 17), so a row a fork shares is opened as the conversation that sealed it. Watch reads the changes table and wakes on LISTEN/NOTIFY
 * (`PostgresChangeFeed`). The schema is created and migrated when the store first reaches the database.
 */
export class PostgresConversationStore extends EngineCommittedStore implements ConversationStore {
  private readonly connection: PostgresConnection;
  private readonly maxChanges: number;
  private readonly idempotencyTtlMs: number;
  private readonly now: () => number;
  private readonly codec: Codec;
  /** Which segment lists were made by appending to which (commits, and loads that catch a cached copy up). */
  readonly lineage = new MessageListLineage();
  private readonly copies: StoredCopies;
  private readonly values: StoredValues;
  private readonly sharesEncryptedForks: boolean;
  protected readonly engine: CommitEngine;
  private readonly changes: PostgresChangeFeed;
  protected readonly usage: PostgresUsageLedger;
  /** Commits of this store waiting for `contextd_commit_shared`. */
  private commitsInFlight = 0;
  /**
   * Conversations whose stored id index a read or commit of this process found stale (stored
   * before migration 11, or last written by a sidecar of the previous release): the next commit
   * writes it whole. Bounded by bytes (`--listed-id-bytes`, as the Redis store's memos of ids);
   * one forgotten is found stale again by the next cold commit.
   */
  private readonly staleIdIndexes: RecentIds<true>;
  private readonly sweeper: NodeJS.Timeout | undefined;
  private sweeping = false;
  /** The idle TTLs commits set expiry by: a fork that would expire is written through the engine. */
  private readonly expiry: ConversationExpiry;
  /** The conversations whose commit notifications this process follows (`--prefetch-conversations`). */
  protected override readonly followed: FollowedConversations;

  constructor(url: string, options: PostgresStoreOptions = {}) {
    super();
    this.codec = options.codec ?? new Codec();
    this.maxChanges = options.maxChangesPerConversation ?? defaultMaxChangesPerConversation;
    if (options.historyLimits) this.historyLimits = options.historyLimits;
    this.idempotencyTtlMs = options.idempotencyTtlMs ?? defaultIdempotencyTtlMs;
    this.now = options.now ?? Date.now;
    this.staleIdIndexes = new RecentIds(options.listedIdBytes ?? defaultListedIdBytes);
    this.connection = new PostgresConnection(url, options.poolSize ?? 16);
    this.values = options.values ?? plainValues;
    this.sharesEncryptedForks = options.shareEncryptedForks ?? true;
    this.usage = new PostgresUsageLedger(this.connection);
    this.copies = new StoredCopies({
      values: this.values,
      codec: this.codec,
      lineage: this.lineage,
      cacheSize: options.cacheSize,
      cacheBytes: options.cacheBytes,
      keptTailBytes: options.keptTailBytes,
      strictToolRounds: options.deltaContext?.strictToolRounds === true,
      names: {
        loader: "postgres store: the load",
        header: () => "the header row",
        rest: () => "the header row's rest",
        segment: (_conversationId, segment) => `${segment} segment`,
      },
    });
    const io = {
      read: this.readForCommit.bind(this),
      write: (conversationId: string, base: ConversationState, plan: CommitPlan, idempotencyKey: string, fingerprint: string) => this.write(conversationId, base, plan, idempotencyKey, fingerprint, undefined),
      readTail: this.readTailForCommit.bind(this),
      writeTail: (conversationId: string, tail: CommitTail, plan: CommitPlan, idempotencyKey: string, fingerprint: string) =>
        this.write(conversationId, tail.state, plan, idempotencyKey, fingerprint, tail),
      keptTail: (conversationId: string) => this.copies.keptTail(conversationId),
    };
    const { deltaContext, maxCommitAttempts } = options;
    this.expiry = options.expiry ?? new ConversationExpiry();
    this.engine = new CommitEngine({ copies: this.copies, io, codec: this.codec, lineage: this.lineage, deltaContext, now: this.now, maxCommitAttempts, expiry: this.expiry, historyBound: options.historyBound, maxUndoBytes: this.historyLimits.maxUndoBytes });
    const sweepMs = options.expirySweepMs ?? defaultExpirySweepMs;
    if (sweepMs > 0) this.sweeper = setInterval(() => void this.sweepExpired().catch(() => undefined), sweepMs).unref();
    this.changes = new PostgresChangeFeed(this.connection, options.watchPollMs ?? 1_000, (conversationId) => this.currentVersion(conversationId), this.values);
    this.followed = new FollowedConversations({
      capacity: options.prefetchConversations ?? 0,
      heldVersion: (conversationId) => this.copies.copy(conversationId)?.version ?? this.copies.keptTail(conversationId)?.state.version,
      catchUp: async (conversationId) => {
        if (this.copies.copy(conversationId) !== undefined) await this.read(conversationId, "");
        else if (this.copies.keptTail(conversationId) !== undefined) await this.readTail(conversationId, "", []);
      },
      // The notification names no version: each is taken as one after the held copy's.
      subscribe: (conversationId) => this.changes.follow(idBytes(conversationId), () => this.followed.noticed(conversationId)),
      unsubscribe: (conversationId) => this.changes.unfollow(idBytes(conversationId)),
    });
  }



  /** `read` for a commit: a copy found behind means another process writes the conversation. */
  private async readForCommit(conversationId: string, idempotencyKey: string): Promise<CommitRead> {
    const before = this.copies.copy(conversationId);
    const read = await this.read(conversationId, idempotencyKey);
    if (before !== undefined && read.state !== before && read.state.version > 0n) this.followed.othersWrote(conversationId);
    return read;
  }

  /** `readTail` for a commit: a kept tail found behind means another process writes the conversation. */
  private async readTailForCommit(conversationId: string, idempotencyKey: string, callIds: readonly string[]): Promise<TailRead> {
    const kept = this.copies.keptTail(conversationId);
    const read = await this.readTail(conversationId, idempotencyKey, callIds);
    if (kept !== undefined && read.version !== kept.state.version && read.version > 0n) this.followed.othersWrote(conversationId);
    return read;
  }

  /** The tails this store keeps of conversations it committed on without a copy (kept-tails.ts): how many, and their approximate heap bytes. */
  get keptTails(): { count: number; bytes: number; reusedEntries: number } {
    return this.copies.keptTails;
  }

  /** The conversations whose stored id index this process remembers as stale: how many, and what they weigh (`--listed-id-bytes`). */
  get staleIdIndexIds(): { count: number; bytes: number } {
    return { count: this.staleIdIndexes.size, bytes: this.staleIdIndexes.keptBytes };
  }

  /** The decoded states and kept tails this process holds, and the commits that used them (the metrics' gauges). */
  get heldCopies(): HeldCopies {
    const { count, bytes } = this.copies.keptTails;
    const { keptTailCommits, tailReads } = this.commitTraffic;
    return { decodedStates: this.copies.decodedStates, keptTails: { count, bytes }, keptTailCommits, tailReads, prefetch: this.prefetch };
  }

  /** Resolves true once the database is reached and migrated, false after `timeoutMs` (the store then answers UNAVAILABLE and keeps trying). */
  async connected(timeoutMs = 5_000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        await this.connection.ready();
        return true;
      } catch {
        if (Date.now() >= deadline) return false;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  }

  async load(conversationId: string): Promise<ConversationState> {
    const { state } = await this.read(conversationId, "");
    this.codec.retainState(state, this.lineage);
    return state;
  }

  /**
   * One statement reads the header and the window's rows (and with `withRest` the rest and the
   * other segments); a cached copy at the stored version answers instead. Not cached: the next
   * `load` reads the whole state as before.
   */
  async readWindow(conversationId: string, query: WindowQuery): Promise<SegmentWindow> {
    const id = idBytes(conversationId);
    checkWindowQuery(query);
    const copy = this.copies.withLayout(conversationId);
    const segmentIndex = storedSegments.indexOf(query.segment);
    const others = query.withRest ? [0, 1, 2, 3].filter((index) => index !== segmentIndex) : [];
    const { rows } = await this.connection.query<WindowRow>(
      "reading a window of a conversation",
      windowQuery,
      [id, segmentIndex, query.end ?? null, query.count, query.withRest, copy ? copy.state.version : null, copy?.layout.created ?? null, others, this.now()],
      "contextd_window",
    );
    const header = rows[0];
    if (header === undefined || header.segment !== -1) {
      if (query.atVersion !== undefined && query.atVersion !== 0n) throw windowMoved(conversationId, query.atVersion, 0n);
      return windowOf(emptyConversationState(conversationId), query);
    }
    const version = BigInt(header.version!);
    if (query.atVersion !== undefined && query.atVersion !== version) throw windowMoved(conversationId, query.atVersion, version);
    if (header.current) {
      this.copies.touch(conversationId);
      return this.copies.heldWindow(copy!.state, query);
    }
    const start = header.start!;
    const length = header.length!;
    const received = new ReceivedRows(header.owners);
    let first: { bytes: Buffer; sealer: string | undefined } | undefined;
    for (const row of rows.slice(1)) {
      if (row.kind === 3) first = { bytes: row.message!, sealer: received.sealerOf(row.link) };
      else received.add(row.segment, row.message!, row.link);
    }
    const { stop } = windowBounds(query, length);
    if (received.items[segmentIndex]!.length !== stop - start) {
      throw corruptConversation(conversationId, `the ${query.segment} segment has ${received.items[segmentIndex]!.length} message rows in positions ${start} to ${stop - 1} but the header row says ${length} messages`);
    }
    let state: ConversationState = { ...emptyConversationState(conversationId), version };
    if (query.withRest) {
      state = { ...this.copies.decodeRest(conversationId, header.message!), conversationId, version };
      for (const index of others) state[storedSegments[index]!] = this.copies.decode(conversationId, received.items[index]!, 0, storedSegments[index]!, received.sealers?.[index]);
    }
    const items = received.items[segmentIndex]!;
    const sealers = received.sealers?.[segmentIndex];
    const { messages, running } =
      query.segment === "history"
        ? this.copies.decodeHistoryWithFacts(conversationId, items, start, String(header.at), header.created!, sealers)
        : this.copies.decodeWithFacts(conversationId, items, start, query.segment, sealers);
    state[query.segment] = messages;
    const firstMessage = first === undefined ? undefined : this.copies.decode(conversationId, [first.bytes], 0, query.segment, [first.sealer])[0];
    return { state, start, length, stored: { running, epoch: BigInt(header.at!), first: firstMessage } };
  }

  async currentVersion(conversationId: string): Promise<bigint> {
    const { rows } = await this.connection.query<{ version: string }>(
      "reading the version",
      `SELECT version FROM contextd_conversations WHERE id = $1 AND ${unexpired("$2")}`,
      [idBytes(conversationId), this.now()],
    );
    return rows.length === 0 ? 0n : BigInt(rows[0]!.version);
  }

  async list(query: ListQuery): Promise<ConversationPage> {
    const { prefix } = query;
    requireStorableText("prefix", prefix);
    const position = positionOf(query);
    const lower = Buffer.from(prefix, "utf8");
    // UTF-8 never holds 0xff, so prefix + 0xff is past every id that starts with the prefix.
    const upper = prefix === "" ? null : Buffer.concat([lower, Buffer.from([0xff])]);
    const after = Buffer.from(position?.conversationId ?? "", "utf8");
    const columns = "id, version, created_at_ms, updated_at_ms, title, labels, expires_at_ms";
    // By update the prefix is a filter (it does not narrow the index's range): the rows read are
    // bounded by the limit, as for the other filters.
    const { rows } = await this.connection.query<ListedRow>(
      "listing conversations",
      query.order === "id"
        ? `SELECT ${columns} FROM contextd_conversations WHERE id >= $1 AND id > $2 AND ($3::bytea IS NULL OR id < $3) AND ${unexpired("$5")} ORDER BY id LIMIT $4`
        : `SELECT ${columns} FROM contextd_conversations WHERE ($1::bigint IS NULL OR (-updated_at_ms, id) > (-$1::bigint, $2)) AND ${unexpired("$4")} ORDER BY (-updated_at_ms), id LIMIT $3`,
      query.order === "id"
        ? [lower, after, upper, entriesToRead(query), this.now()]
        : [position === undefined ? null : position.updatedAtUnixMs, after, entriesToRead(query), this.now()],
    );
    const read: ExaminedEntry[] = rows.map((row) => {
      const conversationId = row.id.toString("utf8");
      const updatedAtUnixMs = BigInt(row.updated_at_ms);
      const summary = summaryOf(conversationId, BigInt(row.version), BigInt(row.created_at_ms), updatedAtUnixMs, ...this.listingFields(conversationId, row), BigInt(row.expires_at_ms));
      return { position: { conversationId, updatedAtUnixMs }, summary };
    });
    return pageOf(query, read);
  }

  watch(conversationId: string, fromVersion: bigint, signal: AbortSignal): AsyncIterable<Change> {
    return this.changes.watch(conversationId, idBytes(conversationId), fromVersion, signal);
  }

  async readCalibration(key: CalibrationRecordKey, nowMs: number, bounds: CalibrationBounds): Promise<TokenCorrection | undefined> {
    const { rows } = await this.connection.query<{ factor: number; reports: string; mean_error: number }>(
      "reading a token calibration",
      "SELECT factor, reports, mean_error FROM contextd_calibration WHERE tenant = $1 AND field = $2 AND reported_at_ms > $3",
      [Buffer.from(key.tenant, "utf8"), Buffer.from(calibrationField(key), "utf8"), nowMs - bounds.ttlMs],
      "contextd_read_calibration",
    );
    const row = rows[0];
    return row && { factor: row.factor, reports: Number(row.reports), meanAbsoluteRelativeError: row.mean_error };
  }

  async reportCalibration(key: CalibrationRecordKey, estimatedTokens: number, actualTokens: number, nowMs: number, bounds: CalibrationBounds): Promise<LearntCorrection> {
    const { rows } = await this.connection.query<{ factor: number; reports: string; mean_error: number; relative_error: number }>(
      "reporting usage",
      "SELECT * FROM contextd_report_usage($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
      [Buffer.from(key.tenant, "utf8"), Buffer.from(calibrationField(key), "utf8"), estimatedTokens, actualTokens, nowMs, bounds.ttlMs, bounds.maxKeysPerTenant, minCorrection, maxCorrection, calibrationWindow, maxCorrectionStep],
      "contextd_report_usage",
    );
    const row = rows[0]!;
    return { correction: { factor: row.factor, reports: Number(row.reports), meanAbsoluteRelativeError: row.mean_error }, relativeError: row.relative_error };
  }

  /**
   * Health: the schema is migrated and the server takes writes (not a standby in recovery, not
   * read-only), checked with one query.
   */
  async ping(): Promise<void> {
    const { rows } = await this.connection.query<{ standby: boolean; read_only: string }>(
      "checking that Postgres takes writes",
      "SELECT pg_is_in_recovery() AS standby, current_setting('transaction_read_only') AS read_only",
      [],
    );
    if (rows[0]!.standby || rows[0]!.read_only === "on") {
      throw new ConnectError(`postgres store at ${redactUrl(this.connection.url, "postgres")} takes no writes (a standby in recovery or a read-only server)`, Code.Unavailable);
    }
  }

  /** `contextd_delete`: the version check and every row of the conversation in one transaction, notifying its watchers. */
  async delete(conversationId: string, expectedVersion: bigint | undefined): Promise<bigint> {
    const id = idBytes(conversationId);
    const { rows } = await this.connection.query<{ outcome: "ok" | "conflict"; version: string }>(
      "deleting a conversation",
      "SELECT * FROM contextd_delete($1, $2, $3, $4)",
      [id, expectedVersion ?? -1n, this.now(), changesChannel],
    );
    const current = BigInt(rows[0]!.version);
    if (rows[0]!.outcome === "conflict") throw versionConflict(conversationId, expectedVersion!, current);
    this.copies.forget(conversationId);
    this.changes.notifyCommitted(id, true);
    return current;
  }

  /**
   * Deletes expired conversations in batches of `expirySweepBatch` (one statement each, so each
   * holds its rows' locks only that long, and the event loop runs between them), up to
   * `expirySweepBatches` per pass. Returns how many went.
   */
  async sweepExpired(): Promise<number> {
    if (this.sweeping) return 0;
    this.sweeping = true;
    try {
      let removed = 0;
      for (let batch = 0; batch < expirySweepBatches; batch++) {
        const { rows } = await this.connection.query<{ deleted: number }>(
          "deleting expired conversations",
          "SELECT contextd_delete_expired($1, $2) AS deleted",
          [this.now(), expirySweepBatch],
        );
        removed += rows[0]!.deleted;
        if (rows[0]!.deleted < expirySweepBatch) break;
      }
      return removed;
    } finally {
      this.sweeping = false;
    }
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.followed.clear();
    await Promise.allSettled([this.changes.close(), this.connection.pool.end()]);
  }

  /**
   * Reads the state and, for a non-empty key, the idempotency record, in one statement: nothing
   * of the state when the stored version is the cached one, the new rows of each segment that only
   * grew since, and whole only the segments rewritten since (or everything, without a usable copy).
   */
  private async read(conversationId: string, idempotencyKey: string): Promise<CommitRead> {
    const id = idBytes(conversationId);
    const copy = this.copies.withLayout(conversationId);
    const layout = copy?.layout;
    const { rows } = await this.connection.query<LoadRow>(
      "loading a conversation",
      "SELECT * FROM contextd_load_linked($1, $2, $3, $4, $5, $6, $7, $8)",
      [
        id,
        Buffer.from(idempotencyKey, "utf8"),
        this.now(),
        copy ? copy.state.version : -1n,
        layout?.created ?? null,
        layout?.restAt ?? null,
        layout ? layout.segments.map((segment) => segment.at) : [0, 0, 0, 0],
        layout ? layout.segments.map((segment) => segment.length) : [0, 0, 0, 0],
      ],
      "contextd_load_linked",
    );
    const header = rows[0]!;
    const record = header.fingerprint !== null && header.recorded !== null ? { fingerprint: header.fingerprint, version: BigInt(header.recorded) } : undefined;
    const version = BigInt(header.version!);
    if (version === 0n) {
      this.copies.forget(conversationId);
      return { state: emptyConversationState(conversationId), record };
    }
    if (header.current) {
      this.copies.touch(conversationId);
      return { state: copy!.state, record };
    }
    const received = new ReceivedRows(header.owners);
    for (const row of rows.slice(1)) received.add(row.segment!, row.message!, row.link);
    const segments = storedSegments.map((_, index) => ({
      at: header.segment_at![index]!,
      from: header.segment_from![index]!,
      length: header.segment_length![index]!,
      items: received.items[index]!,
      sealers: received.sealers?.[index],
    }));
    const state = this.copies.assemble(conversationId, version, { created: header.created!, restAt: header.rest_at!, rest: header.message }, segments, copy?.state);
    return { state, record };
  }

  /**
   * What a commit planned on the stored tail reads (`contextd_commit_tail_linked`, one statement),
   * widening the window while it holds only tool results; a conversation never written (or
   * expired) comes back whole.
   */
  private async readTail(conversationId: string, idempotencyKey: string, callIds: readonly string[]): Promise<TailRead> {
    const id = idBytes(conversationId);
    const calls = callIds.map((callId) => Buffer.from(callId, "utf8"));
    for (let count = tailWindowMessages; ; count *= 8) {
      const { rows } = await this.connection.query<TailRow>(
        "reading a conversation's tail",
        "SELECT * FROM contextd_commit_tail_linked($1, $2, $3, $4, $5)",
        [id, Buffer.from(idempotencyKey, "utf8"), this.now(), count, calls],
        "contextd_commit_tail_linked",
      );
      const header = rows[0]!;
      const record = header.fingerprint !== null && header.recorded !== null ? { fingerprint: header.fingerprint, version: BigInt(header.recorded) } : undefined;
      const version = BigInt(header.version!);
      if (version === 0n) {
        this.copies.forget(conversationId);
        return { version, record, whole: emptyConversationState(conversationId) };
      }
      if (!header.indexed) {
        this.markIdIndexStale(conversationId);
        return { version, record };
      }
      const received = new ReceivedRows(header.owners);
      for (const row of rows.slice(1)) received.add(row.segment!, row.message!, row.link);
      const segments = storedSegments.map((_, index) => ({
        at: header.segment_at![index]!,
        from: header.segment_from![index]!,
        length: header.segment_length![index]!,
        items: received.items[index]!,
        sealers: received.sealers?.[index],
      }));
      const tail = this.copies.tailOf(conversationId, version, { created: header.created!, restAt: header.rest_at!, rest: header.message }, segments);
      if (tail === "wider" && count * 8 <= maxTailWindowMessages) continue;
      if (tail === "wider" || tail === undefined) return { version, record };
      const names = header.names ?? [];
      const headCallNames = new Map(callIds.map((callId, index) => [callId, names[index] == null ? undefined : names[index]!.toString("utf8")]));
      this.copies.keepTail(tail);
      return { version, record, tail: { ...tail, headCallNames } };
    }
  }

  /** Remembers that the conversation's stored id index is stale: this process's next commit to it writes it whole. */
  private markIdIndexStale(conversationId: string): void {
    this.staleIdIndexes.set(conversationId, true);
  }

  /**
   * A listing field as the header row keeps it: under encryption the title column holds the
   * sealed title in base64 and the labels column (jsonb) a JSON string of the sealed labels' base64.
   */
  private sealedText(conversationId: string, kind: "title" | "labels", text: string): string {
    if (!this.values.encrypts) return text;
    const sealed = this.values.seal(conversationId, kind, Buffer.from(text, "utf8")).toString("base64");
    return kind === "labels" ? JSON.stringify(sealed) : sealed;
  }

  /** A listing row's title and labels, opened when sealed (an empty title was never written). */
  private listingFields(conversationId: string, row: Pick<ListedRow, "title" | "labels">): [string, Record<string, string>] {
    if (!this.values.encrypts) return [row.title, row.labels as Record<string, string>];
    const open = (kind: "title" | "labels", stored: string) =>
      this.values.open(conversationId, kind, Buffer.from(stored, "base64"), () => `the header row's ${kind}`).toString("utf8");
    const title = row.title === "" ? "" : open("title", row.title);
    if (typeof row.labels !== "string" && Object.keys(row.labels).length > 0) {
      throw corruptConversation(conversationId, "the header row's labels are not encrypted (the sidecar runs with encryption at rest; were they written without?)");
    }
    const labels = typeof row.labels === "string" ? (JSON.parse(open("labels", row.labels)) as Record<string, string>) : {};
    return [title, labels];
  }

  /**
   * The source's current version forked inside the database, in one statement: the new
   * conversation links the source's rows (migration 14, `contextd_fork_linked` since 17), writing no
   * message row nor index row: the id index is kept per storage and shared with the rows (migration 16).
   */
  protected override async forkCurrent(conversationId: string, forkedFrom: ForkOrigin, newConversationId: string): Promise<"copied" | "exists" | "unavailable"> {
    const restSuffix = bufferOf(toBinary(ConversationStateSchema, create(ConversationStateSchema, { conversationId: newConversationId, forkedFrom })));
    return this.forkShared(conversationId, forkedFrom.version, forkedFrom, newConversationId, { restSuffix });
  }

  /**
   * A past version forks as the current one does, sharing per segment the longest prefix of the
   * source's current rows it starts with, and writes the rest as the fork's own rows in the same
   * statement (`StoredCopies.forkTails`, migration 18): what the changes since changed, not the
   * conversation (a version before appends only shares all). Its rest, title and labels are the
   * past state's. When the fork would expire, or without the source's current copy, the engine
   * writes it.
   */
  protected override async forkPast(conversationId: string, forkedFrom: ForkOrigin, newConversationId: string, past: ConversationState, current: bigint): Promise<"copied" | "exists" | "unavailable"> {
    if (this.expiry.ttlOf(newConversationId, past) !== 0) return "unavailable";
    if (!this.sharesRowsWith(conversationId, newConversationId)) return "unavailable";
    const latest = this.copies.withLayout(conversationId)?.state;
    if (latest === undefined || latest.version !== current) return "unavailable";
    // Sealed for the fork under encryption: they are its own rows.
    const tails = this.copies.forkTails(newConversationId, latest, past);
    const rest = bufferOf(this.codec.encodeStateRest({ ...past, conversationId: newConversationId, forkedFrom }));
    return this.forkShared(conversationId, current, forkedFrom, newConversationId, { rest, tails, title: past.title, labels: JSON.stringify(past.labels) });
  }

  /**
   * Whether a fork may share the source's rows. Under encryption not into another tenant (a
   * shared row opens only with its sealer's tenant key), nor with --share-encrypted-forks false
   * (sidecars of a previous release read the store).
   */
  private sharesRowsWith(conversationId: string, newConversationId: string): boolean {
    return !this.values.encrypts || (this.sharesEncryptedForks && tenantOf(conversationId) === tenantOf(newConversationId));
  }

  /**
   * One call of `contextd_fork_tailed` (migration 18's: `contextd_fork_linked` of 17, then the
   * past version's `tails` past what it shares written as the fork's own rows; the fork's index is
   * the rows' it links and its own, current when the source's is, migration 16). Under encryption at rest the shared rows stay
   * sealed for the conversations that wrote them (reads open each as its storage's owner's,
   * `ReceivedRows`); only the fork's own values are sealed for it: its rest, title and labels
   * (`sealedForkFields`) and its change. Still "unavailable" there, for the engine to write the
   * fork sealed anew, when the fork is into another tenant (a linked row opens only for its
   * writer's tenant) or would copy rows past 64 links. An expired conversation under the new id
   * that no sweep removed yet reads as never written, but its row would make the fork answer
   * "exists" (ALREADY_EXISTS for an id that reads as free): removed first, with its idempotency
   * records and ledger (`contextd_delete` expecting version 0 removes only that).
   */
  private async forkShared(
    conversationId: string,
    version: bigint,
    forkedFrom: ForkOrigin,
    newConversationId: string,
    of: { restSuffix?: Buffer; rest?: Buffer; tails?: readonly ForkTail[]; title?: string; labels?: string },
  ): Promise<"copied" | "exists" | "unavailable"> {
    const encrypts = this.values.encrypts;
    if (!this.sharesRowsWith(conversationId, newConversationId)) return "unavailable";
    const now = this.now();
    const change = this.values.seal(newConversationId, "change", toBinary(ChangeSchema, create(ChangeSchema, { conversationId: newConversationId, version: 1n, committedAtUnixMs: BigInt(now), forkedFrom })));
    const created = randomUUID();
    await this.connection.query("forking a conversation", "SELECT * FROM contextd_delete($1, 0, $2, '')", [idBytes(newConversationId), now]);
    const fields = encrypts ? await this.sealedForkFields(conversationId, version, newConversationId, of) : of;
    if (fields === undefined) return "unavailable";
    const tails = forkTailRows(of.tails ?? []);
    const { rows } = await this.connection.query<{ outcome: string }>(
      "forking a conversation",
      "SELECT contextd_fork_tailed($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19) AS outcome",
      [
        idBytes(conversationId),
        version,
        idBytes(newConversationId),
        created,
        fields.rest ?? null,
        fields.restSuffix ?? Buffer.alloc(0),
        of.tails?.map((tail) => tail.shared) ?? null,
        fields.title ?? null,
        fields.labels ?? null,
        change,
        now,
        changesChannel,
        !encrypts,
        tails.segments,
        tails.messages,
        tails.ids,
        tails.callIds,
        tails.callNames,
        tails.callAt,
      ],
      "contextd_fork_tailed",
    );
    const outcome = rows[0]!.outcome;
    // A fork at the current version holds what the source's copy holds (a past one: a rest of its own).
    if (outcome === "ok" && of.restSuffix !== undefined) this.copies.rememberFork(forkedFrom, newConversationId, created, of.restSuffix.length);
    return outcome === "ok" ? "copied" : outcome === "exists" ? "exists" : "unavailable";
  }

  /**
   * Under encryption: the fork's rest, title and labels sealed for the fork. A past version's
   * come as plaintext (`forkPast`); the current one's are the source's header row's, opened as
   * the source's and sealed again (its rest with `restSuffix` appended, as the SQL appends it
   * without encryption): 3 values, whatever the message count. Undefined when the source is no
   * longer at `version` (the fork then answers as a moved source does).
   */
  private async sealedForkFields(
    conversationId: string,
    version: bigint,
    newConversationId: string,
    of: { restSuffix?: Buffer; rest?: Buffer; title?: string; labels?: string },
  ): Promise<{ rest: Buffer; restSuffix?: Buffer; title: string; labels: string } | undefined> {
    if (of.restSuffix === undefined) {
      return { rest: this.values.seal(newConversationId, "rest", of.rest!), title: this.sealedText(newConversationId, "title", of.title!), labels: this.sealedText(newConversationId, "labels", of.labels!) };
    }
    const { rows } = await this.connection.query<{ version: string; rest: Buffer; title: string; labels: Record<string, string> | string }>(
      "forking a conversation",
      "SELECT version, rest, title, labels FROM contextd_conversations WHERE id = $1",
      [idBytes(conversationId)],
    );
    const source = rows[0];
    if (source === undefined || BigInt(source.version) !== version) return undefined;
    const rest = this.values.open(conversationId, "rest", source.rest, () => "the header row's rest");
    const [title, labels] = this.listingFields(conversationId, source);
    return {
      rest: this.values.seal(newConversationId, "rest", Buffer.concat([rest, of.restSuffix])),
      title: this.sealedText(newConversationId, "title", title),
      labels: this.sealedText(newConversationId, "labels", JSON.stringify(labels)),
    };
  }

  /** The engine's write: one call of `contextd_commit_shared` (one transaction), notifying
   * watchers while some sidecar listens (migration 12). A plan on `tail` is written after the stored head and kept as the conversation's tail, not as its copy (kept-tails.ts). The id
   * index (stored-id-index.ts) is written whole when a read or write found it stale.
   */
  private async write(conversationId: string, base: ConversationState, plan: CommitPlan, idempotencyKey: string, fingerprint: string, tail: CommitTail | undefined): Promise<CommitWrite> {
    const id = idBytes(conversationId);
    const write = tail ? this.copies.writeOfTail(tail, plan.state) : this.copies.writeOf(base, plan.state);
    const index = idIndexChanges(base, plan.state, this.lineage, tail ? "t" : this.staleIdIndexes.get(conversationId) === true ? "b" : "a");
    const utf8 = (texts: readonly string[]) => texts.map((text) => Buffer.from(text, "utf8"));
    // The index keeps a row per call made, where it is (migration 16): renames and removals follow the rows.
    const callIds = index.madeCalls.map((call) => Buffer.from(call.id, "utf8"));
    const callNames = index.madeCalls.map((call) => Buffer.from(call.name, "utf8"));
    const encodings = write.segments.flatMap((segment) => segment.encodings);
    const starts: number[] = [];
    const lengths: number[] = [];
    let offset = 1;
    for (const encoding of encodings) {
      starts.push(offset);
      lengths.push(encoding.length);
      offset += encoding.length;
    }
    // Alone, the commit notifies in its own transaction (no second statement), and only if some
    // sidecar listens; with others in flight, after them, together (a notifying transaction
    // serializes commits' WAL flushes).
    const notifyInTransaction = this.commitsInFlight === 0;
    this.commitsInFlight++;
    const committing = this.connection.query<CommitRow>(
      "committing",
      "SELECT * FROM contextd_commit_shared($22, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $23, $24, $25, $26, $27, $28, $29)",
      [
        id,
        base.version,
        this.values.seal(conversationId, "change", toBinary(ChangeSchema, plan.change)),
        Buffer.from(idempotencyKey, "utf8"),
        fingerprint,
        this.now(),
        this.idempotencyTtlMs,
        this.maxChanges,
        notifyInTransaction ? changesChannel : "",
        write.created,
        write.rest ?? null,
        write.segments.map((segment) => segment.baseLength),
        write.segments.map((segment) => segment.mode),
        write.segments.map((segment) => segment.keep),
        write.segments.map((segment) => segment.encodings.length),
        Buffer.concat(encodings),
        starts,
        lengths,
        plan.metadata.updatedAtUnixMs,
        plan.metadata.changed ? this.sealedText(conversationId, "title", plan.metadata.title) : null,
        plan.metadata.changed ? this.sealedText(conversationId, "labels", JSON.stringify(plan.metadata.labels)) : null,
        plan.metadata.expiresAtUnixMs,
        index.mode,
        utf8(index.addedIds),
        utf8(index.removedIds),
        callIds,
        callNames,
        [],
        index.madeCalls.map((call) => call.at),
      ],
      "contextd_commit_shared",
    );
    const { rows } = await committing.finally(() => this.commitsInFlight--);
    const reply = rows[0]!;
    if (reply.outcome === "ok") {
      this.changes.notifyCommitted(id, notifyInTransaction);
      if (!tail) this.copies.remember(plan.state, write.layout);
      else this.copies.keepWrittenTail(tail, plan.state, write.layout);
      if (reply.indexed) this.staleIdIndexes.delete(conversationId);
      else this.markIdIndexStale(conversationId);
      // The commit notified (while anyone listens); following, keep this process listening.
      if (this.followed.committed(conversationId)) this.changes.keepListening();
      return { outcome: "ok" };
    }
    // Not written: a tail kept at the base is behind (or refused); the next commit reads the tail afresh.
    if (tail) this.copies.dropTail(conversationId);
    if (reply.outcome === "unindexed") this.markIdIndexStale(conversationId);
    if (reply.outcome === "unindexed" || reply.outcome === "taken") return { outcome: "whole" };
    const current = BigInt(reply.version);
    if (reply.outcome === "replay") return { outcome: "replay", record: { fingerprint: reply.fingerprint!, version: BigInt(reply.recorded!) }, current };
    // "stale": the stored segments are not those of the cached state at its version (written
    // behind this process's back): forget the copy and read the stored state whole.
    if (reply.outcome === "stale") {
      this.copies.forget(conversationId);
      return { outcome: "stale", current };
    }
    this.followed.othersWrote(conversationId);
    return { outcome: "conflict", current };
  }
}

/** The id's UTF-8, refusing lone surrogates (both other stores refuse them alike). */
function idBytes(conversationId: string): Buffer {
  requireStorableKey("conversation_id", conversationId, stringLimits.id);
  return Buffer.from(conversationId, "utf8");
}

/**
 * A fork's own rows as `contextd_fork_tailed`'s arrays: per message (in segment order) its
 * segment, encoding and id; per call the history tail makes its id, name and the place in the
 * history tail of the message making it (the index keeps a row per call, where it is).
 */
function forkTailRows(tails: readonly ForkTail[]): { segments: number[]; messages: Buffer[]; ids: Buffer[]; callIds: Buffer[]; callNames: Buffer[]; callAt: number[] } {
  const rows = { segments: [] as number[], messages: [] as Buffer[], ids: [] as Buffer[], callIds: [] as Buffer[], callNames: [] as Buffer[], callAt: [] as number[] };
  tails.forEach((tail, segment) => {
    // One push per item: spread as arguments, a long tail would overflow the stack.
    for (const encoding of tail.encodings) {
      rows.segments.push(segment);
      rows.messages.push(encoding);
    }
    for (const message of tail.messages) rows.ids.push(Buffer.from(message.id, "utf8"));
  });
  tails[storedSegments.indexOf("history")]?.messages.forEach((message, at) =>
    forEachCall(message, (id, name) => {
      rows.callIds.push(Buffer.from(id, "utf8"));
      rows.callNames.push(Buffer.from(name, "utf8"));
      rows.callAt.push(at);
    }),
  );
  return rows;
}

/** A row of a listing. */
interface ListedRow {
  id: Buffer;
  version: string;
  created_at_ms: string;
  updated_at_ms: string;
  title: string;
  /** A JSON string (the sealed labels' base64) under encryption. */
  labels: Record<string, string> | string;
  expires_at_ms: string;
}

/** The SQL condition of a header row that has not expired at the parameter `now` (Unix ms). */
function unexpired(now: string): string {
  return `(expires_at_ms = 0 OR expires_at_ms > ${now}::bigint)`;
}

/**
 * A read's message rows per segment and, when the conversation reads through links, per row the
 * conversation that sealed it (`Sealers`): a row read through the n-th link is the n-th of the
 * header's `owners` (migration 17: its storage's owner); its own rows are its own.
 */
class ReceivedRows {
  readonly items: Buffer[][] = [[], [], [], []];
  /** Undefined without links: every row is the conversation's own. */
  readonly sealers: (string | undefined)[][] | undefined;
  private readonly owners: string[];

  constructor(owners: readonly Buffer[] | null) {
    this.owners = (owners ?? []).map((owner) => owner.toString("utf8"));
    this.sealers = this.owners.length === 0 ? undefined : [[], [], [], []];
  }

  add(segment: number, message: Buffer, link: number | null): void {
    this.items[segment]!.push(message);
    this.sealers?.[segment]!.push(this.sealerOf(link));
  }

  sealerOf(link: number | null): string | undefined {
    return link === null ? undefined : this.owners[link - 1];
  }
}
