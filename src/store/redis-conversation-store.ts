import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { randomUUID } from "node:crypto";
import calculateSlot from "cluster-key-slot";
import { Cluster, Redis, type ChainableCommander, type ClusterOptions, type RedisOptions } from "ioredis";
import {
  ChangeSchema,
  ConversationSummarySchema,
  type Change,
} from "#gen/contextd/v1/conversation_service_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, type ConversationState, type Delta } from "#gen/contextd/v1/state_pb";
import { Codec } from "../codec/codec.js";
import type { DeltaContext } from "../core/deltas/delta-context.js";
import { MessageListLineage } from "../core/model/message-list-lineage.js";
import { clearStateDeltas, deltasFingerprint, emptyConversationState, indexedLookups, planCommit, presetMessageIds } from "./commit-plan.js";
import { ContendedCopies } from "./contended-copies.js";
import { DecodedStateCache, defaultDecodedStateBytes, defaultDecodedStates } from "./decoded-state-cache.js";
import type { CommitOutcome, ConversationPage, ConversationStore } from "./conversation-store.js";
import { defaultIdempotencyTtlMs, defaultMaxChangesPerConversation } from "./memory-conversation-store.js";
import { decodePageToken, encodePageToken } from "./page-token.js";
import { clusterRedirection } from "./redis-cluster-redirection.js";
import { describeClusterSeeds, parseClusterSeeds } from "./redis-cluster-seeds.js";
import { calibrationKeys, commitScript, conversationIndexKey, conversationKeys, loadScript, reportUsageScript, windowScript, writeProbeScript, type ConversationKeys } from "./redis-scripts.js";
import { calibrationWindow, maxCorrection, maxCorrectionStep, minCorrection, type LearntCorrection, type TokenCorrection } from "../core/compile/token-calibration.js";
import { calibrationField, type CalibrationBounds, type CalibrationRecordKey } from "./calibration-store.js";
import { restDiffers, segmentEdit, storedSegments, trustCaughtUpSegment } from "./segment-edits.js";
import { heldWindowFacts, runningFactsOfWrite } from "./history-running-facts.js";
import type { RunningFacts } from "../codec/stored-token-counts.js";
import { checkWindowQuery, windowMoved, windowOf, type SegmentWindow, type WindowQuery } from "./segment-window.js";
import { changesNotRetained, corruptCalibration, corruptConversation, idempotencyKeyReused, requireStorableKey, requireStorableText, storeOutOfMemory, versionConflict } from "./store-errors.js";
import { stringLimits } from "../core/model/string-limits.js";

export interface RedisStoreOptions {
  /** Prefix of every key; lets several deployments share one Redis. Must not hold `{` or `}` (it would take the hash tag). */
  keyPrefix?: string;
  /** Approximate number of changes kept per conversation stream (XADD MAXLEN ~). */
  maxChangesPerConversation?: number;
  idempotencyTtlMs?: number;
  /** Decoded states kept in this process, validated against the stored version on every use. */
  cacheSize?: number;
  /** Approximate heap bytes of the states kept (`--decoded-state-bytes`, see DecodedStateCache). */
  cacheBytes?: number;
  /** How long one blocking XREAD of a Watch waits before looping. */
  watchBlockMs?: number;
  /** Retries of a commit without expected version when another writer got there first. */
  maxCommitAttempts?: number;
  now?: () => number;
  deltaContext?: DeltaContext;
  /** The server's codec: encodes states for storage and is told which are immutable; a private one otherwise. */
  codec?: Codec;
  /**
   * Replicas that must acknowledge a commit (Redis `WAIT`) before it is answered as applied; 0 =
   * none (the default). A commit applied on the master but acknowledged by fewer within
   * `waitTimeoutMs` is answered UNAVAILABLE (see docs/stores.md, "Replica acknowledgement").
   */
  waitReplicas?: number;
  /** How long a commit waits for `waitReplicas` acknowledgements, in milliseconds (default 1,000). */
  waitTimeoutMs?: number;
  /**
   * How long this process trusts that a conversation's listing entry exists before writing it
   * again with its next commit (default 60 s). Bounds how long an entry lost with a failed-over
   * node (or written to a node that lost it) stays missing from listings.
   */
  indexRefreshMs?: number;
  /**
   * PEM certificates of the CAs that signed the Redis servers' certificates, for a rediss:// URL
   * or rediss:// cluster seeds; undefined = the system's CAs. Server names are verified.
   */
  tlsCa?: string;
}

/**
 * A Redis Cluster to connect to: seed nodes as "host:port" or redis[s]:// URLs carrying the
 * cluster's credentials (redis-cluster-seeds.ts); the client finds the others and the slots.
 */
export interface RedisClusterNodes {
  clusterNodes: readonly string[];
}

/**
 * Connection settings that make a Redis outage an immediate UNAVAILABLE instead of a hang: no
 * offline queue, one retry per command, bounded connect and command times. ioredis keeps
 * reconnecting in the background (backoff capped at 1 s), so the store recovers by itself.
 */
export const redisConnectionOptions: RedisOptions = {
  // Commands are batched per event-loop iteration by `RedisConversationStore.call` (corking the
  // socket), not by ioredis's auto-pipelining, whose pipeline object per batch cost ~20% of the
  // store's CPU per commit at one commit at a time.
  enableAutoPipelining: false,
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
  connectTimeout: 2_000,
  commandTimeout: 2_000,
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
const commitScriptKeys = 8;

/** How many conversation ids `indexedConversations` remembers (~100 bytes each). */
const indexedConversationsLimit = 100_000;

interface Scripts {
  contextdLoadBuffer(...args: (string | Buffer)[]): Promise<LoadReply>;
  contextdWindowBuffer(...args: (string | Buffer)[]): Promise<LoadReply>;
  contextdCommitBuffer(...args: (string | Buffer | number | (string | Buffer)[])[]): Promise<(Buffer | null)[]>;
  contextdWriteProbe(): Promise<unknown>;
  contextdReportUsage(...args: (string | number)[]): Promise<string[]>;
}
/** One Redis, or a cluster's client (which routes each command to the master of its keys' slot). */
type ScriptedRedis = (Redis | Cluster) & Scripts;

/** What the commit script records per idempotency key: the commit's response without its state. */
interface IdempotencyRecord {
  fingerprint: string;
  version: bigint;
}

/** The load script's reply (see `loadScript`). */
type LoadReply = (Buffer | null | number | Buffer[])[];

/** One segment list as stored: its last rewrite (`_at`), its length, and its messages' encoded size. */
interface SegmentLayout {
  at: string;
  length: number;
  bytes: number;
}

/**
 * Where a state the process holds stands in Redis (the header's fields), so the load script can
 * send only what that state lacks, and its encoded size for the cache's byte bound.
 */
interface StoredLayout {
  created: string;
  restAt: string;
  restBytes: number;
  /** In `storedSegments` order. */
  segments: SegmentLayout[];
}

/** The commit script's arguments after the fixed ones, their payload size, and the layout they leave. */
interface StoredWrite {
  args: (string | Buffer)[];
  bytes: number;
  layout: StoredLayout;
}

interface Loaded {
  state: ConversationState;
  /** The idempotency record of the key asked for, if one exists. */
  record?: IdempotencyRecord;
}

/**
 * The production store. A commit computes the next state from the state it read, then one Lua
 * script compares the expected version, writes state + version, appends the change to the
 * conversation's stream and records the idempotency key, all atomically. If the version moved in
 * between, the script refuses and nothing is written (ABORTED, or an internal retry when the
 * caller gave no expected version).
 */
export class RedisConversationStore implements ConversationStore {
  private readonly redis: ScriptedRedis;
  private readonly keyPrefix: string;
  private readonly maxChanges: number;
  private readonly idempotencyTtlSeconds: number;
  private readonly watchBlockMs: number;
  private readonly maxCommitAttempts: number;
  private readonly now: () => number;
  private readonly deltaContext: DeltaContext;
  private readonly cache: DecodedStateCache;
  /** Which segment lists were made by appending to which (commits, and loads that catch a cached copy up). */
  readonly lineage = new MessageListLineage();
  /** The stored layout of every state this process read or committed (see `StoredLayout`). */
  private readonly layouts = new WeakMap<ConversationState, StoredLayout>();
  /**
   * Conversations whose entry in the listing index this process wrote and Redis acknowledged.
   * Entries are never removed from the index, so later commits skip the write (a second command
   * per commit was 10-20% of the store's commit CPU). Forgotten when a read finds the conversation at
   * version 0, so an index lost with the rest of Redis's data is written again.
   */
  private readonly indexedConversations = new Map<string, number>();
  private readonly indexRefreshMs: number;
  /** Copies to read before committing from (see `ContendedCopies`). */
  private readonly contended = new ContendedCopies();
  private readonly waitReplicas: number;
  private readonly waitTimeoutMs: number;
  /** Where the store connects, for messages: a URL without its password, or the cluster's seed nodes. */
  private readonly where: string;
  private readonly watchConnections = new Set<Redis>();
  private lastError = "";
  /**
   * Set when Redis refused a commit for memory: the bytes that commit sent. Redis counts a
   * command's own arguments against `maxmemory`, so it can refuse a commit of a long state while
   * small writes (and the write probe) still pass; `ping` fails until the refused size fits again.
   */
  private refusedForMemory: { bytes: number; message: string } | undefined;
  /** Whether sockets are corked for this event-loop iteration (see `call`). */
  private corked = false;
  private readonly codec: Codec;

  constructor(target: string | RedisClusterNodes, options: RedisStoreOptions = {}) {
    this.codec = options.codec ?? new Codec();
    this.keyPrefix = options.keyPrefix ?? "contextd";
    if (/[{}]/.test(this.keyPrefix)) throw new Error(`redis key prefix "${this.keyPrefix}" must not contain { or }: it would take the place of the conversation's hash tag`);
    this.maxChanges = options.maxChangesPerConversation ?? defaultMaxChangesPerConversation;
    this.idempotencyTtlSeconds = Math.max(1, Math.ceil((options.idempotencyTtlMs ?? defaultIdempotencyTtlMs) / 1000));
    this.cache = new DecodedStateCache(options.cacheSize ?? defaultDecodedStates, options.cacheBytes ?? defaultDecodedStateBytes, this.lineage);
    this.watchBlockMs = options.watchBlockMs ?? 1_000;
    this.maxCommitAttempts = options.maxCommitAttempts ?? 100;
    this.now = options.now ?? Date.now;
    this.deltaContext = options.deltaContext ?? { newMessageId: () => randomUUID() };
    this.indexRefreshMs = options.indexRefreshMs ?? 60_000;
    this.waitReplicas = options.waitReplicas ?? 0;
    this.waitTimeoutMs = options.waitTimeoutMs ?? 1_000;
    if (typeof target === "string") {
      this.where = redactUrl(target);
      if (options.tlsCa !== undefined && !target.startsWith("rediss://")) throw new Error(`a TLS CA was given for ${this.where}, which is not a rediss:// URL`);
      const tls = options.tlsCa !== undefined ? { tls: { ca: options.tlsCa } } : {};
      this.redis = new Redis(target, { ...redisConnectionOptions, ...tls }) as ScriptedRedis;
    } else {
      const seeds = parseClusterSeeds(target.clusterNodes);
      this.where = `redis cluster ${describeClusterSeeds(target.clusterNodes)}`;
      if (options.tlsCa !== undefined && !seeds.tls) throw new Error(`a TLS CA was given for ${this.where}, whose seeds are not rediss:// URLs`);
      // Every node, the discovered ones and the Watch connections too, is reached with these.
      const redisOptions = {
        ...redisClusterOptions.redisOptions,
        ...(seeds.username !== undefined ? { username: seeds.username } : {}),
        ...(seeds.password !== undefined ? { password: seeds.password } : {}),
        ...(seeds.tls ? { tls: options.tlsCa !== undefined ? { ca: options.tlsCa } : {} } : {}),
      };
      this.redis = new Cluster(seeds.nodes, { ...redisClusterOptions, redisOptions }) as ScriptedRedis;
    }
    // Without a listener ioredis reports connection errors as unhandled; they surface as
    // UNAVAILABLE on the calls that need the connection instead.
    this.redis.on("error", (error: Error) => (this.lastError = error.message));
    this.redis.defineCommand("contextdLoad", { numberOfKeys: 7, lua: loadScript, readOnly: true });
    this.redis.defineCommand("contextdWindow", { numberOfKeys: 6, lua: windowScript, readOnly: true });
    this.redis.defineCommand("contextdCommit", { numberOfKeys: commitScriptKeys, lua: commitScript });
    this.redis.defineCommand("contextdWriteProbe", { numberOfKeys: 0, lua: writeProbeScript });
    this.redis.defineCommand("contextdReportUsage", { numberOfKeys: 2, lua: reportUsageScript });
  }

  /** Resolves once connected, or after `timeoutMs` (the store then answers UNAVAILABLE and keeps reconnecting). */
  async connected(timeoutMs = 5_000): Promise<boolean> {
    return whenReady(this.redis, timeoutMs);
  }

  async load(conversationId: string): Promise<ConversationState> {
    const { state } = await this.read(conversationId, "");
    this.codec.retainState(state, this.lineage);
    return state;
  }

  /**
   * One script reads the window's range of its list (LRANGE), and with `withRest` the header's
   * `rest` and the other lists, at one version; a cached copy at that version answers instead
   * (the script says so without sending anything). A window read is not cached: the next `load`
   * reads the whole state as before.
   */
  async readWindow(conversationId: string, query: WindowQuery): Promise<SegmentWindow> {
    const keys = this.keys(conversationId);
    checkWindowQuery(query);
    const cached = this.cache.get(conversationId);
    const layout = cached && this.layouts.get(cached);
    const segmentIndex = storedSegments.indexOf(query.segment);
    const reply = await this.call(
      "reading a window of a conversation",
      () =>
        this.redis.contextdWindowBuffer(
          keys.version,
          keys.header,
          ...keys.segments,
          String(segmentIndex + 1),
          query.end === undefined ? "" : String(query.end),
          String(query.count),
          query.withRest ? "1" : "0",
          query.atVersion === undefined ? "" : String(query.atVersion),
          layout ? String(cached!.version) : "",
          layout?.created ?? "",
        ),
      conversationId,
    );
    const outcome = String(reply[0]);
    if (outcome === "corrupt") throw corruptConversation(conversationId, String(reply[1]));
    if (outcome === "moved") throw windowMoved(conversationId, query.atVersion!, storedVersion(conversationId, String(reply[1])));
    if (reply[1] === null) return windowOf(emptyConversationState(conversationId), query);
    const version = storedVersion(conversationId, String(reply[1]));
    if (String(reply[2]) === "cached") {
      this.cache.touch(conversationId);
      return this.heldWindow(cached!, query);
    }
    const start = Number(reply[3]);
    const length = Number(reply[4]);
    const decodeList = (items: Buffer[], segment: string, from: number, key: string) =>
      items.map((item, position) => {
        try {
          return this.codec.decodeStoredEntry(item);
        } catch (error) {
          throw corruptConversation(conversationId, `message ${from + position} of the ${segment} list ${key} does not decode: ${(error as Error).message}`);
        }
      });
    const running: (RunningFacts | undefined)[] = [];
    const window = (reply[5] as Buffer[]).map((item, position) => {
      try {
        const entry = this.codec.storedTokenCounts.decodeEntryWithFacts(item);
        running.push(entry.running);
        return entry.message;
      } catch (error) {
        throw corruptConversation(conversationId, `message ${start + position} of the ${query.segment} list ${keys.segments[segmentIndex]} does not decode: ${(error as Error).message}`);
      }
    });
    const firstBytes = reply[12] as Buffer | null;
    const first = firstBytes === null ? undefined : decodeList([firstBytes], query.segment, 0, keys.segments[segmentIndex]!)[0];
    let state: ConversationState = { ...emptyConversationState(conversationId), version };
    if (query.withRest) {
      const restBytes = reply[6] as Buffer;
      try {
        state = { ...fromBinary(ConversationStateSchema, restBytes), conversationId, version };
      } catch (error) {
        throw corruptConversation(conversationId, `the header ${keys.header} field rest does not decode: ${(error as Error).message}`);
      }
      storedSegments.forEach((segment, index) => {
        if (index !== segmentIndex) state[segment] = decodeList(reply[7 + index] as Buffer[], segment, 0, keys.segments[index]!);
      });
    }
    state[query.segment] = window;
    return { state, start, length, stored: { running, epoch: BigInt(String(reply[11])), first } };
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
    const version = await this.call("reading the version", () => this.redis.get(this.keys(conversationId).version), conversationId);
    return version === null ? 0n : storedVersion(conversationId, version);
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
    const index = conversationIndexKey(this.keyPrefix);
    const lower = after !== "" && after >= prefix ? Buffer.from("(" + after) : Buffer.from("[" + prefix);
    const upper = prefix === "" ? "+" : Buffer.concat([Buffer.from("[" + prefix), Buffer.from([0xff])]);
    const ids = await this.call("listing conversations", () => this.redis.zrangebylex(index, lower, upper, "LIMIT", 0, pageSize + 1));
    const page = ids.slice(0, pageSize);
    // One GET per listed conversation, issued together: on one Redis they leave in one write (see
    // `call`); on a cluster each goes to the master of its conversation's slot.
    const versions = await this.call("listing conversations", () => Promise.allSettled(page.map((id) => this.redis.get(this.keys(id).version))));
    const conversations = page.flatMap((id, position) => {
      const settled = versions[position]!;
      const [error, version] = settled.status === "rejected" ? [settled.reason as unknown, undefined] : [undefined, settled.value];
      // A conversation whose version key is of the wrong type or holds no version is left out of
      // the listing, so one corrupt conversation does not break every page; reading it answers
      // DATA_LOSS naming it.
      if (error) {
        if (isWrongType(error)) return [];
        throw this.failure("listing conversations", error);
      }
      // An index entry whose first commit never applied (the index is written beside the script).
      if (version === null || version === undefined) return [];
      if (!isVersionText(version as string)) return [];
      return [create(ConversationSummarySchema, { conversationId: id, version: BigInt(version as string) })];
    });
    return { conversations, nextPageToken: ids.length > pageSize ? encodePageToken(page[page.length - 1]!) : "" };
  }

  async readCalibration(key: CalibrationRecordKey, nowMs: number, bounds: CalibrationBounds): Promise<TokenCorrection | undefined> {
    const keys = calibrationKeys(this.keyPrefix, key.tenant);
    const field = calibrationField(key);
    const stored = await this.call("reading a token calibration", () =>
      this.redis.hget(keys.records, field).catch((error: unknown) => {
        if (isWrongType(error)) throw corruptCalibration(keys.records, `the key is not a hash (${(error as Error).message})`);
        throw error;
      }),
    );
    if (stored === null) return undefined;
    const parsed = /^(\S+) (\d+) (\S+) (\d+)$/.exec(stored);
    const [factor, reports, meanAbsoluteRelativeError, reportedAtMs] = (parsed?.slice(1) ?? []).map(Number);
    if (!parsed || ![factor, reports, meanAbsoluteRelativeError, reportedAtMs].every(Number.isFinite)) {
      throw corruptCalibration(keys.records, `field ${field} holds "${stored.slice(0, 60)}", not a correction`);
    }
    return reportedAtMs! > nowMs - bounds.ttlMs ? { factor: factor!, reports: reports!, meanAbsoluteRelativeError: meanAbsoluteRelativeError! } : undefined;
  }

  async reportCalibration(key: CalibrationRecordKey, estimatedTokens: number, actualTokens: number, nowMs: number, bounds: CalibrationBounds): Promise<LearntCorrection> {
    const keys = calibrationKeys(this.keyPrefix, key.tenant);
    const reply = await this.call("reporting usage", () =>
      this.redis.contextdReportUsage(
        keys.records,
        keys.reported,
        calibrationField(key),
        estimatedTokens,
        actualTokens,
        nowMs,
        bounds.ttlMs,
        bounds.maxKeysPerTenant,
        minCorrection,
        maxCorrection,
        calibrationWindow,
        maxCorrectionStep,
      ),
    );
    if (reply[0] !== "ok") throw corruptCalibration(keys.records, String(reply[1]));
    const [factor, reports, meanAbsoluteRelativeError, relativeError] = reply.slice(1).map(Number);
    return { correction: { factor: factor!, reports: reports!, meanAbsoluteRelativeError: meanAbsoluteRelativeError! }, relativeError: relativeError! };
  }

  async *watch(conversationId: string, fromVersion: bigint, signal: AbortSignal): AsyncIterable<Change> {
    const keys = this.keys(conversationId);
    let last = fromVersion;
    const backlog = await this.call("reading changes", () => this.redis.xrangeBuffer(keys.changes, `${fromVersion + 1n}-0`, "+"), conversationId);
    if (fromVersion > 0n) {
      const oldest = backlog.length > 0 ? decodeChange(conversationId, backlog[0]!).version : undefined;
      const current = oldest === undefined ? await this.currentVersion(conversationId) : oldest - 1n;
      if (current > fromVersion && (oldest === undefined || oldest > fromVersion + 1n)) {
        throw changesNotRetained(conversationId, fromVersion, oldest ?? current + 1n);
      }
    }
    for (const entry of backlog) {
      const change = decodeChange(conversationId, entry);
      yield change;
      last = change.version;
    }
    // A blocking XREAD holds its connection, so each watch gets its own: to the one Redis, or on a
    // cluster to the master of the conversation's slot (a blocking read must go to that node).
    const address = this.masterAddressOf(keys.changes);
    if (this.redis instanceof Cluster && address === undefined) {
      throw this.unavailable("watching changes", new Error(`the cluster client knows no master for the slot of ${keys.changes} yet`));
    }
    let connection = this.watchConnection(address);
    const stop = () => connection.disconnect();
    signal.addEventListener("abort", stop, { once: true });
    try {
      let redirections = 0;
      while (!signal.aborted) {
        if (!(await whenReady(connection, redisConnectionOptions.connectTimeout!)) && !signal.aborted) {
          throw this.unavailable("watching changes", new Error(`no connection within ${redisConnectionOptions.connectTimeout} ms`));
        }
        let reply: [Buffer, [Buffer, Buffer[]][]][] | null;
        try {
          reply = await connection.xreadBuffer("COUNT", 100, "BLOCK", this.watchBlockMs, "STREAMS", keys.changes, `${last}-0`);
          redirections = 0;
        } catch (error) {
          if (signal.aborted) return;
          if (isWrongType(error)) throw corruptConversation(conversationId, `the change stream ${keys.changes} is not a stream (${(error as Error).message})`);
          // The slot moved (a failover promoted a replica, or a resharding): read from its new
          // master. A master turned replica first unblocks its blocked readers (UNBLOCKED); the
          // next read there answers MOVED, naming the new master.
          const redirection = clusterRedirection(error);
          const moved = redirection?.kind === "moved" ? redirection.address : undefined;
          if (this.redis instanceof Cluster && (moved !== undefined || (redisReplyError(error) ?? "").startsWith("UNBLOCKED")) && redirections++ < 16) {
            const target = moved ?? `${connection.options.host}:${connection.options.port}`;
            connection.disconnect();
            this.watchConnections.delete(connection);
            this.redis.refreshSlotsCache();
            connection = this.watchConnection(target);
            continue;
          }
          throw this.failure("watching changes", error);
        }
        for (const [, entries] of reply ?? []) {
          for (const entry of entries) {
            const change = decodeChange(conversationId, entry);
            if (change.version <= last) continue;
            yield change;
            last = change.version;
          }
        }
      }
    } finally {
      signal.removeEventListener("abort", stop);
      this.watchConnections.delete(connection);
      connection.disconnect();
    }
  }

  /** A new connection for one watch's blocking reads: a duplicate of the one Redis's, or to `address` ("host:port") of a cluster. */
  private watchConnection(address: string | undefined): Redis {
    const commandTimeout = this.watchBlockMs + 2_000;
    const connection =
      this.redis instanceof Cluster
        ? new Redis({ ...redisConnectionOptions, ...this.redis.options.redisOptions, ...clusterNode(address ?? "unknown:0"), commandTimeout })
        : this.redis.duplicate({ commandTimeout });
    connection.on("error", (error: Error) => (this.lastError = error.message));
    this.watchConnections.add(connection);
    return connection;
  }

  /** On a cluster, the address of the master the client maps `key`'s slot to (undefined before it knows the slots). */
  private masterAddressOf(key: string): string | undefined {
    return this.redis instanceof Cluster ? this.redis.slots[calculateSlot(key)]?.[0] : undefined;
  }

  /** The masters to check: the one Redis, or every master of the cluster the client knows. */
  private masters(): Redis[] {
    return this.redis instanceof Cluster ? this.redis.nodes("master") : [this.redis];
  }

  /**
   * Runs the write probe, not PING: a Redis over `maxmemory` (noeviction) or a read-only replica
   * answers PING but refuses every commit. After a commit was refused for memory, also fails while
   * Redis's `used_memory` plus that commit's size is over `maxmemory` (Redis counts a command's
   * arguments too, so it refuses long commits while small writes still pass). Health polls this:
   * RESOURCE_EXHAUSTED or UNAVAILABLE here makes it NOT_SERVING, and logs why.
   */
  async ping(): Promise<void> {
    if (this.redis instanceof Cluster) await this.pingCluster(this.redis);
    else await this.call("checking that Redis takes writes", () => this.redis.contextdWriteProbe());
    const refused = this.refusedForMemory;
    if (refused === undefined) return;
    for (const master of this.masters()) {
      const info = await this.call("checking Redis's memory", () => master.info("memory"));
      const field = (name: string) => Number(new RegExp(`^${name}:(\\d+)`, "m").exec(info)?.[1] ?? 0);
      const [used, max] = [field("used_memory"), field("maxmemory")];
      if (max > 0 && used + refused.bytes > max) {
        throw new ConnectError(
          `${refused.message} (used_memory ${used} + the refused commit's ${refused.bytes} bytes > maxmemory ${max})`,
          Code.ResourceExhausted,
        );
      }
    }
    this.refusedForMemory = undefined;
  }

  /**
   * A cluster is usable when the client is connected, the cluster covers every slot
   * (`cluster_state:ok`, which is `fail` from when a master is found failed until a replica took
   * over), and every master the client routes to takes writes (the write probe on each). A probe
   * that fails makes the client read the slot map again, so after a failover it routes to the
   * promoted replica without waiting for a MOVED.
   */
  private async pingCluster(cluster: Cluster): Promise<void> {
    if (cluster.status !== "ready") throw this.unavailable("checking the cluster", new Error(`the cluster client is ${cluster.status}`));
    const masters = cluster.nodes("master");
    if (masters.length === 0) throw this.unavailable("checking the cluster", new Error("the cluster client knows no master"));
    try {
      const info = await this.call("checking the cluster's state", () => masters[0]!.cluster("INFO"));
      const state = /^cluster_state:(\w+)/m.exec(String(info))?.[1];
      if (state !== "ok") throw this.unavailable("checking the cluster's state", new Error(`cluster_state is ${state ?? "missing"}: not every slot has a reachable master`));
      await Promise.all(masters.map((master) => this.call(`checking that ${master.options.host}:${master.options.port} takes writes`, () => master.eval(writeProbeScript, 0))));
    } catch (error) {
      cluster.refreshSlotsCache();
      throw error;
    }
  }

  async close(): Promise<void> {
    for (const connection of this.watchConnections) connection.disconnect();
    this.redis.disconnect();
  }

  private keys(conversationId: string): ConversationKeys {
    requireStorableKey("conversation_id", conversationId, stringLimits.id);
    return conversationKeys(this.keyPrefix, conversationId);
  }

  /**
   * Reads the state and, for a non-empty key, the idempotency record, in one round trip. Only
   * what the cached copy lacks crosses the wire: nothing when the stored version is the cached
   * one, the new tail of each list that only grew since, and whole only the lists rewritten since
   * (or everything, without a usable cached copy).
   */
  private async read(conversationId: string, idempotencyKey: string): Promise<Loaded> {
    const keys = this.keys(conversationId);
    const cached = this.cache.get(conversationId);
    const layout = cached && this.layouts.get(cached);
    const reply = await this.call(
      "loading a conversation",
      () =>
        this.redis.contextdLoadBuffer(
          keys.version,
          keys.header,
          ...keys.segments,
          keys.idempotency(idempotencyKey),
          idempotencyKey === "" ? "0" : "1",
          layout ? String(cached!.version) : "",
          layout?.created ?? "",
          layout?.restAt ?? "",
          ...storedSegments.flatMap((_, index) => (layout ? [layout.segments[index]!.at, String(layout.segments[index]!.length)] : ["", ""])),
        ),
      conversationId,
    );
    if (String(reply[0]) === "corrupt") throw corruptConversation(conversationId, String(reply[1]));
    const [, versionBytes, fingerprint, recorded] = reply;
    const record = fingerprint && recorded ? { fingerprint: String(fingerprint), version: storedVersion(conversationId, String(recorded)) } : undefined;
    if (versionBytes === null) {
      this.cache.delete(conversationId);
      this.indexedConversations.delete(conversationId);
      return { state: emptyConversationState(conversationId), record };
    }
    const version = storedVersion(conversationId, String(versionBytes));
    if (reply.length === 4) {
      // The script answers this short only for the cached version.
      this.cache.touch(conversationId);
      return { state: cached!, record };
    }
    return { state: this.assemble(conversationId, keys, version, reply, layout ? cached : undefined), record };
  }

  /**
   * The state a load script's full reply describes, on top of `cached` for whatever the reply left
   * out; remembered with its layout. DATA_LOSS for anything that does not decode or belongs to
   * another conversation.
   */
  private assemble(conversationId: string, keys: ConversationKeys, version: bigint, reply: LoadReply, cached: ConversationState | undefined): ConversationState {
    const cachedLayout = cached && this.layouts.get(cached);
    const created = String(reply[4]);
    const restAt = String(reply[5]);
    const restBytes = reply[6] as Buffer | null;
    let rest: ConversationState;
    let restSize: number;
    if (restBytes !== null) {
      try {
        rest = fromBinary(ConversationStateSchema, restBytes);
      } catch (error) {
        throw corruptConversation(conversationId, `the header ${keys.header} field rest does not decode: ${(error as Error).message}`);
      }
      if (rest.conversationId !== conversationId) throw corruptConversation(conversationId, `the header ${keys.header} holds the rest of "${rest.conversationId}"`);
      restSize = restBytes.length;
    } else {
      if (!cached || !cachedLayout) throw new ConnectError(`redis store: the load script left out the rest of "${conversationId}" without a cached copy`, Code.Internal);
      rest = cached;
      restSize = cachedLayout.restBytes;
    }
    const segments: SegmentLayout[] = [];
    const lists: Message[][] = [];
    storedSegments.forEach((segment, index) => {
      const at = String(reply[7 + 3 * index]);
      const from = Number(reply[8 + 3 * index]);
      const items = reply[9 + 3 * index] as Buffer[];
      if (from > 0 && (!cached || !cachedLayout || cached[segment].length !== from)) {
        throw new ConnectError(`redis store: the load script sent ${segment} of "${conversationId}" from ${from} without a cached copy that long`, Code.Internal);
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
          throw corruptConversation(conversationId, `message ${from + position} of the ${segment} list ${keys.segments[index]} does not decode: ${(error as Error).message}`);
        }
      });
      // The cached list itself where nothing was added (an empty one too), so what was derived
      // from it by identity (encodings, token counts) is found again.
      const unchanged = cached !== undefined && decoded.length === 0 && cached[segment].length === from;
      const list = unchanged ? cached[segment] : from === 0 ? decoded : cached![segment].concat(decoded);
      if (from > 0 && list !== cached![segment]) {
        this.lineage.appended(cached![segment], list);
        trustCaughtUpSegment(segment, cached![segment], list, this.strictToolRounds);
      }
      // What the next commit's history facts continue from (history-running-facts.ts).
      if (segment === "history" && decoded.length > 0 && running?.epoch === BigInt(at)) this.codec.storedTokenCounts.rememberRunning(list, running);
      lists.push(list);
      segments.push({ at, length: from + decoded.length, bytes });
    });
    const [system, history, memory, tools] = lists as [Message[], Message[], Message[], Message[]];
    const state: ConversationState = { ...rest, conversationId, version, system, history, memory, tools };
    const stored: StoredLayout = { created, restAt, restBytes: restSize, segments };
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
    const keys = this.keys(conversationId);
    requireStorableKey("idempotency_key", idempotencyKey, stringLimits.idempotencyKey);
    const fingerprint = idempotencyKey === "" ? "" : (requestFingerprint ?? deltasFingerprint(deltas));
    // The first attempt may start from the cached state without reading: the script compares its
    // version (and its lists' lengths) with the stored ones, so a stale cache costs a retry, never
    // a lost update. Anything the cached state cannot decide (another expected version, a delta it
    // rejects) is read again, which catches the cached copy up.
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
        if (loaded.record) {
          // A replay is answered as applied only once the original's writes are on the replicas too.
          if (this.waitReplicas > 0) this.requireReplicated(conversationId, loaded.record.version, await this.replicasAcknowledging(keys));
          return replayed(conversationId, idempotencyKey, fingerprint, loaded.record, loaded.state);
        }
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
      const changeBytes = bufferOf(toBinary(ChangeSchema, plan.change));
      const committing = this.call(
        "committing",
        () =>
          this.runCommitScript(
            keys.version,
            keys.header,
            ...keys.segments,
            keys.changes,
            keys.idempotency(idempotencyKey),
            String(base.version),
            changeBytes,
            fingerprint,
            this.idempotencyTtlSeconds,
            this.maxChanges,
            // As one array (ioredis flattens it), not spread: a call takes only so many arguments.
            write.args,
          ),
        conversationId,
      ).catch((error: unknown) => {
        if (error instanceof ConnectError && error.code === Code.ResourceExhausted) {
          this.refusedForMemory = { bytes: write.bytes + changeBytes.length, message: error.rawMessage };
        }
        throw error;
      });
      // The index entry is written beside the script, not in it (the index key is in another
      // Cluster slot); issued in the same event-loop iteration (see `call`), both leave in one
      // write. A failed index write does not fail a commit that applied: the entry is retried on
      // the next commit, and listing skips ids whose commit did not apply.
      const indexing = (this.indexedConversations.get(conversationId) ?? 0) > this.now() ? undefined : this.writeIndexEntry(conversationId);
      const { reply, acknowledged } = await committing;
      await indexing;
      const outcome = String(reply![0]);
      if (outcome === "ok") {
        this.layouts.set(plan.state, write.layout);
        this.cache.remember(plan.state, encodedSize(write.layout));
        if (othersWrote) this.contended.add(plan.state);
        this.requireReplicated(conversationId, plan.state.version, acknowledged);
        return { version: plan.state.version, state: plan.state, replayed: false };
      }
      if (outcome === "replay") {
        const record = { fingerprint: String(reply![1]), version: storedVersion(conversationId, String(reply![2])) };
        if (record.fingerprint !== fingerprint) throw idempotencyKeyReused(conversationId, idempotencyKey);
        this.requireReplicated(conversationId, record.version, acknowledged);
        // The state goes with the replay only while the conversation is still at the recorded version.
        const current = storedVersion(conversationId, String(reply![3]));
        const cachedNow = this.cache.get(conversationId);
        const state = current !== record.version ? undefined : cachedNow?.version === current ? cachedNow : (await this.read(conversationId, "")).state;
        return replayed(conversationId, idempotencyKey, fingerprint, record, state);
      }
      if (outcome === "corrupt") throw corruptConversation(conversationId, String(reply![1]));
      if (outcome === "invalid") throw new ConnectError(`redis store: the commit script refused its arguments: ${String(reply![1])}`, Code.Internal);
      const current = storedVersion(conversationId, String(reply![1]));
      // The stored lists are not those of the cached state at its version (written behind this
      // process's back): forget the copy and read the stored state whole.
      if (outcome === "stale") this.cache.delete(conversationId);
      // "conflict": another writer committed between our read and our script; the next read
      // catches the cached copy up.
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
   * What the commit script writes for `next`, computed from `base`: per segment list, nothing when
   * it is the same list, its new messages when it extends the base list, and otherwise the part
   * that differs from the longer of the kept prefix and the kept suffix (compaction keeps the
   * tail, a removal near the end keeps the head); `rest` only when something besides the segments
   * changed. Lists are compared by message identity: core never mutates a message, so the same
   * object is the same message, and a changed one is a new object.
   */
  private storedWrite(base: ConversationState, next: ConversationState): StoredWrite {
    const baseLayout = this.layouts.get(base);
    const first = base.version === 0n || baseLayout === undefined;
    const version = String(next.version);
    const args: (string | Buffer)[] = [];
    let bytes = 0;
    const segments: SegmentLayout[] = [];
    storedSegments.forEach((segment, index) => {
      const before = base[segment];
      const after = next[segment];
      const was = baseLayout?.segments[index] ?? { at: version, length: 0, bytes: 0 };
      const edit = segmentEdit(before, after, this.lineage);
      if (edit === undefined) {
        if (after !== before) this.codec.storedTokenCounts.rememberRunning(after, this.codec.storedTokenCounts.runningOf(before));
        args.push("=", String(before.length), String(before.length), "0");
        segments.push(first ? { ...was, at: version } : was);
        return;
      }
      const appended = edit.keepPrefix && edit.keep === before.length;
      // The history's entries carry what a reader of its tail needs of the head (history-running-facts.ts).
      const running = segment === "history" ? runningFactsOfWrite(this.codec.storedTokenCounts, before, after, edit, BigInt(appended && !first ? was.at : version)) : undefined;
      const encodings = edit.messages.map((message, position) => bufferOf(this.codec.encodeStoredEntry(message, running?.[position])));
      const added = encodings.reduce((sum, encoding) => sum + encoding.length, 0);
      bytes += added;
      // One push per encoding: spread as arguments, a 100,000-message replace overflowed the stack.
      args.push(edit.keepPrefix ? "p" : "s", String(before.length), String(edit.keep), String(encodings.length));
      for (const encoding of encodings) args.push(encoding);
      // The kept part's size is only counted for the cache's byte bound: proportional is close enough.
      const kept = edit.keep === before.length ? was.bytes : Math.round((was.bytes * edit.keep) / Math.max(1, before.length));
      segments.push({ at: appended && !first ? was.at : version, length: after.length, bytes: kept + added });
    });
    const restChanged = first || restDiffers(base, next);
    const rest = restChanged ? bufferOf(this.codec.encodeStateRest(next)) : Buffer.alloc(0);
    bytes += rest.length;
    const created = baseLayout?.created ?? randomUUID();
    return {
      args: [created, rest, restChanged ? "1" : "0", ...args],
      bytes,
      layout: { created, restAt: restChanged ? version : baseLayout!.restAt, restBytes: restChanged ? rest.length : baseLayout!.restBytes, segments },
    };
  }

  /**
   * The commit script, and with `waitReplicas` a `WAIT` right behind it on the same connection
   * (pipelined: on a cluster both go to the master of the conversation's slot, which is the node
   * whose replicas WAIT counts). `acknowledged` is how many replicas had the script's writes.
   */
  private async runCommitScript(...args: (string | Buffer | number | (string | Buffer)[])[]): Promise<{ reply: (Buffer | null)[]; acknowledged: number }> {
    if (this.waitReplicas === 0) return { reply: await this.redis.contextdCommitBuffer(...args), acknowledged: 0 };
    const [[scriptError, reply], [waitError, acknowledged]] = await this.behindWait((pipeline, onNode) => {
      // A node's own connection has not had the script defined: EVAL it (only on a redirection).
      if (onNode) pipeline.callBuffer("EVAL", commitScript, commitScriptKeys, ...(args.flat() as (string | Buffer | number)[]));
      else (pipeline as ChainableCommander & Scripts).contextdCommitBuffer(...args);
    });
    if (scriptError) throw scriptError;
    if (waitError) throw waitError;
    return { reply: reply as (Buffer | null)[], acknowledged: Number(acknowledged) };
  }

  /**
   * The replies of one command (queued by `queue` on the pipeline) and a `WAIT` behind it on the
   * same connection. On a cluster, a refusal of the command that Redis answers before running it
   * (`clusterRedirection`) is followed here: the cluster client follows a redirection in a pipeline
   * only when every reply is the same error, and `WAIT` answers a count wherever it runs, so
   * without this a commit pipeline refused with MOVED after a failover kept failing until some
   * other command taught the client the new slot map. The `WAIT` reply of a refused attempt counts
   * replicas of a node that wrote nothing and is dropped; the pair is sent again (`onNode` true when
   * to a node's own connection, where only the built-in commands exist), up to the cluster's
   * redirection limit.
   */
  private async behindWait(queue: (pipeline: ChainableCommander, onNode: boolean) => void): Promise<[Error | null, unknown][]> {
    const send = async (target: Redis | Cluster, asking: boolean) => {
      const pipeline = target.pipeline();
      if (asking) pipeline.asking();
      queue(pipeline, target !== this.redis);
      pipeline.call("WAIT", this.waitReplicas, this.waitTimeoutMs);
      const replies = (await pipeline.exec()) as [Error | null, unknown][];
      return asking ? replies.slice(1) : replies;
    };
    let [target, asking]: [Redis | Cluster, boolean] = [this.redis, false];
    let replies = await send(target, asking);
    const cluster = this.redis;
    if (!(cluster instanceof Cluster)) return replies;
    for (let redirections = 0; redirections < redisClusterOptions.maxRedirections!; redirections++) {
      const redirection = clusterRedirection(replies[0]![0]);
      if (redirection === undefined) break;
      if (redirection.kind === "moved" || redirection.kind === "ask") {
        // MOVED: later commands route by a refreshed map; this one goes to the named node now.
        if (redirection.kind === "moved") cluster.refreshSlotsCache();
        [target, asking] = [await this.clusterNodeAt(cluster, redirection.address), redirection.kind === "ask"];
      } else {
        // TRYAGAIN, CLUSTERDOWN: the same node (behind ASKING again if it was asked), after a pause.
        await new Promise((resolve) => setTimeout(resolve, redisClusterOptions.retryDelayOnTryAgain));
      }
      replies = await send(target, asking);
    }
    return replies;
  }

  /** The cluster client's connection to the node at `address` ("host:port"), once more after a slot map refresh if it knows none. */
  private async clusterNodeAt(cluster: Cluster, address: string): Promise<Redis> {
    const { host, port } = clusterNode(address);
    const find = () => cluster.nodes("all").find((node) => node.options.host === host && node.options.port === port);
    const known = find() ?? (await new Promise<void>((resolve) => cluster.refreshSlotsCache(() => resolve())), find());
    if (known === undefined) throw new Error(`the cluster redirected a command to ${address}, a node its client does not know (yet)`);
    return known;
  }

  /** UNAVAILABLE when `waitReplicas` is on and fewer replicas than it acknowledged the commit of `version`. */
  private requireReplicated(conversationId: string, version: bigint, acknowledged: number): void {
    if (acknowledged >= this.waitReplicas) return;
    throw new ConnectError(
      `conversation "${conversationId}": version ${version} was written on the Redis master but only ${acknowledged} of ${this.waitReplicas} replicas ` +
        `acknowledged it within ${this.waitTimeoutMs} ms, so a failover may lose it; retry with the same idempotency key (a retry replays it if it survived)`,
      Code.Unavailable,
    );
  }

  /**
   * How many replicas have every write this process made on its connection to the conversation's
   * master (a replay's original commit was one of them unless the connection was made anew since):
   * a `WAIT` behind a read of the conversation's version, so on a cluster both go to its master.
   */
  private async replicasAcknowledging(keys: ConversationKeys): Promise<number> {
    return this.call("waiting for replicas", async () => {
      const [[readError], [waitError, acknowledged]] = await this.behindWait((pipeline) => pipeline.get(keys.version));
      if (readError) throw readError;
      if (waitError) throw waitError;
      return Number(acknowledged);
    });
  }

  /** Adds the conversation to the listing index; resolves (never rejects) once Redis answered. */
  private async writeIndexEntry(conversationId: string): Promise<void> {
    try {
      await this.redis.zadd(conversationIndexKey(this.keyPrefix), 0, conversationId);
    } catch {
      return;
    }
    this.indexedConversations.delete(conversationId);
    this.indexedConversations.set(conversationId, this.now() + this.indexRefreshMs);
    if (this.indexedConversations.size > indexedConversationsLimit) {
      this.indexedConversations.delete(this.indexedConversations.keys().next().value!);
    }
  }

  /**
   * Runs one or more commands, mapping connection failures to UNAVAILABLE. Commands issued in the
   * same event-loop iteration (concurrent commits and loads) leave in one socket write: at
   * concurrency 32 a write per command was a fifth of the sidecar's CPU.
   */
  private async call<T>(what: string, run: () => Promise<T>, conversationId?: string): Promise<T> {
    this.batchWritesUntilNextIteration();
    try {
      return await run();
    } catch (error) {
      if (error instanceof ConnectError) throw error;
      if (conversationId !== undefined && isWrongType(error)) {
        throw corruptConversation(conversationId, `a key has the wrong type while ${what} (${(error as Error).message})`);
      }
      throw this.failure(what, error);
    }
  }

  /** RESOURCE_EXHAUSTED for a Redis refusing writes at maxmemory, UNAVAILABLE for anything else. */
  private failure(what: string, error: unknown): ConnectError {
    const reply = redisReplyError(error);
    if (reply?.startsWith("OOM ")) return storeOutOfMemory(what, reply);
    return this.unavailable(what, error);
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

  private unavailable(what: string, error: unknown): ConnectError {
    const detail = error instanceof Error ? error.message : String(error);
    const cause = this.lastError !== "" && this.lastError !== detail ? ` (last connection error: ${this.lastError})` : "";
    return new ConnectError(`redis store unavailable while ${what} at ${this.where}: ${detail}${cause}`, Code.Unavailable);
  }
}

/** Resolves true once `redis` is ready, false after `timeoutMs` (commands fail fast until then). */
function whenReady(redis: Redis | Cluster, timeoutMs: number): Promise<boolean> {
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

/** A retried commit's outcome: the recorded version, and the state only if it is that version's. */
function replayed(conversationId: string, key: string, fingerprint: string, record: IdempotencyRecord, current: ConversationState | undefined): CommitOutcome {
  if (record.fingerprint !== fingerprint) throw idempotencyKeyReused(conversationId, key);
  return { version: record.version, state: current?.version === record.version ? current : undefined, replayed: true };
}

/** A state's encoded size as stored: its rest and every message of its segments. */
function encodedSize(layout: StoredLayout): number {
  return layout.segments.reduce((sum, segment) => sum + segment.bytes, layout.restBytes);
}

/** What the commit script writes as a version: "0" or up to 15 digits without a leading zero (its Lua adds exactly below 2^53). */
function isVersionText(text: string): boolean {
  return /^(0|[1-9][0-9]{0,14})$/.test(text);
}

/** A stored version, or DATA_LOSS naming the conversation (BigInt of "abc" used to be INTERNAL). */
function storedVersion(conversationId: string, text: string): bigint {
  if (!isVersionText(text)) throw corruptConversation(conversationId, `the version key holds "${text.slice(0, 40)}", not a version`);
  return BigInt(text);
}

/** The message of an error reply from Redis (ioredis types its ReplyError class as `any`). */
function redisReplyError(error: unknown): string | undefined {
  return error instanceof Error && error.name === "ReplyError" ? error.message : undefined;
}

function isWrongType(error: unknown): boolean {
  return redisReplyError(error)?.startsWith("WRONGTYPE") ?? false;
}

/** The bytes as a Buffer (what ioredis sends as binary), without copying them. */
function bufferOf(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** A stream entry as the commit script writes it: id `<version>-0`, the single field pair ("change", bytes). */
function decodeChange(conversationId: string, [id, fields]: [Buffer | string, Buffer[]]): Change {
  const malformed = (detail: string) => corruptConversation(conversationId, `change stream entry ${String(id)} ${detail}`);
  if (fields.length !== 2 || String(fields[0]) !== "change") throw malformed(`has fields ${fields.filter((_, index) => index % 2 === 0).map(String).join(", ") || "(none)"}, not one "change"`);
  let change: Change;
  try {
    change = fromBinary(ChangeSchema, fields[1]!);
  } catch (error) {
    throw malformed(`does not decode: ${(error as Error).message}`);
  }
  if (`${change.version}-0` !== String(id) || change.conversationId !== conversationId) {
    throw malformed(`holds version ${change.version} of "${change.conversationId}"`);
  }
  return change;
}

/** "host:port" as ioredis takes a node; a bracketed IPv6 host loses its brackets. */
export function clusterNode(address: string): { host: string; port: number } {
  const colon = address.lastIndexOf(":");
  const port = Number(address.slice(colon + 1));
  if (colon <= 0 || !Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`redis cluster node "${address}" is not host:port`);
  return { host: address.slice(0, colon).replace(/^\[(.*)\]$/, "$1"), port };
}

/** The URL without a password, for error messages. */
function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString();
  } catch {
    return "(unparsable redis url)";
  }
}
