import { fromBinary } from "@bufbuild/protobuf";
import { Cluster, Redis } from "ioredis";
import { ChangeSchema, type Change } from "#gen/contextd/v1/conversation_service_pb";
import { clusterRedirection } from "./redis-cluster-redirection.js";
import { clusterNode, isWrongType, redisConnectionOptions, redisReplyError, whenReady, type RedisConnection } from "./redis-connection.js";
import type { ConversationKeys } from "./redis-scripts.js";
import type { StoredValues } from "./at-rest-encryption.js";
import { changesNotRetained, corruptConversation } from "./store-errors.js";

/**
 * Watch on the Redis store: the conversation's change stream (one entry per commit, written by
 * the commit script) read from a version, then followed with blocking reads on a connection of
 * its own, across cluster failovers and reshardings. Apart from the store because it shares
 * nothing with a commit but the connection and the keys.
 */
/** Changes one read of a watch's backlog asks for (`XRANGE … COUNT`). */
const backlogPageChanges = 20;

export class RedisChangeFeed {
  private readonly connections = new Set<Redis>();

  constructor(
    private readonly connection: RedisConnection,
    /** How long one blocking XREAD waits before looping. */
    private readonly blockMs: number,
    /** The conversation's version (for a resume whose changes are all trimmed). */
    private readonly currentVersion: (conversationId: string) => Promise<bigint>,
    /** How the commit script's change records were kept (sealed under encryption at rest). */
    private readonly values: StoredValues,
  ) {}

  async *watch(conversationId: string, keys: ConversationKeys, fromVersion: bigint, signal: AbortSignal): AsyncIterable<Change> {
    const { redis } = this.connection;
    let last = fromVersion;
    // The backlog in pages: read whole, the 105 changes of a 100,000-message conversation built in
    // 1,000-message commits (~22 MB, what a history read rebuilds from) outlasted the command
    // timeout on a loaded cluster.
    const page = (after: bigint) =>
      this.connection.call("reading changes", () => redis.xrangeBuffer(keys.changes, `${after + 1n}-0`, "+", "COUNT", backlogPageChanges), conversationId);
    let backlog = await page(fromVersion);
    if (fromVersion > 0n) {
      const oldest = backlog.length > 0 ? decodeChange(this.values, conversationId, backlog[0]!).version : undefined;
      const current = oldest === undefined ? await this.currentVersion(conversationId) : oldest - 1n;
      if (current > fromVersion && (oldest === undefined || oldest > fromVersion + 1n)) {
        throw changesNotRetained(conversationId, fromVersion, oldest ?? current + 1n);
      }
    }
    for (;;) {
      for (const entry of backlog) {
        const change = decodeChange(this.values, conversationId, entry);
        yield change;
        last = change.version;
      }
      if (backlog.length < backlogPageChanges || signal.aborted) break;
      backlog = await page(last);
    }
    // A blocking XREAD holds its connection, so each watch gets its own: to the one Redis, or on a
    // cluster to the master of the conversation's slot (a blocking read must go to that node).
    const address = this.connection.masterAddressOf(keys.changes);
    if (redis instanceof Cluster && address === undefined) {
      throw this.connection.unavailable("watching changes", new Error(`the cluster client knows no master for the slot of ${keys.changes} yet`));
    }
    let connection = this.open(address);
    const stop = () => connection.disconnect();
    signal.addEventListener("abort", stop, { once: true });
    try {
      let redirections = 0;
      while (!signal.aborted) {
        if (!(await whenReady(connection, redisConnectionOptions.connectTimeout!)) && !signal.aborted) {
          throw this.connection.unavailable("watching changes", new Error(`no connection within ${redisConnectionOptions.connectTimeout} ms`));
        }
        let reply: [Buffer, [Buffer, Buffer[]][]][] | null;
        try {
          reply = await connection.xreadBuffer("COUNT", 100, "BLOCK", this.blockMs, "STREAMS", keys.changes, `${last}-0`);
          redirections = 0;
        } catch (error) {
          if (signal.aborted) return;
          if (isWrongType(error)) throw corruptConversation(conversationId, `the change stream ${keys.changes} is not a stream (${(error as Error).message})`);
          // The slot moved (a failover promoted a replica, or a resharding): read from its new
          // master. A master turned replica first unblocks its blocked readers (UNBLOCKED); the
          // next read there answers MOVED, naming the new master.
          const redirection = clusterRedirection(error);
          const moved = redirection?.kind === "moved" ? redirection.address : undefined;
          if (redis instanceof Cluster && (moved !== undefined || (redisReplyError(error) ?? "").startsWith("UNBLOCKED")) && redirections++ < 16) {
            const target = moved ?? `${connection.options.host}:${connection.options.port}`;
            connection.disconnect();
            this.connections.delete(connection);
            redis.refreshSlotsCache();
            connection = this.open(target);
            continue;
          }
          throw this.connection.failure("watching changes", error);
        }
        for (const [, entries] of reply ?? []) {
          for (const entry of entries) {
            const change = decodeChange(this.values, conversationId, entry);
            if (change.version <= last) continue;
            yield change;
            last = change.version;
          }
        }
      }
    } finally {
      signal.removeEventListener("abort", stop);
      this.connections.delete(connection);
      connection.disconnect();
    }
  }

  /** Ends every watch's connection (the store is closing). */
  close(): void {
    for (const connection of this.connections) connection.disconnect();
  }

  /** A new connection for one watch's blocking reads: a duplicate of the one Redis's, or to `address` ("host:port") of a cluster. */
  private open(address: string | undefined): Redis {
    const { redis } = this.connection;
    const commandTimeout = this.blockMs + 2_000;
    const connection =
      redis instanceof Cluster
        ? new Redis({ ...redisConnectionOptions, ...redis.options.redisOptions, ...clusterNode(address ?? "unknown:0"), commandTimeout })
        : redis.duplicate({ commandTimeout });
    connection.on("error", (error: Error) => (this.connection.lastError = error.message));
    this.connections.add(connection);
    return connection;
  }
}

/** A stream entry as the commit script writes it: id `<version>-0`, the single field pair ("change", bytes). */
function decodeChange(values: StoredValues, conversationId: string, [id, fields]: [Buffer | string, Buffer[]]): Change {
  const malformed = (detail: string) => corruptConversation(conversationId, `change stream entry ${String(id)} ${detail}`);
  if (fields.length !== 2 || String(fields[0]) !== "change") throw malformed(`has fields ${fields.filter((_, index) => index % 2 === 0).map(String).join(", ") || "(none)"}, not one "change"`);
  const bytes = values.open(conversationId, "change", fields[1]!, () => `change stream entry ${String(id)}`);
  let change: Change;
  try {
    change = fromBinary(ChangeSchema, bytes);
  } catch (error) {
    throw malformed(`does not decode: ${(error as Error).message}`);
  }
  if (`${change.version}-0` !== String(id) || change.conversationId !== conversationId) {
    throw malformed(`holds version ${change.version} of "${change.conversationId}"`);
  }
  return change;
}
