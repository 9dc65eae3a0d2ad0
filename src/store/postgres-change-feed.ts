import { fromBinary } from "@bufbuild/protobuf";
import { createHash } from "node:crypto";
import pg from "pg";
import { ChangeSchema, type Change } from "#gen/contextd/v1/conversation_service_pb";
import { connectTimeoutMs, type PostgresConnection } from "./postgres-connection.js";
import { changesChannel, listenersLockKey } from "./postgres-schema.js";
import { changesNotRetained, corruptConversation } from "./store-errors.js";
import type { StoredValues } from "./at-rest-encryption.js";

/**
 * Watch on the Postgres store: the changes table read from a version, woken by LISTEN/NOTIFY on
 * one connection of the store's own and by this process's commits, polled besides for what a
 * reconnecting listener missed. Apart from the store because it shares nothing with a commit but
 * the connection and the notification a commit sends.
 *
 * Commits notify only while some sidecar listens (migration 12): the LISTEN connection holds the
 * advisory lock `listenersLockKey` shared, and a commit that can take it exclusively sends no
 * notification. Nothing is missed by a listener that joins later: a commit that sent none held
 * that lock to its end, so it committed before the listener's lock was granted, and every watch
 * reads the changes table after that.
 */

/** Rows of changes one Watch query reads at most. */
const watchPageRows = 500;

export class PostgresChangeFeed {
  /** Watches waiting for a change, by md5 of their conversation id (the notification's payload). */
  private readonly waiting = new Map<string, Set<() => void>>();
  /** Notification payloads of the commits that finished in this event-loop iteration (see `notifyCommitted`). */
  private readonly pendingNotifications = new Set<string>();
  /** The conversations this process follows for commit notices (followed-conversations.ts), by the payload their notifications carry. */
  private readonly followedPayloads = new Map<string, () => void>();
  /**
   * The backend process ids of this store's pool: notifications they sent are this process's own
   * commits, which a followed conversation's copy is current with already.
   */
  private readonly ownBackends = new Set<number>();
  private listener: pg.Client | undefined;
  private listening: Promise<void> | undefined;
  private closed = false;

  constructor(
    private readonly connection: PostgresConnection,
    /** How often a Watch reads its changes again without a notification (covers notifications missed while the listener reconnects). */
    private readonly pollMs: number,
    /** The conversation's version (for a resume whose changes are all trimmed). */
    private readonly currentVersion: (conversationId: string) => Promise<bigint>,
    /** How `contextd_commit`'s change rows were kept (sealed under encryption at rest). */
    private readonly values: StoredValues,
  ) {
    connection.pool.on("connect", (client) => this.ownBackends.add(backendOf(client)));
    connection.pool.on("remove", (client) => this.ownBackends.delete(backendOf(client)));
  }

  /** Calls `onNotice` on each commit of the conversation by another process, from the LISTEN connection (opened now if it is not). */
  follow(id: Buffer, onNotice: () => void): void {
    this.followedPayloads.set(createHash("md5").update(id).digest("hex"), onNotice);
    this.keepListening();
  }

  unfollow(id: Buffer): void {
    this.followedPayloads.delete(createHash("md5").update(id).digest("hex"));
  }

  /**
   * Opens the LISTEN connection again if it dropped while conversations are followed (a commit of
   * a followed conversation calls it): notices lost meanwhile cost commits their read, nothing else.
   */
  keepListening(): void {
    if (this.listener === undefined && this.followedPayloads.size > 0) this.listen().catch(() => undefined);
  }

  async *watch(conversationId: string, id: Buffer, fromVersion: bigint, signal: AbortSignal): AsyncIterable<Change> {
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
        const { rows } = await this.connection.query<{ version: string; change: Buffer }>(
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
          const change = decodeChange(this.values, conversationId, row.version, row.change);
          yield change;
          last = change.version;
        }
        if (rows.length === watchPageRows || notified || signal.aborted) continue;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(finish, this.pollMs);
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
   * Tells every sidecar's watches that the conversation changed, unless the commit's transaction
   * did: one NOTIFY statement for all the commits that finished in this event-loop iteration, sent
   * after their transactions committed (see postgres-schema.ts for why not inside them). Not awaited: a notification that fails (or a
   * sidecar that dies first) delays the change to the watches' next poll, nothing else.
   */
  notifyCommitted(id: Buffer, notified: boolean): void {
    const payload = createHash("md5").update(id).digest("hex");
    // Watches in this process need no round trip through Postgres.
    for (const wake of this.waiting.get(payload) ?? []) wake();
    if (notified) return;
    if (this.pendingNotifications.size === 0) {
      setImmediate(() => {
        const payloads = [...this.pendingNotifications];
        this.pendingNotifications.clear();
        // After their transactions committed: with no sidecar listening, a later listener reads them.
        this.connection.pool
          .query("SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload WHERE NOT pg_try_advisory_xact_lock($3)", [changesChannel, payloads, listenersLockKey])
          .catch((error: Error) => (this.connection.lastError = error.message));
      });
    }
    this.pendingNotifications.add(payload);
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
      const client = new pg.Client({ connectionString: this.connection.url, connectionTimeoutMillis: connectTimeoutMs, keepAlive: true });
      const drop = (error?: Error) => {
        if (error) this.connection.lastError = error.message;
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
        if (!this.ownBackends.has(notification.processId)) this.followedPayloads.get(notification.payload ?? "")?.();
      });
      try {
        await client.connect();
        // The lock first: it waits for the commits that found no one listening (they hold it
        // exclusively to their end), so the reads that follow see them; a commit that notifies
        // before LISTEN takes effect has committed before those reads too.
        await client.query(`SELECT pg_advisory_lock_shared(${listenersLockKey})`);
        await client.query(`LISTEN ${changesChannel}`);
      } catch (error) {
        this.connection.lastError = (error as Error).message;
        client.end().catch(() => undefined);
        throw this.connection.failure("listening for changes", error);
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

  /** Ends the listener; pending watches end. */
  async close(): Promise<void> {
    this.closed = true;
    for (const waiters of this.waiting.values()) for (const wake of waiters) wake();
    const listener = this.listener;
    this.listener = undefined;
    await listener?.end();
  }
}

/** The backend process id of a pool client (pg sets it from the server's BackendKeyData when it connects). */
function backendOf(client: pg.PoolClient): number {
  return (client as unknown as { processID: number }).processID;
}

/** A changes row: protobuf binary `Change` of this conversation and this version, or DATA_LOSS. */
function decodeChange(values: StoredValues, conversationId: string, version: string, stored: Buffer): Change {
  const bytes = values.open(conversationId, "change", stored, () => `change row ${version}`);
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

