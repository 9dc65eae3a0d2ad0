import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { createHash, randomUUID } from "node:crypto";
import pg from "pg";
import { ChangeSchema, ConversationSummarySchema, type Change } from "#gen/contextd/v1/conversation_service_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, type ConversationState, type Delta } from "#gen/contextd/v1/state_pb";
import { Codec } from "../codec/codec.js";
import type { DeltaContext } from "../core/deltas/delta-context.js";
import { MessageListLineage } from "../core/model/message-list-lineage.js";
import { clearStateDeltas, deltasFingerprint, emptyConversationState, indexedLookups, planCommit, presetMessageIds } from "./commit-plan.js";
import type { CommitOutcome, ConversationPage, ConversationStore } from "./conversation-store.js";
import { ContendedCopies } from "./contended-copies.js";
import { DecodedStateCache, defaultDecodedStateBytes, defaultDecodedStates } from "./decoded-state-cache.js";
import { defaultIdempotencyTtlMs, defaultMaxChangesPerConversation } from "./memory-conversation-store.js";
import { decodePageToken, encodePageToken } from "./page-token.js";
import { changesChannel, migratePostgres } from "./postgres-schema.js";
import { calibrationWindow, maxCorrection, maxCorrectionStep, minCorrection, type LearntCorrection, type TokenCorrection } from "../core/compile/token-calibration.js";
import { calibrationField, type CalibrationBounds, type CalibrationRecordKey } from "./calibration-store.js";
import { checkWindowQuery, windowBounds, windowMoved, windowOf, type SegmentWindow, type WindowQuery } from "./segment-window.js";
import { restDiffers, segmentEdit, storedSegments, trustCaughtUpSegment } from "./segment-edits.js";
import { heldWindowFacts, runningFactsOfWrite } from "./history-running-facts.js";
import type { RunningFacts } from "../codec/stored-token-counts.js";
import { changesNotRetained, corruptConversation, idempotencyKeyReused, requireStorableKey, requireStorableText, versionConflict } from "./store-errors.js";
import { stringLimits } from "../core/model/string-limits.js";

export interface PostgresStoreOptions {
  /** Changes kept per conversation for Watch resumption (the oldest deleted by the commit that goes past it). */
  maxChangesPerConversation?: number;
  idempotencyTtlMs?: number;
  /** Decoded states kept in this process, validated against the stored version on every use. */
  cacheSize?: number;
  /** Approximate heap bytes of the states kept (`--decoded-state-bytes`, see DecodedStateCache). */
  cacheBytes?: number;
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
}

/**
 * Connection settings that make an outage an immediate UNAVAILABLE instead of a hang: a bounded
 * connect time, a server-side statement timeout, TCP keep-alive. The pool opens new connections
 * as it needs them, so the store recovers by itself once Postgres is back.
 */
const connectTimeoutMs = 2_000;
const statementTimeoutMs = 30_000;

/** Rows of changes one Watch query reads at most. */
const watchPageRows = 500;

/** One segment as stored: its last rewrite (`segment_at`), its length, and its messages' encoded size. */
interface SegmentLayout {
  at: string;
  length: number;
  bytes: number;
}

/** Where a state the process holds stands in the header row, so a load sends only what it lacks. */
interface StoredLayout {
  created: string;
  restAt: string;
  restBytes: number;
  /** In `storedSegments` order. */
  segments: SegmentLayout[];
}

interface IdempotencyRecord {
  fingerprint: string;
  version: bigint;
}

interface Loaded {
  state: ConversationState;
  record?: IdempotencyRecord;
}

/** A row of `contextd_load` (int8 columns arrive as decimal strings). */
interface LoadRow {
  segment: number | null;
  message: Buffer | null;
  version: string | null;
  current: boolean | null;
  created: string | null;
  rest_at: string | null;
  segment_at: string[] | null;
  segment_from: number[] | null;
  segment_length: number[] | null;
  fingerprint: string | null;
  recorded: string | null;
}

/** A row of `windowQuery`: the header first (segment -1), then message rows in segment and position order. */
interface WindowRow {
  kind: number;
  segment: number;
  at: string | null;
  message: Buffer | null;
  version: string | null;
  created: string | null;
  current: boolean | null;
  start: number | null;
  length: number | null;
}

/**
 * `readWindow` in one statement (one snapshot): the header row, then the window's rows (a range
 * of the primary key) and, with the rest, the other segments' rows. $1 id, $2 segment (0-3), $3
 * end (null = the length), $4 count, $5 with the rest, $6 and $7 the cached copy's version and
 * created (null = none; when they are the stored ones no row but the header is sent), $8 the
 * other segments (empty without the rest). Rows say their kind: 0 the header, 1 the window, 2 the
 * other segments, 3 the segment's first message when the window starts after it.
 */
const windowQuery = `
WITH h AS (
  SELECT c.version, c.created, c.rest, c.segment_first, c.segment_length, c.segment_at,
    LEAST(COALESCE($3::integer, c.segment_length[$2::smallint + 1]), c.segment_length[$2::smallint + 1]) AS stop
  FROM contextd_conversations c WHERE c.id = $1
), w AS (
  SELECT h.*, GREATEST(0, h.stop - $4::integer) AS start, COALESCE(h.version = $6::bigint AND h.created = $7::text, false) AS current FROM h
)
SELECT 0 AS kind, -1::smallint AS segment, CASE WHEN $5::boolean AND NOT w.current THEN w.rest END AS message, w.version, w.created, w.current, w.start,
  w.segment_length[$2::smallint + 1] AS length, w.segment_at[$2::smallint + 1] AS at, NULL::integer AS position FROM w
UNION ALL
SELECT 1, m.segment, m.message, NULL, NULL, NULL, NULL, NULL, NULL, m.position FROM contextd_messages m, w
  WHERE NOT w.current AND m.conversation_id = $1 AND m.segment = $2::smallint
    AND m.position >= w.segment_first[$2::smallint + 1] + w.start AND m.position < w.segment_first[$2::smallint + 1] + w.stop
UNION ALL
SELECT 2, m.segment, m.message, NULL, NULL, NULL, NULL, NULL, NULL, m.position FROM contextd_messages m, w
  WHERE NOT w.current AND m.conversation_id = $1 AND m.segment = ANY($8::smallint[])
    AND m.position >= w.segment_first[m.segment + 1] AND m.position < w.segment_first[m.segment + 1] + w.segment_length[m.segment + 1]
UNION ALL
SELECT 3, m.segment, m.message, NULL, NULL, NULL, NULL, NULL, NULL, m.position FROM contextd_messages m, w
  WHERE NOT w.current AND w.start > 0 AND m.conversation_id = $1 AND m.segment = $2::smallint AND m.position = w.segment_first[$2::smallint + 1]
ORDER BY kind, segment, position`;

interface CommitRow {
  outcome: "ok" | "replay" | "conflict" | "stale";
  version: string;
  fingerprint: string | null;
  recorded: string | null;
}

/**
 * The Postgres store. Same contract and same caching as the Redis store: a commit is computed in
 * the sidecar from the cached (or freshly read) state, then one call of `contextd_commit` locks
 * the conversation's header row, compares the version, writes the rows the batch changed, the
 * change and the idempotency record, bumps the version and notifies watchers, in one transaction.
 * A load sends only what the cached copy lacks. Watch reads the changes table and wakes on
 * LISTEN/NOTIFY. The schema is created and migrated when the store first reaches the database.
 */
export class PostgresConversationStore implements ConversationStore {
  private readonly pool: pg.Pool;
  private readonly maxChanges: number;
  private readonly idempotencyTtlMs: number;
  private readonly watchPollMs: number;
  private readonly maxCommitAttempts: number;
  private readonly now: () => number;
  private readonly deltaContext: DeltaContext;
  private readonly cache: DecodedStateCache;
  /** Copies to read before committing from (see `ContendedCopies`). */
  private readonly contended = new ContendedCopies();
  /** Which segment lists were made by appending to which (commits, and loads that catch a cached copy up). */
  readonly lineage = new MessageListLineage();
  private readonly codec: Codec;
  private readonly layouts = new WeakMap<ConversationState, StoredLayout>();
  /** Until the schema is migrated: the migration in progress (reset when it fails, so the next call tries again). */
  private schema: Promise<void> | undefined;
  private lastError = "";
  /** Watches waiting for a change, by md5 of their conversation id (the notification's payload). */
  private readonly waiting = new Map<string, Set<() => void>>();
  /** Notification payloads of the commits that finished in this event-loop iteration (see `notifyCommitted`). */
  private readonly pendingNotifications = new Set<string>();
  /** Commits of this store waiting for `contextd_commit`. */
  private commitsInFlight = 0;
  private listener: pg.Client | undefined;
  private listening: Promise<void> | undefined;
  private closed = false;

  constructor(
    private readonly url: string,
    options: PostgresStoreOptions = {},
  ) {
    this.codec = options.codec ?? new Codec();
    this.maxChanges = options.maxChangesPerConversation ?? defaultMaxChangesPerConversation;
    this.idempotencyTtlMs = options.idempotencyTtlMs ?? defaultIdempotencyTtlMs;
    this.cache = new DecodedStateCache(options.cacheSize ?? defaultDecodedStates, options.cacheBytes ?? defaultDecodedStateBytes, this.lineage);
    this.watchPollMs = options.watchPollMs ?? 1_000;
    this.maxCommitAttempts = options.maxCommitAttempts ?? 100;
    this.now = options.now ?? Date.now;
    this.deltaContext = options.deltaContext ?? { newMessageId: () => randomUUID() };
    this.pool = new pg.Pool({
      connectionString: url,
      max: options.poolSize ?? 16,
      connectionTimeoutMillis: connectTimeoutMs,
      idleTimeoutMillis: 30_000,
      keepAlive: true,
      statement_timeout: statementTimeoutMs,
    });
    // An idle connection that dies (Postgres restarted) is reported here; the pool drops it.
    this.pool.on("error", (error: Error) => (this.lastError = error.message));
  }

  /** Resolves true once the database is reached and migrated, false after `timeoutMs` (the store then answers UNAVAILABLE and keeps trying). */
  async connected(timeoutMs = 5_000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        await this.ready();
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
    const cached = this.cache.get(conversationId);
    const layout = cached && this.layouts.get(cached);
    const segmentIndex = storedSegments.indexOf(query.segment);
    const others = query.withRest ? [0, 1, 2, 3].filter((index) => index !== segmentIndex) : [];
    const { rows } = await this.query<WindowRow>(
      "reading a window of a conversation",
      windowQuery,
      [id, segmentIndex, query.end ?? null, query.count, query.withRest, layout ? cached!.version : null, layout?.created ?? null, others],
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
      this.cache.touch(conversationId);
      return this.heldWindow(cached!, query);
    }
    const start = header.start!;
    const length = header.length!;
    const received: Buffer[][] = [[], [], [], []];
    let firstBytes: Buffer | undefined;
    for (const row of rows.slice(1)) {
      if (row.kind === 3) firstBytes = row.message!;
      else received[row.segment]!.push(row.message!);
    }
    const decodeRows = (items: Buffer[], segment: string, from: number) =>
      items.map((item, position) => {
        try {
          return this.codec.decodeStoredEntry(item);
        } catch (error) {
          throw corruptConversation(conversationId, `message ${from + position} of the ${segment} segment does not decode: ${(error as Error).message}`);
        }
      });
    const { stop } = windowBounds(query, length);
    if (received[segmentIndex]!.length !== stop - start) {
      throw corruptConversation(conversationId, `the ${query.segment} segment has ${received[segmentIndex]!.length} message rows in positions ${start} to ${stop - 1} but the header row says ${length} messages`);
    }
    let state: ConversationState = { ...emptyConversationState(conversationId), version };
    if (query.withRest) {
      try {
        state = { ...fromBinary(ConversationStateSchema, header.message!), conversationId, version };
      } catch (error) {
        throw corruptConversation(conversationId, `the header row's rest does not decode: ${(error as Error).message}`);
      }
      for (const index of others) state[storedSegments[index]!] = decodeRows(received[index]!, storedSegments[index]!, 0);
    }
    const running: (RunningFacts | undefined)[] = [];
    state[query.segment] = received[segmentIndex]!.map((item, position) => {
      try {
        const entry = this.codec.storedTokenCounts.decodeEntryWithFacts(item);
        running.push(entry.running);
        return entry.message;
      } catch (error) {
        throw corruptConversation(conversationId, `message ${start + position} of the ${query.segment} segment does not decode: ${(error as Error).message}`);
      }
    });
    const first = firstBytes === undefined ? undefined : decodeRows([firstBytes], query.segment, 0)[0];
    return { state, start, length, stored: { running, epoch: BigInt(header.at!), first } };
  }

  /** A window of the cached copy, with the stored facts of its history entries where this process knows them (`heldWindowFacts`). */
  private heldWindow(cached: ConversationState, query: WindowQuery): SegmentWindow {
    const window = windowOf(cached, query);
    const layout = this.layouts.get(cached);
    if (query.segment !== "history" || !layout) return window;
    const stored = heldWindowFacts(this.codec.storedTokenCounts, cached.history, window.start, window.start + window.state.history.length, BigInt(layout.segments[1]!.at));
    return stored ? { ...window, stored } : window;
  }

  async currentVersion(conversationId: string): Promise<bigint> {
    const { rows } = await this.query<{ version: string }>("reading the version", "SELECT version FROM contextd_conversations WHERE id = $1", [idBytes(conversationId)]);
    return rows.length === 0 ? 0n : BigInt(rows[0]!.version);
  }

  get strictToolRounds(): boolean {
    return this.deltaContext.strictToolRounds === true;
  }

  idLookupsFor(_conversationId: string, base: ConversationState): Pick<DeltaContext, "lineage" | "messageIds" | "toolCallIds"> {
    return indexedLookups(this.lineage, () => this.cache.idIndex(base));
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
    const lower = Buffer.from(prefix, "utf8");
    // UTF-8 never holds 0xff, so prefix + 0xff is past every id that starts with the prefix.
    const upper = prefix === "" ? null : Buffer.concat([lower, Buffer.from([0xff])]);
    const { rows } = await this.query<{ id: Buffer; version: string }>(
      "listing conversations",
      "SELECT id, version FROM contextd_conversations WHERE id >= $1 AND id > $2 AND ($3::bytea IS NULL OR id < $3) ORDER BY id LIMIT $4",
      [lower, Buffer.from(after, "utf8"), upper, pageSize + 1],
    );
    const page = rows.slice(0, pageSize).map((row) => ({ id: row.id.toString("utf8"), version: BigInt(row.version) }));
    return {
      conversations: page.map(({ id, version }) => create(ConversationSummarySchema, { conversationId: id, version })),
      nextPageToken: rows.length > pageSize ? encodePageToken(page[page.length - 1]!.id) : "",
    };
  }

  async *watch(conversationId: string, fromVersion: bigint, signal: AbortSignal): AsyncIterable<Change> {
    const id = idBytes(conversationId);
    const channelKey = createHash("md5").update(id).digest("hex");
    let notified = false;
    let wake: (() => void) | undefined;
    const onNotify = () => {
      notified = true;
      wake?.();
    };
    let waiters = this.waiting.get(channelKey);
    if (!waiters) this.waiting.set(channelKey, (waiters = new Set()));
    waiters.add(onNotify);
    const onAbort = () => wake?.();
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      let last = fromVersion;
      let first = true;
      while (!signal.aborted) {
        // Listening before each read, so no commit falls between the read and the wait (a no-op
        // while the store's listener is connected; it reconnects here after it dropped).
        await this.listen();
        notified = false;
        const { rows } = await this.query<{ version: string; change: Buffer }>(
          "reading changes",
          "SELECT version, change FROM contextd_changes WHERE conversation_id = $1 AND version > $2 ORDER BY version LIMIT $3",
          [id, last, watchPageRows],
        );
        if (first && fromVersion > 0n) {
          const oldest = rows.length > 0 ? BigInt(rows[0]!.version) : undefined;
          const current = oldest === undefined ? await this.currentVersion(conversationId) : oldest - 1n;
          if (current > fromVersion && (oldest === undefined || oldest > fromVersion + 1n)) {
            throw changesNotRetained(conversationId, fromVersion, oldest ?? current + 1n);
          }
        }
        first = false;
        for (const row of rows) {
          if (signal.aborted) return;
          const change = decodeChange(conversationId, row.version, row.change);
          yield change;
          last = change.version;
        }
        if (rows.length === watchPageRows || notified || signal.aborted) continue;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(finish, this.watchPollMs);
          function finish() {
            clearTimeout(timer);
            wake = undefined;
            resolve();
          }
          wake = finish;
        });
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      waiters.delete(onNotify);
      if (waiters.size === 0) this.waiting.delete(channelKey);
    }
  }

  /**
   * Health: the schema is migrated and the server takes writes (not a standby in recovery, not
   * read-only), checked with one query.
   */
  async readCalibration(key: CalibrationRecordKey, nowMs: number, bounds: CalibrationBounds): Promise<TokenCorrection | undefined> {
    const { rows } = await this.query<{ factor: number; reports: string; mean_error: number }>(
      "reading a token calibration",
      "SELECT factor, reports, mean_error FROM contextd_calibration WHERE tenant = $1 AND field = $2 AND reported_at_ms > $3",
      [Buffer.from(key.tenant, "utf8"), Buffer.from(calibrationField(key), "utf8"), nowMs - bounds.ttlMs],
      "contextd_read_calibration",
    );
    const row = rows[0];
    return row && { factor: row.factor, reports: Number(row.reports), meanAbsoluteRelativeError: row.mean_error };
  }

  async reportCalibration(key: CalibrationRecordKey, estimatedTokens: number, actualTokens: number, nowMs: number, bounds: CalibrationBounds): Promise<LearntCorrection> {
    const { rows } = await this.query<{ factor: number; reports: string; mean_error: number; relative_error: number }>(
      "reporting usage",
      "SELECT * FROM contextd_report_usage($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
      [Buffer.from(key.tenant, "utf8"), Buffer.from(calibrationField(key), "utf8"), estimatedTokens, actualTokens, nowMs, bounds.ttlMs, bounds.maxKeysPerTenant, minCorrection, maxCorrection, calibrationWindow, maxCorrectionStep],
      "contextd_report_usage",
    );
    const row = rows[0]!;
    return { correction: { factor: row.factor, reports: Number(row.reports), meanAbsoluteRelativeError: row.mean_error }, relativeError: row.relative_error };
  }

  async ping(): Promise<void> {
    const { rows } = await this.query<{ standby: boolean; read_only: string }>(
      "checking that Postgres takes writes",
      "SELECT pg_is_in_recovery() AS standby, current_setting('transaction_read_only') AS read_only",
      [],
    );
    if (rows[0]!.standby || rows[0]!.read_only === "on") {
      throw new ConnectError(`postgres store at ${redactUrl(this.url)} takes no writes (a standby in recovery or a read-only server)`, Code.Unavailable);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const waiters of this.waiting.values()) for (const wake of waiters) wake();
    const listener = this.listener;
    this.listener = undefined;
    await Promise.allSettled([listener?.end(), this.pool.end()]);
  }

  /**
   * Tells every sidecar's watches that the conversation changed, unless the commit's transaction
   * did: one NOTIFY statement for all the commits that finished in this event-loop iteration, sent
   * after their transactions committed (see postgres-schema.ts for why not inside them). Not awaited: a notification that fails (or a
   * sidecar that dies first) delays the change to the watches' next poll, nothing else.
   */
  private notifyCommitted(id: Buffer, notified: boolean): void {
    const payload = createHash("md5").update(id).digest("hex");
    // Watches in this process need no round trip through Postgres.
    for (const wake of this.waiting.get(payload) ?? []) wake();
    if (notified) return;
    if (this.pendingNotifications.size === 0) {
      setImmediate(() => {
        const payloads = [...this.pendingNotifications];
        this.pendingNotifications.clear();
        this.pool.query("SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload", [changesChannel, payloads]).catch((error: Error) => (this.lastError = error.message));
      });
    }
    this.pendingNotifications.add(payload);
  }

  /** Migrates the schema once per store (again after a failure). */
  private ready(): Promise<void> {
    this.schema ??= (async () => {
      const client = await this.pool.connect();
      try {
        await migratePostgres(client);
        client.release();
      } catch (error) {
        client.release(error as Error);
        // A connection that failed stays what it is (UNAVAILABLE); anything else the migration
        // met (no right to create tables, a newer schema) is reported as the schema's problem.
        if (error instanceof pg.DatabaseError && isConnectionFailure(error.code)) throw error;
        throw new Error(`creating or migrating the contextd schema failed: ${(error as Error).message}`);
      }
    })().catch((error: unknown) => {
      this.schema = undefined;
      throw error;
    });
    return this.schema;
  }

  /**
   * The one LISTEN connection of this store, (re)opened when a watch needs it. When it drops, it
   * is opened again by the next watch's poll; watches meanwhile read on their poll interval, and
   * every watch reads once more when it is back, so a notification missed meanwhile delays a
   * change by at most `watchPollMs`.
   */
  private async listen(): Promise<void> {
    if (this.listener || this.closed) return;
    this.listening ??= (async () => {
      const client = new pg.Client({ connectionString: this.url, connectionTimeoutMillis: connectTimeoutMs, keepAlive: true });
      const drop = (error?: Error) => {
        if (error) this.lastError = error.message;
        if (this.listener !== client) return;
        this.listener = undefined;
        client.end().catch(() => undefined);
        // Every watch reads again and reopens the listener (or ends UNAVAILABLE if it cannot).
        if (!this.closed) for (const waiters of this.waiting.values()) for (const wake of waiters) wake();
      };
      client.on("error", drop);
      client.on("end", () => drop());
      client.on("notification", (notification) => {
        for (const wake of this.waiting.get(notification.payload ?? "") ?? []) wake();
      });
      try {
        await client.connect();
        await client.query(`LISTEN ${changesChannel}`);
      } catch (error) {
        this.lastError = (error as Error).message;
        client.end().catch(() => undefined);
        throw this.failure("listening for changes", error);
      }
      if (this.closed) {
        drop();
        return;
      }
      this.listener = client;
      for (const waiters of this.waiting.values()) for (const wake of waiters) wake();
    })().finally(() => (this.listening = undefined));
    return this.listening;
  }

  private async query<Row extends pg.QueryResultRow>(what: string, text: string, values: unknown[], name?: string): Promise<pg.QueryResult<Row>> {
    try {
      await this.ready();
      return await this.pool.query<Row>({ text, values, name });
    } catch (error) {
      throw this.failure(what, error);
    }
  }

  /**
   * Reads the state and, for a non-empty key, the idempotency record, in one statement: nothing
   * of the state when the stored version is the cached one, the new rows of each segment that only
   * grew since, and whole only the segments rewritten since (or everything, without a usable copy).
   */
  private async read(conversationId: string, idempotencyKey: string): Promise<Loaded> {
    const id = idBytes(conversationId);
    const cached = this.cache.get(conversationId);
    const layout = cached && this.layouts.get(cached);
    const { rows } = await this.query<LoadRow>(
      "loading a conversation",
      "SELECT * FROM contextd_load($1, $2, $3, $4, $5, $6, $7, $8)",
      [
        id,
        Buffer.from(idempotencyKey, "utf8"),
        this.now(),
        layout ? cached!.version : -1n,
        layout?.created ?? null,
        layout?.restAt ?? null,
        layout ? layout.segments.map((segment) => segment.at) : [0, 0, 0, 0],
        layout ? layout.segments.map((segment) => segment.length) : [0, 0, 0, 0],
      ],
      "contextd_load",
    );
    const header = rows[0]!;
    const record = header.fingerprint !== null && header.recorded !== null ? { fingerprint: header.fingerprint, version: BigInt(header.recorded) } : undefined;
    const version = BigInt(header.version!);
    if (version === 0n) {
      this.cache.delete(conversationId);
      return { state: emptyConversationState(conversationId), record };
    }
    if (header.current) {
      this.cache.touch(conversationId);
      return { state: cached!, record };
    }
    return { state: this.assemble(conversationId, version, rows, layout ? cached : undefined), record };
  }

  /** The state `contextd_load`'s rows describe, on top of `cached` for what they left out. DATA_LOSS for what does not decode or does not add up. */
  private assemble(conversationId: string, version: bigint, rows: LoadRow[], cached: ConversationState | undefined): ConversationState {
    const header = rows[0]!;
    const cachedLayout = cached && this.layouts.get(cached);
    let rest: ConversationState;
    let restBytes: number;
    if (header.message !== null) {
      try {
        rest = fromBinary(ConversationStateSchema, header.message);
      } catch (error) {
        throw corruptConversation(conversationId, `the header row's rest does not decode: ${(error as Error).message}`);
      }
      if (rest.conversationId !== conversationId) throw corruptConversation(conversationId, `the header row holds the rest of "${rest.conversationId}"`);
      restBytes = header.message.length;
    } else {
      if (!cached || !cachedLayout) throw new ConnectError(`postgres store: the load left out the rest of "${conversationId}" without a cached copy`, Code.Internal);
      rest = cached;
      restBytes = cachedLayout.restBytes;
    }
    const received: Buffer[][] = [[], [], [], []];
    for (const row of rows.slice(1)) received[row.segment!]!.push(row.message!);
    const segments: SegmentLayout[] = [];
    const lists: Message[][] = [];
    storedSegments.forEach((segment, index) => {
      const from = header.segment_from![index]!;
      const length = header.segment_length![index]!;
      const items = received[index]!;
      if (from > 0 && (!cached || !cachedLayout || cached[segment].length !== from)) {
        throw new ConnectError(`postgres store: the load sent ${segment} of "${conversationId}" from ${from} without a cached copy that long`, Code.Internal);
      }
      if (from + items.length !== length) {
        throw corruptConversation(conversationId, `the ${segment} segment has ${from + items.length} message rows but the header row says ${length}`);
      }
      let bytes = from > 0 ? cachedLayout!.segments[index]!.bytes : 0;
      let running: RunningFacts | undefined;
      const decoded = items.map((item, position) => {
        bytes += item.length;
        try {
          const entry = this.codec.storedTokenCounts.decodeEntryWithFacts(item);
          running = entry.running;
          return entry.message;
        } catch (error) {
          throw corruptConversation(conversationId, `message ${from + position} of the ${segment} segment does not decode: ${(error as Error).message}`);
        }
      });
      const unchanged = cached !== undefined && decoded.length === 0 && cached[segment].length === from;
      const list = unchanged ? cached[segment] : from === 0 ? decoded : cached![segment].concat(decoded);
      if (from > 0 && list !== cached![segment]) {
        this.lineage.appended(cached![segment], list);
        trustCaughtUpSegment(segment, cached![segment], list, this.strictToolRounds);
      }
      // What the next commit's history facts continue from (history-running-facts.ts).
      if (segment === "history" && decoded.length > 0 && running?.epoch === BigInt(header.segment_at![index]!)) this.codec.storedTokenCounts.rememberRunning(list, running);
      lists.push(list);
      segments.push({ at: header.segment_at![index]!, length, bytes });
    });
    const [system, history, memory, tools] = lists as [Message[], Message[], Message[], Message[]];
    const state: ConversationState = { ...rest, conversationId, version, system, history, memory, tools };
    const stored: StoredLayout = { created: header.created!, restAt: header.rest_at!, restBytes, segments };
    this.layouts.set(state, stored);
    this.cache.remember(state, encodedSize(stored));
    return state;
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
    const id = idBytes(conversationId);
    requireStorableKey("idempotency_key", idempotencyKey, stringLimits.idempotencyKey);
    const key = Buffer.from(idempotencyKey, "utf8");
    const fingerprint = idempotencyKey === "" ? "" : (requestFingerprint ?? deltasFingerprint(deltas));
    // As in the Redis store: the first attempt may start from the cached state without reading;
    // the commit function compares its version and segment lengths with the stored ones.
    // A copy others wrote after is read first instead (see `ContendedCopies`).
    let trustCache = true;
    let othersWrote = false;
    for (let attempt = 1; ; attempt++) {
      const cached = trustCache ? this.cache.get(conversationId) : undefined;
      trustCache = false;
      let base: ConversationState;
      const fromCache = cached !== undefined && this.contended.trusted(cached) && (expectedVersion === undefined || expectedVersion === cached.version);
      if (fromCache) {
        base = cached;
      } else {
        const before = this.cache.get(conversationId);
        const loaded = await this.read(conversationId, idempotencyKey);
        if (before !== undefined && loaded.state !== before) othersWrote = true;
        if (loaded.record) return replayed(conversationId, idempotencyKey, fingerprint, loaded.record, loaded.state);
        base = loaded.state;
        if (expectedVersion !== undefined && expectedVersion !== base.version) {
          throw versionConflict(conversationId, expectedVersion, base.version);
        }
      }
      let plan: ReturnType<typeof planCommit>;
      try {
        plan = planCommit(base, deltas, {
          deltaContext: messageIds ? presetMessageIds(messageIds, this.deltaContext) : this.deltaContext,
          lineage: this.lineage,
          idIndex: () => this.cache.idIndex(base),
          idempotencyKey,
          committedAtUnixMs: BigInt(this.now()),
          cleared,
        });
      } catch (error) {
        if (!fromCache) throw error;
        attempt--;
        continue;
      }
      const write = this.storedWrite(base, plan.state);
      // Alone, the commit notifies in its own transaction (no second statement); with others in
      // flight, after them, together (a notifying transaction serializes commits' WAL flushes).
      const notifyInTransaction = this.commitsInFlight === 0;
      this.commitsInFlight++;
      const committing = this.query<CommitRow>(
        "committing",
        "SELECT * FROM contextd_commit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)",
        [
          id,
          base.version,
          bufferOf(toBinary(ChangeSchema, plan.change)),
          key,
          fingerprint,
          this.now(),
          this.idempotencyTtlMs,
          this.maxChanges,
          notifyInTransaction ? changesChannel : "",
          write.layout.created,
          write.rest,
          write.baseLengths,
          write.modes,
          write.keeps,
          write.counts,
          write.blob,
          write.starts,
          write.lengths,
        ],
        "contextd_commit",
      );
      const { rows } = await committing.finally(() => this.commitsInFlight--);
      const reply = rows[0]!;
      if (reply.outcome === "ok") {
        this.notifyCommitted(id, notifyInTransaction);
        this.layouts.set(plan.state, write.layout);
        this.cache.remember(plan.state, encodedSize(write.layout));
        if (othersWrote) this.contended.add(plan.state);
        return { version: plan.state.version, state: plan.state, replayed: false };
      }
      const current = BigInt(reply.version);
      if (reply.outcome === "replay") {
        const record = { fingerprint: reply.fingerprint!, version: BigInt(reply.recorded!) };
        if (record.fingerprint !== fingerprint) throw idempotencyKeyReused(conversationId, idempotencyKey);
        const cachedNow = this.cache.get(conversationId);
        const state = current !== record.version ? undefined : cachedNow?.version === current ? cachedNow : (await this.read(conversationId, "")).state;
        return replayed(conversationId, idempotencyKey, fingerprint, record, state);
      }
      // "stale": the stored segments are not those of the cached state at its version (written
      // behind this process's back): forget the copy and read the stored state whole.
      if (reply.outcome === "stale") this.cache.delete(conversationId);
      else if (expectedVersion !== undefined) throw versionConflict(conversationId, expectedVersion, current);
      othersWrote = true;
      if (attempt >= this.maxCommitAttempts) {
        throw new ConnectError(
          `conversation "${conversationId}": gave up after ${attempt} attempts, other writers kept committing (current version ${current})`,
          Code.Aborted,
        );
      }
    }
  }

  /**
   * What `contextd_commit` writes for `next`, computed from `base` exactly as the Redis store
   * computes its list edits (`segmentEdit`): per segment nothing, the appended rows, or the rows
   * beside the longer of the kept head and the kept tail; `rest` only when it changed.
   */
  private storedWrite(base: ConversationState, next: ConversationState) {
    const baseLayout = this.layouts.get(base);
    const first = base.version === 0n || baseLayout === undefined;
    const version = String(next.version);
    const modes: string[] = [];
    const keeps: number[] = [];
    const counts: number[] = [];
    const encodings: Buffer[] = [];
    const segments: SegmentLayout[] = [];
    storedSegments.forEach((segment, index) => {
      const before = base[segment];
      const after = next[segment];
      const was = baseLayout?.segments[index] ?? { at: version, length: 0, bytes: 0 };
      const edit = segmentEdit(before, after, this.lineage);
      if (edit === undefined) {
        if (after !== before) this.codec.storedTokenCounts.rememberRunning(after, this.codec.storedTokenCounts.runningOf(before));
        modes.push("=");
        keeps.push(before.length);
        counts.push(0);
        segments.push(first ? { ...was, at: version } : was);
        return;
      }
      const appended = edit.keepPrefix && edit.keep === before.length;
      // The history's rows carry what a reader of its tail needs of the head (history-running-facts.ts).
      const running = segment === "history" ? runningFactsOfWrite(this.codec.storedTokenCounts, before, after, edit, BigInt(appended && !first ? was.at : version)) : undefined;
      const added = edit.messages.map((message, position) => bufferOf(this.codec.encodeStoredEntry(message, running?.[position])));
      const addedBytes = added.reduce((sum, encoding) => sum + encoding.length, 0);
      encodings.push(...added);
      modes.push(edit.keepPrefix ? "p" : "s");
      keeps.push(edit.keep);
      counts.push(added.length);
      const kept = edit.keep === before.length ? was.bytes : Math.round((was.bytes * edit.keep) / Math.max(1, before.length));
      segments.push({ at: appended && !first ? was.at : version, length: after.length, bytes: kept + addedBytes });
    });
    const starts: number[] = [];
    const lengths: number[] = [];
    let offset = 1;
    for (const encoding of encodings) {
      starts.push(offset);
      lengths.push(encoding.length);
      offset += encoding.length;
    }
    const restChanged = first || restDiffers(base, next);
    const rest = restChanged ? bufferOf(this.codec.encodeStateRest(next)) : null;
    const created = baseLayout?.created ?? randomUUID();
    const layout: StoredLayout = {
      created,
      restAt: restChanged ? version : baseLayout!.restAt,
      restBytes: rest ? rest.length : baseLayout!.restBytes,
      segments,
    };
    return {
      rest,
      baseLengths: storedSegments.map((segment) => base[segment].length),
      modes,
      keeps,
      counts,
      blob: Buffer.concat(encodings),
      starts,
      lengths,
      layout,
    };
  }

  /** RESOURCE_EXHAUSTED for a full disk or memory, UNAVAILABLE for a connection that failed, INTERNAL for the rest. */
  private failure(what: string, error: unknown): ConnectError {
    if (error instanceof ConnectError) return error;
    const detail = error instanceof Error ? error.message : String(error);
    if (error instanceof pg.DatabaseError && error.code !== undefined) {
      const sqlState = error.code;
      if (sqlState === "53100" || sqlState === "53200") {
        return new ConnectError(`postgres store is full while ${what} (${sqlState}: ${detail}); free space or memory, then retry`, Code.ResourceExhausted);
      }
      if (!isConnectionFailure(sqlState)) {
        return new ConnectError(`postgres store failed while ${what} (${sqlState}): ${detail}`, Code.Internal);
      }
    }
    const cause = this.lastError !== "" && this.lastError !== detail ? ` (last connection error: ${this.lastError})` : "";
    return new ConnectError(`postgres store unavailable while ${what} at ${redactUrl(this.url)}: ${detail}${cause}`, Code.Unavailable);
  }
}

/** SQLSTATEs answered UNAVAILABLE: connection exceptions, shutdowns, too many connections, a read-only transaction, a cancelled statement. */
function isConnectionFailure(sqlState: string | undefined): boolean {
  return sqlState !== undefined && /^(08|57P|53300|25006|57014)/.test(sqlState);
}

/** The id's UTF-8, refusing lone surrogates (both other stores refuse them alike). */
function idBytes(conversationId: string): Buffer {
  requireStorableKey("conversation_id", conversationId, stringLimits.id);
  return Buffer.from(conversationId, "utf8");
}

function replayed(conversationId: string, key: string, fingerprint: string, record: IdempotencyRecord, current: ConversationState | undefined): CommitOutcome {
  if (record.fingerprint !== fingerprint) throw idempotencyKeyReused(conversationId, key);
  return { version: record.version, state: current?.version === record.version ? current : undefined, replayed: true };
}

function encodedSize(layout: StoredLayout): number {
  return layout.segments.reduce((sum, segment) => sum + segment.bytes, layout.restBytes);
}

function bufferOf(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** A changes row: protobuf binary `Change` of this conversation and this version, or DATA_LOSS. */
function decodeChange(conversationId: string, version: string, bytes: Buffer): Change {
  let change: Change;
  try {
    change = fromBinary(ChangeSchema, bytes);
  } catch (error) {
    throw corruptConversation(conversationId, `change ${version} does not decode: ${(error as Error).message}`);
  }
  if (String(change.version) !== version || change.conversationId !== conversationId) {
    throw corruptConversation(conversationId, `change row ${version} holds version ${change.version} of "${change.conversationId}"`);
  }
  return change;
}

/** The URL without a password, for error messages. */
function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString();
  } catch {
    return "(unparsable postgres url)";
  }
}
