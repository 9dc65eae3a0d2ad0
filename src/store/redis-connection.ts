import { Code, ConnectError } from "@connectrpc/connect";
import calculateSlot from "cluster-key-slot";
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from "ioredis";
import { describeClusterSeeds, parseClusterSeeds } from "./redis-cluster-seeds.js";
import { claimHomeScript, commitScript, deleteScript, indexedIdsScript, loadScript, reportUsageScript, sweepIdempotencyScript, unhomeScript, windowScript, writeProbeScript } from "./redis-scripts.js";
import { commitTailScript } from "./redis-tail-script.js";
import { forkScript, forkScriptKeys } from "./redis-fork-script.js";
import { corruptConversation, redactUrl, storeOutOfMemory } from "./store-errors.js";

/**
 * The Redis store's connection: one Redis or a cluster's client, the scripts defined on it, and
 * how its failures become gRPC errors. Why it exists apart from the store: the store's commits,
 * its watches and its replica acknowledgements all call through it alike.
 */

/**
 * A Redis Cluster to connect to: seed nodes as "host:port" or redis[s]:// URLs carrying the
 * cluster's credentials (redis-cluster-seeds.ts); the client finds the others and the slots.
 */
export interface RedisClusterNodes {
  clusterNodes: readonly string[];
}

/** `--redis-command-timeout-ms`'s default. */
export const defaultCommandTimeoutMs = 2_000;

/**
 * Connection settings that make a Redis outage an immediate UNAVAILABLE instead of a hang: no
 * offline queue, one retry per command, bounded connect and command times. ioredis keeps
 * reconnecting in the background (backoff capped at 1 s), so the store recovers by itself.
 */
export const redisConnectionOptions: RedisOptions = {
  // Commands are batched per event-loop iteration by `RedisConnection.call` (corking the
  // socket), not by ioredis's auto-pipelining, whose pipeline object per batch cost ~20% of the
  // store's CPU per commit at one commit at a time.
  enableAutoPipelining: false,
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
  connectTimeout: 2_000,
  commandTimeout: defaultCommandTimeoutMs,
  retryStrategy: (attempt) => Math.min(50 * attempt, 1_000),
};

/**
 * The same for a Redis Cluster, plus what the cluster client decides: a command refused with
 * MOVED, ASK, TRYAGAIN or CLUSTERDOWN (which Redis did not run) is sent again to the node the
 * cluster names, after refreshing the slot map (a pipeline only when all its replies are that
 * error: the commit pipeline with `WAIT` follows them itself, see `behindWait`); a command whose connection closed under it is
 * NOT (`retryDelayOnFailover: 0`): a commit script may have run before its node died, and sending
 * it again could apply a batch twice. It fails as UNAVAILABLE instead; the caller retries.
 */
export const redisClusterOptions: ClusterOptions = {
  enableAutoPipelining: false,
  enableOfflineQueue: false,
  retryDelayOnFailover: 0,
  retryDelayOnClusterDown: 100,
  retryDelayOnTryAgain: 100,
  maxRedirections: 16,
  clusterRetryStrategy: (attempt) => Math.min(50 * attempt, 1_000),
  redisOptions: {
    maxRetriesPerRequest: 1,
    connectTimeout: redisConnectionOptions.connectTimeout!,
    commandTimeout: redisConnectionOptions.commandTimeout!,
  },
};

/** How many of the commit script's arguments are keys. */
export const commitScriptKeys = 12;

/** The load script's reply (see `loadScript`). */
export type LoadReply = (Buffer | null | number | Buffer[])[];

export interface Scripts {
  contextdLoadBuffer(...args: (string | Buffer)[]): Promise<LoadReply>;
  contextdWindowBuffer(...args: (string | Buffer)[]): Promise<LoadReply>;
  contextdCommitTailBuffer(...args: (string | Buffer)[]): Promise<(Buffer | null | number | (Buffer | null)[])[]>;
  contextdCommitBuffer(...args: (string | Buffer | number | (string | Buffer)[])[]): Promise<(Buffer | null)[]>;
  contextdWriteProbe(): Promise<unknown>;
  contextdDelete(...args: string[]): Promise<string[]>;
  contextdSweepIdempotency(...args: string[]): Promise<string[]>;
  contextdReportUsage(...args: (string | number)[]): Promise<string[]>;
  contextdFork(...args: (string | Buffer | (string | Buffer)[])[]): Promise<string[]>;
  contextdIndexedIds(...args: string[]): Promise<[string, string | null, string, string[], string[]] | [string, string]>;
  contextdClaimHome(...args: string[]): Promise<string[]>;
  contextdUnhome(...args: string[]): Promise<number>;
}
/** One Redis, or a cluster's client (which routes each command to the master of its keys' slot). */
export type ScriptedRedis = (Redis | Cluster) & Scripts;

export class RedisConnection {
  readonly redis: ScriptedRedis;
  /** Where the store connects, for messages: a URL without its password, or the cluster's seed nodes. */
  readonly where: string;
  /** The last connection error any of the store's connections reported, for messages. */
  lastError = "";
  /** Whether sockets are corked for this event-loop iteration (see `call`). */
  private corked = false;

  /**
   * `commandTimeoutMs`: how long a command may go unanswered before it fails as UNAVAILABLE
   * (`defaultCommandTimeoutMs` when not given). A commit waiting for replicas
   * needs its `WAIT` timeout on top (`RedisConversationStore`).
   */
  constructor(target: string | RedisClusterNodes, tlsCa: string | undefined, commandTimeoutMs = defaultCommandTimeoutMs) {
    if (typeof target === "string") {
      this.where = redactUrl(target, "redis");
      if (tlsCa !== undefined && !target.startsWith("rediss://")) throw new Error(`a TLS CA was given for ${this.where}, which is not a rediss:// URL`);
      const tls = tlsCa !== undefined ? { tls: { ca: tlsCa } } : {};
      this.redis = new Redis(target, { ...redisConnectionOptions, commandTimeout: commandTimeoutMs, ...tls }) as ScriptedRedis;
    } else {
      const seeds = parseClusterSeeds(target.clusterNodes);
      this.where = `redis cluster ${describeClusterSeeds(target.clusterNodes)}`;
      if (tlsCa !== undefined && !seeds.tls) throw new Error(`a TLS CA was given for ${this.where}, whose seeds are not rediss:// URLs`);
      // Every node, the discovered ones and the Watch connections too, is reached with these.
      const redisOptions = {
        ...redisClusterOptions.redisOptions,
        commandTimeout: commandTimeoutMs,
        ...(seeds.username !== undefined ? { username: seeds.username } : {}),
        ...(seeds.password !== undefined ? { password: seeds.password } : {}),
        ...(seeds.tls ? { tls: tlsCa !== undefined ? { ca: tlsCa } : {} } : {}),
      };
      this.redis = new Cluster(seeds.nodes, { ...redisClusterOptions, redisOptions }) as ScriptedRedis;
    }
    // Without a listener ioredis reports connection errors as unhandled; they surface as
    // UNAVAILABLE on the calls that need the connection instead.
    this.redis.on("error", (error: Error) => (this.lastError = error.message));
    this.redis.defineCommand("contextdLoad", { numberOfKeys: 8, lua: loadScript, readOnly: true });
    this.redis.defineCommand("contextdWindow", { numberOfKeys: 7, lua: windowScript, readOnly: true });
    this.redis.defineCommand("contextdCommitTail", { numberOfKeys: 8, lua: commitTailScript, readOnly: true });
    this.redis.defineCommand("contextdCommit", { numberOfKeys: commitScriptKeys, lua: commitScript });
    this.redis.defineCommand("contextdWriteProbe", { numberOfKeys: 0, lua: writeProbeScript });
    this.redis.defineCommand("contextdDelete", { numberOfKeys: 11, lua: deleteScript });
    this.redis.defineCommand("contextdSweepIdempotency", { numberOfKeys: 3, lua: sweepIdempotencyScript });
    this.redis.defineCommand("contextdReportUsage", { numberOfKeys: 2, lua: reportUsageScript });
    this.redis.defineCommand("contextdFork", { numberOfKeys: forkScriptKeys, lua: forkScript });
    this.redis.defineCommand("contextdClaimHome", { numberOfKeys: 8, lua: claimHomeScript });
    this.redis.defineCommand("contextdUnhome", { numberOfKeys: 1, lua: unhomeScript });
    this.redis.defineCommand("contextdIndexedIds", { numberOfKeys: 7, lua: indexedIdsScript, readOnly: true });
  }

  /**
   * Runs one or more commands, mapping connection failures to UNAVAILABLE, and a JavaScript
   * engine's RangeError or TypeError (this sidecar's bug, not Redis's: a fork's arguments once
   * overflowed the call stack) to INTERNAL, which clients do not retry. Commands issued in the
   * same event-loop iteration (concurrent commits and loads) leave in one socket write: at
   * concurrency 32 a write per command was a fifth of the sidecar's CPU.
   */
  async call<T>(what: string, run: () => Promise<T>, conversationId?: string): Promise<T> {
    this.batchWritesUntilNextIteration();
    try {
      return await run();
    } catch (error) {
      if (error instanceof ConnectError) throw error;
      if (error instanceof RangeError || error instanceof TypeError) throw new ConnectError(`the sidecar failed while ${what}: ${error.message}`, Code.Internal);
      if (conversationId !== undefined && isWrongType(error)) {
        throw corruptConversation(conversationId, `a key has the wrong type while ${what} (${(error as Error).message})`);
      }
      throw this.failure(what, error);
    }
  }

  /** RESOURCE_EXHAUSTED for a Redis refusing writes at maxmemory, UNAVAILABLE for anything else. */
  failure(what: string, error: unknown): ConnectError {
    const reply = redisReplyError(error);
    if (reply?.startsWith("OOM ")) return storeOutOfMemory(what, reply);
    return this.unavailable(what, error);
  }

  unavailable(what: string, error: unknown): ConnectError {
    const detail = error instanceof Error ? error.message : String(error);
    const cause = this.lastError !== "" && this.lastError !== detail ? ` (last connection error: ${this.lastError})` : "";
    return new ConnectError(`redis store unavailable while ${what} at ${this.where}: ${detail}${cause}`, Code.Unavailable);
  }

  /** The masters to check: the one Redis, or every master of the cluster the client knows. */
  masters(): Redis[] {
    return this.redis instanceof Cluster ? this.redis.nodes("master") : [this.redis];
  }

  /** On a cluster, the address of the master the client maps `key`'s slot to (undefined before it knows the slots). */
  masterAddressOf(key: string): string | undefined {
    return this.redis instanceof Cluster ? this.redis.slots[calculateSlot(key)]?.[0] : undefined;
  }

  /**
   * Corks the connection's socket until the event loop's check phase: what ioredis's
   * auto-pipelining does (it defers with setImmediate too), without its pipeline object per batch.
   */
  private batchWritesUntilNextIteration(): void {
    if (this.corked) return;
    // On a cluster, the socket of every master: commands to one node leave in one write.
    const sockets = this.masters().flatMap((master) => (master.stream === undefined ? [] : [master.stream]));
    if (sockets.length === 0) return;
    this.corked = true;
    for (const socket of sockets) socket.cork();
    setImmediate(() => {
      this.corked = false;
      for (const socket of sockets) socket.uncork();
    });
  }
}

/** Resolves true once `redis` is ready, false after `timeoutMs` (commands fail fast until then). */
export function whenReady(redis: Redis | Cluster, timeoutMs: number): Promise<boolean> {
  if (redis.status === "ready") return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => finish(false), timeoutMs);
    const onReady = () => finish(true);
    const onEnd = () => finish(false);
    const finish = (ready: boolean) => {
      clearTimeout(timer);
      redis.off("ready", onReady);
      redis.off("end", onEnd);
      resolve(ready);
    };
    redis.on("ready", onReady);
    redis.on("end", onEnd);
  });
}

/** The message of an error reply from Redis (ioredis types its ReplyError class as `any`). */
export function redisReplyError(error: unknown): string | undefined {
  return error instanceof Error && error.name === "ReplyError" ? error.message : undefined;
}

export function isWrongType(error: unknown): boolean {
  return redisReplyError(error)?.startsWith("WRONGTYPE") ?? false;
}

/** What the commit script writes as a version: "0" or up to 15 digits without a leading zero (its Lua adds exactly below 2^53). */
export function isVersionText(text: string): boolean {
  return /^(0|[1-9][0-9]{0,14})$/.test(text);
}

/** A stored version, or DATA_LOSS naming the conversation (BigInt of "abc" used to be INTERNAL). */
export function storedVersion(conversationId: string, text: string): bigint {
  if (!isVersionText(text)) throw corruptConversation(conversationId, `the version key holds "${text.slice(0, 40)}", not a version`);
  return BigInt(text);
}

/** "host:port" as ioredis takes a node; a bracketed IPv6 host loses its brackets. */
export function clusterNode(address: string): { host: string; port: number } {
  const colon = address.lastIndexOf(":");
  const port = Number(address.slice(colon + 1));
  if (colon <= 0 || !Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`redis cluster node "${address}" is not host:port`);
  return { host: address.slice(0, colon).replace(/^\[(.*)\]$/, "$1"), port };
}
