import { create, toBinary } from "@bufbuild/protobuf";
import { randomUUID } from "node:crypto";
import type { HistoryLimits } from "./version-history.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { Cluster, Redis } from "ioredis";
import { ChangeSchema, type Change, type ConversationSummary } from "#gen/contextd/v1/conversation_service_pb";
import { ConversationStateSchema, type ConversationState, type ForkOrigin } from "#gen/contextd/v1/state_pb";
import { Codec } from "../codec/codec.js";
import type { DeltaContext } from "../core/deltas/delta-context.js";
import { MessageListLineage } from "../core/model/message-list-lineage.js";
import { emptyConversationState, type CommitPlan } from "./commit-plan.js";
import { CommitEngine, EngineCommittedStore, type CommitRead, type CommitWrite } from "./commit-engine.js";
import type { ConversationPage, ConversationStore, HeldCopies } from "./conversation-store.js";
import { defaultIdempotencyTtlMs, defaultMaxChangesPerConversation } from "./memory-conversation-store.js";
import { entriesToRead, pageOf, positionOf, summaryOf, type ExaminedEntry, type ListPosition, type ListQuery } from "./conversation-listing.js";
import { RedisChangeFeed } from "./redis-change-feed.js";
import { plainValues, type StoredValues } from "./at-rest-encryption.js";
import { defaultCommandTimeoutMs, isVersionText, isWrongType, RedisConnection, storedVersion, whenReady, type RedisClusterNodes } from "./redis-connection.js";
import { RedisReplicaAcknowledgement } from "./redis-replica-acknowledgement.js";
import {
  calibrationKeys,
  commitScriptArguments,
  conversationExpiryIndexKey,
  conversationIdOfTag,
  conversationIndexKey,
  conversationKeys,
  conversationUpdateIndexKey,
  writeProbeScript,
  type CommitScriptCall,
  type ConversationKeys,
} from "./redis-scripts.js";
import { defaultExpirySweepMs, expirySweepBatch, expirySweepBatches, ConversationExpiry } from "./conversation-expiry.js";
import { calibrationWindow, maxCorrection, maxCorrectionStep, minCorrection, type LearntCorrection, type TokenCorrection } from "../core/compile/token-calibration.js";
import { calibrationField, type CalibrationBounds, type CalibrationRecordKey } from "./calibration-store.js";
import { storedSegments } from "./segment-edits.js";
import { bufferOf, StoredCopies, type ReceivedSegment, type Sealers } from "./stored-copies.js";
import { forkTailArguments, maxSealerRuns } from "./redis-fork-script.js";
import { tenantOf } from "../core/model/conversation-tenant.js";
import { checkWindowQuery, windowMoved, windowOf, type SegmentWindow, type WindowQuery } from "./segment-window.js";
import { corruptCalibration, corruptConversation, requireStorableKey, requireStorableText, versionConflict } from "./store-errors.js";
import type { HistoryBound } from "./history-bound.js";
import { stringLimits } from "../core/model/string-limits.js";
import { RedisUsageLedger } from "./redis-usage-ledger.js";
import { idIndexArguments, idIndexChanges } from "./stored-id-index.js";
import { maxTailWindowMessages, tailWindowMessages, type CommitTail, type TailRead } from "./tail-commit.js";
import { RecentIds, defaultListedIdBytes } from "./recent-ids.js";
import { FollowedConversations } from "./followed-conversations.js";

export type { RedisClusterNodes } from "./redis-connection.js";

export interface RedisStoreOptions {
  /** Prefix of every key; lets several deployments share one Redis. Must not hold `{` or `}` (it would take the hash tag). */
  keyPrefix?: string;
  /** Approximate number of changes kept per conversation stream (XADD MAXLEN ~). */
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
   * `--listed-id-bytes`: what the memo of conversations whose listing entry this process wrote may
   * weigh, and apart from it the memo of conversations whose stored id index was found stale (recent-ids.ts).
   */
  listedIdBytes?: number;
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
   * `--redis-command-timeout-ms`: how long one command (a script, a read) may go unanswered
   * before the call fails as UNAVAILABLE (default 2,000), plus `waitTimeoutMs` when
   * `waitReplicas` is set. It bounds a hung Redis. The timer runs from the send, so a large
   * commit needs its transfer and its script inside it: 150,000 messages in one batch ran
   * 0.24-0.33 s in Redis on an idle 2-core host, and outlasted 2 s once on a loaded one.
   */
  commandTimeoutMs?: number;
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
  /** How contents are kept: AES-256-GCM under `--encryption-key-file` (at-rest-encryption.ts); as they are by default. */
  values?: StoredValues;
  /**
   * Under encryption, whether a fork shares the source's stored messages, each opened as its
   * sealer's (`--share-encrypted-forks`, default true), or goes through the engine, every message
   * sealed again for the fork (what a previous release's sidecars read).
   */
  shareEncryptedForks?: boolean;
  /** The idle TTLs conversations expire by (every key of one gets the expiry); none = only their own. */
  expiry?: ConversationExpiry;
  /** The default prune commits keep histories within (`--prune-*`); none = only `prune_history` deltas prune. */
  historyBound?: HistoryBound;
  /** How often the listing entries of expired conversations are removed, in ms; 0 = never (listings skip them anyway). */
  expirySweepMs?: number;
  /**
   * `--prefetch-conversations`: most conversations this process follows, catching its copy up on
   * other processes' commit notices (followed-conversations.ts); 0 or none = none. On a cluster
   * the notices are sharded pub/sub (SPUBLISH, SSUBSCRIBE on the slot's master).
   */
  prefetchConversations?: number;
}


/**
 * The production store. A commit (the one engine, commit-engine.ts) computes the next state from
 * the state it read, then one Lua script compares the expected version, writes state + version,
 * appends the change to the conversation's stream and records the idempotency key, all
 * atomically. If the version moved in between, the script refuses and nothing is written
 * (ABORTED, or an internal retry when the caller gave no expected version).
 */
export class RedisConversationStore extends EngineCommittedStore implements ConversationStore {
  private readonly connection: RedisConnection;
  private readonly keyPrefix: string;
  private readonly maxChanges: number;
  private readonly idempotencyTtlSeconds: number;
  private readonly now: () => number;
  private readonly codec: Codec;
  /** Which segment lists were made by appending to which (commits, and loads that catch a cached copy up). */
  readonly lineage = new MessageListLineage();
  private readonly copies: StoredCopies;
  private readonly values: StoredValues;
  private readonly sharesEncryptedForks: boolean;
  protected readonly engine: CommitEngine;
  private readonly changes: RedisChangeFeed;
  private readonly replicas: RedisReplicaAcknowledgement;
  protected readonly usage: RedisUsageLedger;
  /**
   * Conversations whose entry in the listing index this process wrote and Redis acknowledged.
   * Entries are never removed from the index, so later commits skip the write (a second command
   * per commit was 10-20% of the store's commit CPU). Forgotten when a read finds the conversation at
   * version 0, so an index lost with the rest of Redis's data is written again. Bounded by bytes
   * (`--listed-id-bytes`); one forgotten costs its next commit the index write again.
   */
  private readonly indexedConversations: RecentIds<number>;
  private readonly indexRefreshMs: number;
  /**
   * Conversations whose stored id index a commit of this process found stale (stored before it, or
   * last written by a sidecar that did not keep it): the next commit from the copy writes it whole.
   * Bounded by bytes (`--listed-id-bytes`, as the listing memo beside it: both are ids remembered
   * to spare a write); one forgotten is rebuilt by the next cold commit instead.
   */
  private readonly staleIdIndexes: RecentIds<true>;
  /**
   * On a cluster, the homes this process learnt of forks that live under another conversation's
   * hash tag (redis-scripts.ts, conversationKeys): a pointer changes only when its conversation is
   * gone, and a home that no longer holds its conversation is found out at the next read there,
   * so a remembered one saves the hop through the own tag. Bounded by `--listed-id-bytes`.
   */
  private readonly homes: RecentIds<string>;
  /**
   * Expiry-index entries this process failed to write (`writeExpiryEntry`), with the expiry each
   * should have (0n: none), for the next sweep to write. Bounded by `--listed-id-bytes` too; one
   * forgotten, or lost with the process, stays as it was in the index.
   */
  private readonly unwrittenExpiryEntries: RecentIds<bigint>;
  /**
   * Set when Redis refused a commit for memory: the bytes that commit sent. Redis counts a
   * command's own arguments against `maxmemory`, so it can refuse a commit of a long state while
   * small writes (and the write probe) still pass; `ping` fails until the refused size fits again.
   */
  private refusedForMemory: { bytes: number; message: string } | undefined;
  private readonly sweeper: NodeJS.Timeout | undefined;
  private sweeping = false;
  /** The conversations whose commit notices this process follows (`--prefetch-conversations`). */
  protected override readonly followed: FollowedConversations;
  /**
   * Where all followed conversations' notices arrive, opened with the first followed: on one Redis
   * one connection; on a cluster a client with one sharded subscriber per master (noticeSubscriberOf).
   */
  private noticeSubscriber: Redis | Cluster | undefined;
  /** Stops the cluster client's slot refreshes from refreshing the notice subscriber's (on close). */
  private stopNoticeSlotRefresh: (() => void) | undefined;
  /** The followed conversations by their notice channel (the change stream's key name). */
  private readonly noticeChannels = new Map<string, string>();
  /** Sent with this process's notices, which its own subscriber hears too: they are not notices to it. */
  private readonly noticeSender = randomUUID();

  constructor(target: string | RedisClusterNodes, options: RedisStoreOptions = {}) {
    super();
    this.codec = options.codec ?? new Codec();
    this.keyPrefix = options.keyPrefix ?? "contextd";
    if (/[{}]/.test(this.keyPrefix)) throw new Error(`redis key prefix "${this.keyPrefix}" must not contain { or }: it would take the place of the conversation's hash tag`);
    this.maxChanges = options.maxChangesPerConversation ?? defaultMaxChangesPerConversation;
    if (options.historyLimits) this.historyLimits = options.historyLimits;
    this.idempotencyTtlSeconds = Math.max(1, Math.ceil((options.idempotencyTtlMs ?? defaultIdempotencyTtlMs) / 1000));
    this.now = options.now ?? Date.now;
    this.indexRefreshMs = options.indexRefreshMs ?? 60_000;
    this.indexedConversations = new RecentIds(options.listedIdBytes ?? defaultListedIdBytes);
    this.staleIdIndexes = new RecentIds(options.listedIdBytes ?? defaultListedIdBytes);
    this.homes = new RecentIds(options.listedIdBytes ?? defaultListedIdBytes);
    this.unwrittenExpiryEntries = new RecentIds(options.listedIdBytes ?? defaultListedIdBytes);
    // A commit that waits for replicas sends its WAIT right behind the script, and WAIT answers
    // only after up to `waitTimeoutMs`: under a command timeout shorter than that, a lagging
    // replica made the commit fail as "Command timed out" before WAIT could say how many acknowledged.
    const waiting = (options.waitReplicas ?? 0) > 0 ? (options.waitTimeoutMs ?? 1_000) : 0;
    this.connection = new RedisConnection(target, options.tlsCa, (options.commandTimeoutMs ?? defaultCommandTimeoutMs) + waiting);
    this.values = options.values ?? plainValues;
    this.sharesEncryptedForks = options.shareEncryptedForks ?? true;
    this.usage = new RedisUsageLedger(this.connection, this.keyPrefix);
    this.copies = new StoredCopies({
      values: this.values,
      codec: this.codec,
      lineage: this.lineage,
      cacheSize: options.cacheSize,
      cacheBytes: options.cacheBytes,
      keptTailBytes: options.keptTailBytes,
      strictToolRounds: options.deltaContext?.strictToolRounds === true,
      names: {
        loader: "redis store: the load script",
        header: (conversationId) => `the header ${this.keys(conversationId).header}`,
        rest: (conversationId) => `the header ${this.keys(conversationId).header} field rest`,
        segment: (conversationId, segment) => `${segment} list ${this.keys(conversationId).segments[storedSegments.indexOf(segment as never)]}`,
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
    this.engine = new CommitEngine({ copies: this.copies, io, codec: this.codec, lineage: this.lineage, deltaContext, now: this.now, maxCommitAttempts, expiry: options.expiry ?? new ConversationExpiry(), historyBound: options.historyBound, maxUndoBytes: this.historyLimits.maxUndoBytes });
    const sweepMs = options.expirySweepMs ?? defaultExpirySweepMs;
    if (sweepMs > 0) this.sweeper = setInterval(() => void this.sweepExpired().catch(() => undefined), sweepMs).unref();
    this.changes = new RedisChangeFeed(this.connection, options.watchBlockMs ?? 1_000, (conversationId) => this.currentVersion(conversationId), this.values);
    this.replicas = new RedisReplicaAcknowledgement(this.connection, options.waitReplicas ?? 0, options.waitTimeoutMs ?? 1_000);
    this.followed = new FollowedConversations({
      capacity: options.prefetchConversations ?? 0,
      heldVersion: (conversationId) => this.copies.copy(conversationId)?.version ?? this.copies.keptTail(conversationId)?.state.version,
      catchUp: async (conversationId) => {
        if (this.copies.copy(conversationId) !== undefined) await this.read(conversationId, "");
        else if (this.copies.keptTail(conversationId) !== undefined) await this.readTail(conversationId, "", []);
      },
      subscribe: (conversationId) => this.subscribeNotices(conversationId),
      unsubscribe: (conversationId) => this.unsubscribeNotices(conversationId),
    });
  }



  private subscribeNotices(conversationId: string): void {
    const channel = this.noticeChannelOf(conversationId);
    this.noticeChannels.set(channel, conversationId);
    this.noticeSubscriber ??= this.noticeSubscriberOf(this.redis);
    const subscribing = this.noticeSubscriber instanceof Cluster ? this.noticeSubscriber.ssubscribe(channel) : this.noticeSubscriber.subscribe(channel);
    subscribing.catch(() => undefined);
  }

  private unsubscribeNotices(conversationId: string): void {
    const channel = this.noticeChannelOf(conversationId);
    this.noticeChannels.delete(channel);
    const subscriber = this.noticeSubscriber;
    if (subscriber === undefined) return;
    (subscriber instanceof Cluster ? subscriber.sunsubscribe(channel) : subscriber.unsubscribe(channel)).catch(() => undefined);
  }

  /**
   * The connection notices arrive on. Its commands are queued while (re)connecting, and ioredis
   * subscribes again after a reconnect; notices published meanwhile are lost, which costs the
   * next commit its read, as without notices.
   */
  private noticeSubscriberOf(redis: Redis | Cluster): Redis | Cluster {
    const onNotice = (channel: string, message: string) => {
      const followed = this.noticeChannels.get(channel);
      const [version, sender] = message.split(" ");
      if (followed !== undefined && sender !== this.noticeSender && /^\d{1,19}$/.test(version!)) this.followed.noticed(followed, BigInt(version!));
    };
    if (!(redis instanceof Cluster)) {
      const subscriber = redis.duplicate({ enableOfflineQueue: true });
      subscriber.on("error", (error: Error) => (this.connection.lastError = error.message));
      subscriber.on("message", onNotice);
      return subscriber;
    }
    // Sharded pub/sub: a notice (SPUBLISH, publishNotice) reaches only the nodes of its channel's
    // shard, so ioredis keeps one subscriber connection per master and SSUBSCRIBEs each channel
    // on its slot's master. That client's slot map is refreshed only when one of its own
    // connections fails; a failover that leaves the old master up (it turns replica) drops the
    // slot's subscriptions on the server and nothing of the subscriber's notices it. The store's
    // cluster client learns the new map from its first command MOVED there: its "refresh" makes
    // the subscriber's map refresh too, and ioredis, seeing the slot's master changed, connects a
    // subscriber to the new master and SSUBSCRIBEs the slot's channels again there.
    const subscriber = redis.duplicate(undefined, { shardedSubscribers: true, enableOfflineQueue: true });
    subscriber.on("error", (error: Error) => (this.connection.lastError = error.message));
    subscriber.on("smessage", onNotice);
    const refresh = () => subscriber.refreshSlotsCache();
    redis.on("refresh", refresh);
    this.stopNoticeSlotRefresh = () => redis.off("refresh", refresh);
    return subscriber;
  }

  /**
   * Announces this process's commit of `version` to the processes following the conversation:
   * "<version> <sender>" (this process's own subscriber hears it too, and skips it by the sender).
   * On a cluster SPUBLISH: the channel's slot is the conversation's hash tag, so the notice goes
   * to the slot's master and its replicas only, where PUBLISH would cross the cluster bus to every node.
   */
  private publishNotice(channel: string, version: bigint): void {
    const notice = `${version} ${this.noticeSender}`;
    (this.redis instanceof Cluster ? this.redis.spublish(channel, notice) : this.redis.publish(channel, notice)).catch(() => undefined);
  }

  private get redis() {
    return this.connection.redis;
  }

  /** The tails this store keeps of conversations it committed on without a copy (kept-tails.ts): how many, and their approximate heap bytes. */
  get keptTails(): { count: number; bytes: number; reusedEntries: number } {
    return this.copies.keptTails;
  }

  /** The conversations whose stored id index this process remembers as stale: how many, and what they weigh (`--listed-id-bytes`). */
  get staleIdIndexIds(): { count: number; bytes: number } {
    return { count: this.staleIdIndexes.size, bytes: this.staleIdIndexes.keptBytes };
  }

  /**
   * What the conversation's stored id index holds (`indexedIdsScript`): its message ids, each
   * history call id's latest name, and whether it is current; none for a conversation never written.
   */
  async indexedIds(conversationId: string): Promise<{ ids: string[]; calls: Record<string, string>; current: boolean } | undefined> {
    const { reply } = await this.located(
      conversationId,
      (keys) => this.connection.call("reading a conversation's id index", () => this.redis.contextdIndexedIds(keys.version, keys.header, ...keys.segments, keys.home), conversationId),
      (reply) => reply[0] === "ok" && reply[1] === null,
    );
    if (reply[0] === "corrupt") throw corruptConversation(conversationId, String(reply[1]));
    if (reply[1] === null) return undefined;
    const [, , current, ids, calls] = reply as [string, string, string, string[], string[]];
    const named: Record<string, string> = {};
    for (let index = 0; index + 1 < calls.length; index += 2) named[calls[index]!] = calls[index + 1]!;
    return { ids, calls: named, current: current === "1" };
  }

  /** The decoded states and kept tails this process holds, and the commits that used them (the metrics' gauges). */
  get heldCopies(): HeldCopies {
    const { count, bytes } = this.copies.keptTails;
    const { keptTailCommits, tailReads } = this.commitTraffic;
    return { decodedStates: this.copies.decodedStates, keptTails: { count, bytes }, keptTailCommits, tailReads, prefetch: this.prefetch };
  }

  /** The conversations whose listing entry this process remembers writing: how many, and what they weigh (`--listed-id-bytes`). */
  get listedIds(): { count: number; bytes: number } {
    return { count: this.indexedConversations.size, bytes: this.indexedConversations.keptBytes };
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
    checkWindowQuery(query);
    const copy = this.copies.withLayout(conversationId);
    const segmentIndex = storedSegments.indexOf(query.segment);
    const { reply } = await this.located(conversationId, (keys) => this.connection.call(
      "reading a window of a conversation",
      () =>
        this.redis.contextdWindowBuffer(
          keys.version,
          keys.header,
          ...keys.segments,
          keys.home,
          String(segmentIndex + 1),
          query.end === undefined ? "" : String(query.end),
          String(query.count),
          query.withRest ? "1" : "0",
          query.atVersion === undefined ? "" : String(query.atVersion),
          copy ? String(copy.state.version) : "",
          copy?.layout.created ?? "",
        ),
      conversationId,
    ), (reply) => String(reply[0]) === "ok" && reply[1] === null);
    const outcome = String(reply[0]);
    if (outcome === "corrupt") throw corruptConversation(conversationId, String(reply[1]));
    if (outcome === "moved") throw windowMoved(conversationId, query.atVersion!, storedVersion(conversationId, String(reply[1])));
    if (reply[1] === null) return windowOf(emptyConversationState(conversationId), query);
    const version = storedVersion(conversationId, String(reply[1]));
    if (String(reply[2]) === "cached") {
      this.copies.touch(conversationId);
      return this.copies.heldWindow(copy!.state, query);
    }
    const start = Number(reply[3]);
    const length = Number(reply[4]);
    const items = reply[5] as Buffer[];
    const sealers = this.sealersOf(conversationId, reply[13]);
    const { messages: window, running } =
      query.segment === "history"
        ? this.copies.decodeHistoryWithFacts(conversationId, items, start, String(reply[11]), String(reply[2]), sealers)
        : this.copies.decodeWithFacts(conversationId, items, start, query.segment, sealers);
    const firstBytes = reply[12] as Buffer | null;
    const first = firstBytes === null ? undefined : this.copies.decode(conversationId, [firstBytes], 0, query.segment, this.sealersOf(conversationId, reply[18]))[0];
    let state: ConversationState = { ...emptyConversationState(conversationId), version };
    if (query.withRest) {
      state = { ...this.copies.decodeRest(conversationId, reply[6] as Buffer), conversationId, version };
      storedSegments.forEach((segment, index) => {
        if (index !== segmentIndex) state[segment] = this.copies.decode(conversationId, reply[7 + index] as Buffer[], 0, segment, this.sealersOf(conversationId, reply[14 + index]));
      });
    }
    state[query.segment] = window;
    return { state, start, length, stored: { running, epoch: BigInt(String(reply[11])), first } };
  }

  async currentVersion(conversationId: string): Promise<bigint> {
    const version = await this.connection.call("reading the version", () => this.atHome(conversationId, (keys) => this.redis.get(keys.version), (version) => version === null), conversationId);
    return version === null ? 0n : storedVersion(conversationId, version);
  }

  async list(query: ListQuery): Promise<ConversationPage> {
    requireStorableText("prefix", query.prefix);
    const { prefix } = query;
    const position = positionOf(query);
    const count = entriesToRead(query);
    let positions: ListPosition[];
    if (query.order === "id") {
      const after = position?.conversationId ?? "";
      const lower = after !== "" && after >= prefix ? Buffer.from("(" + after) : Buffer.from("[" + prefix);
      const upper = prefix === "" ? "+" : Buffer.concat([Buffer.from("[" + prefix), Buffer.from([0xff])]);
      const ids = await this.connection.call("listing conversations", () => this.redis.zrangebylex(conversationIndexKey(this.keyPrefix), lower, upper, "LIMIT", 0, count));
      positions = ids.map((conversationId) => ({ conversationId, updatedAtUnixMs: 0n }));
    } else {
      positions = await this.updateOrderAfter(position, count);
    }
    // One read per listed conversation (its version, and its header's listing fields), issued
    // together: on one Redis they leave in one write (see `call`); on a cluster each goes to the
    // master of its conversation's slot. Ids the prefix leaves out are not read.
    const summaries = await this.connection.call("listing conversations", () =>
      Promise.allSettled(positions.map(({ conversationId: id }) => (id.startsWith(prefix) ? this.summaryOf(id) : Promise.resolve(undefined)))),
    );
    const read: ExaminedEntry[] = positions.map((position, index) => {
      const settled = summaries[index]!;
      if (settled.status === "fulfilled") return { position, summary: settled.value };
      // A conversation whose keys are of the wrong type is left out of the listing, so one corrupt
      // conversation does not break every page; reading it answers DATA_LOSS naming it.
      if (isWrongType(settled.reason)) return { position, summary: undefined };
      throw this.connection.failure("listing conversations", settled.reason);
    });
    return pageOf(query, read);
  }

  /**
   * Up to `count` entries of the update order strictly after `position`. While the position's
   * conversation is still where the position says, its rank starts the range: O(log n + count).
   * When a commit has moved it since, the entries of the position's millisecond are sorted by id,
   * and those up to its id are read and passed over (many only if many conversations committed in
   * that one millisecond).
   */
  private async updateOrderAfter(position: ListPosition | undefined, count: number): Promise<ListPosition[]> {
    const key = conversationUpdateIndexKey(this.keyPrefix);
    const entriesOf = (reply: string[], after: ListPosition | undefined) => {
      const entries: ListPosition[] = [];
      for (let index = 0; index + 1 < reply.length; index += 2) {
        const conversationId = reply[index]!;
        const updatedAtUnixMs = BigInt(-Number(reply[index + 1]!));
        if (after && updatedAtUnixMs === after.updatedAtUnixMs && conversationId <= after.conversationId) continue;
        entries.push({ conversationId, updatedAtUnixMs });
      }
      return entries;
    };
    if (position === undefined) {
      return entriesOf(await this.connection.call("listing conversations", () => this.redis.zrange(key, 0, count - 1, "WITHSCORES")), undefined);
    }
    const score = String(-position.updatedAtUnixMs);
    const [rank, stored] = await this.connection.call("listing conversations", () => Promise.all([this.redis.zrank(key, position.conversationId), this.redis.zscore(key, position.conversationId)]));
    if (rank !== null && stored !== null && BigInt(-Number(stored)) === position.updatedAtUnixMs) {
      return entriesOf(await this.connection.call("listing conversations", () => this.redis.zrange(key, rank + 1, rank + count, "WITHSCORES")), undefined);
    }
    const entries: ListPosition[] = [];
    for (let offset = 0; ; offset += count) {
      const reply = await this.connection.call("listing conversations", () => this.redis.zrangebyscore(key, score, "+inf", "WITHSCORES", "LIMIT", offset, count));
      entries.push(...entriesOf(reply, position));
      if (entries.length >= count || reply.length < 2 * count) return entries.slice(0, count);
    }
  }

  /** A conversation's listing entry: undefined for an index entry whose first commit never applied. */
  private async summaryOf(conversationId: string): Promise<ConversationSummary | undefined> {
    const { keys, value: [version, fields] } = await this.atHome(
      conversationId,
      async (keys) => ({ keys, value: await Promise.all([this.redis.get(keys.version), this.redis.hmgetBuffer(keys.header, "created_at_ms", "updated_at_ms", "title", "labels", "expires_at_ms")]) }),
      ({ value: [version] }) => version === null,
    );
    if (version === null || !isVersionText(version)) return undefined;
    const [created, updated, title, labels, expires] = fields as (Buffer | null)[];
    // Listing fields are sealed like the rest of the contents; an empty one was never written.
    const text = (kind: "title" | "labels", stored: Buffer | null | undefined) =>
      !stored || stored.length === 0 ? null : this.values.open(conversationId, kind, stored, () => `the header ${keys.header} field ${kind}`).toString("utf8");
    return summaryOf(conversationId, BigInt(version), storedMs(created?.toString("latin1") ?? null), storedMs(updated?.toString("latin1") ?? null), text("title", title) ?? "", storedLabels(text("labels", labels)), storedMs(expires?.toString("latin1") ?? null));
  }

  async readCalibration(key: CalibrationRecordKey, nowMs: number, bounds: CalibrationBounds): Promise<TokenCorrection | undefined> {
    const keys = calibrationKeys(this.keyPrefix, key.tenant);
    const field = calibrationField(key);
    const stored = await this.connection.call("reading a token calibration", () =>
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
    const reply = await this.connection.call("reporting usage", () =>
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

  /**
   * On one Redis, the fork script makes the fork read its source's segment lists (redis-fork-script.ts):
   * no message is written, on the wire or inside Redis. On a cluster the fork does the same under
   * its source's home, where its keys are beside the source's (redis-scripts.ts, conversationKeys).
   * A fork commits the state through the engine instead for a source that expires (a shared list must outlive every reader: the commit script keeps an
   * expiring conversation out of sharing). Under encryption at rest the shared elements stay sealed
   * for the conversations that sealed them (each list records who sealed which: scriptPrelude's
   * sealersOf, and every read sends it), and only the fork's own values are sealed for it
   * (`sealedForkFields`); into another tenant it goes through the engine (a shared element opens
   * only for its sealer's tenant), as does a fork whose lists would pass `maxSealerRuns`, and every
   * encrypted fork with `--share-encrypted-forks false` (a previous release opens no shared element).
   */
  protected override async forkCurrent(conversationId: string, forkedFrom: ForkOrigin, newConversationId: string): Promise<"copied" | "exists" | "unavailable"> {
    const restSuffix = bufferOf(toBinary(ConversationStateSchema, create(ConversationStateSchema, { conversationId: newConversationId, forkedFrom })));
    if (!this.values.encrypts) return this.forkByScript(conversationId, forkedFrom.version, forkedFrom, newConversationId, [restSuffix], restSuffix.length);
    if (!this.sharesEncryptedForks || tenantOf(conversationId) !== tenantOf(newConversationId)) return "unavailable";
    const sealed = await this.sealedForkFields(conversationId, forkedFrom.version, newConversationId, restSuffix);
    if (sealed === undefined) return "unavailable";
    return this.forkByScript(conversationId, forkedFrom.version, forkedFrom, newConversationId, [sealed.rest, "past", ...sealed.lengths, sealed.title, sealed.labels], restSuffix.length);
  }

  /**
   * Under encryption: the fork at the source's current version as the fork script takes a past
   * one's (redis-fork-script.ts), its rest (the source's with `restSuffix` appended, as the script
   * appends it without encryption), title and labels opened as the source's and sealed for the
   * fork, and each segment's length: 3 values sealed, whatever the message count. Read in one
   * MULTI, so they are of one version; undefined when that is no longer `version` (the fork then
   * answers as a moved source does).
   */
  private async sealedForkFields(conversationId: string, version: bigint, newConversationId: string, restSuffix: Buffer): Promise<{ rest: Buffer; lengths: string[]; title: string | Buffer; labels: string | Buffer } | undefined> {
    const { keys, replies } = await this.connection.call(
      "forking a conversation",
      () =>
        this.atHome(
          conversationId,
          async (keys) => ({ keys, replies: await this.redis.multi().get(keys.version).hmgetBuffer(keys.header, "rest", "title", "labels", ...storedSegments).exec() }),
          ({ replies }) => (replies as [[unknown, string | null]])[0][1] === null,
        ),
      conversationId,
    );
    const [[, stored], [, fields]] = replies as [[unknown, string | null], [unknown, (Buffer | null)[]]];
    if (stored === null || stored !== String(version)) return undefined;
    const [rest, title, labels, ...lengths] = fields;
    if (!rest || lengths.some((length) => length === null)) return undefined;
    const text = (kind: "title" | "labels", value: Buffer | null | undefined, empty: string) =>
      !value || value.length === 0 ? empty : this.values.open(conversationId, kind, value, () => `the header ${keys.header} field ${kind}`).toString("utf8");
    return {
      rest: this.values.seal(newConversationId, "rest", Buffer.concat([this.values.open(conversationId, "rest", rest, () => `the header ${keys.header} field rest`), restSuffix])),
      lengths: lengths.map((length) => length!.toString("latin1")),
      title: this.sealedText(newConversationId, "title", text("title", title, "")),
      labels: this.sealedText(newConversationId, "labels", text("labels", labels, "{}")),
    };
  }

  /**
   * A fork at a past version shares, per segment, the longest prefix of the source's current list
   * it starts with and writes the rest as its own (`StoredCopies.forkTails`), in the fork script:
   * what the changes since changed, not the conversation (a version before appends shares all).
   */
  protected override async forkPast(conversationId: string, forkedFrom: ForkOrigin, newConversationId: string, state: ConversationState, current: bigint): Promise<"copied" | "exists" | "unavailable"> {
    if (this.values.encrypts && (!this.sharesEncryptedForks || tenantOf(conversationId) !== tenantOf(newConversationId))) return "unavailable";
    const latest = await this.load(conversationId);
    if (latest.version !== current) return "unavailable";
    const tails = this.copies.forkTails(newConversationId, latest, state);
    const forked = create(ConversationStateSchema, { conversationId: newConversationId, forkedFrom });
    const rest = Buffer.concat([bufferOf(this.codec.encodeStateRest(state)), bufferOf(toBinary(ConversationStateSchema, forked))]);
    return this.forkByScript(conversationId, current, forkedFrom, newConversationId, [
      this.values.seal(newConversationId, "rest", rest),
      "past",
      ...tails.map((tail) => String(tail.shared)),
      this.sealedText(newConversationId, "title", state.title),
      this.sealedText(newConversationId, "labels", JSON.stringify(state.labels)),
      ...forkTailArguments(tails),
    ]);
  }

  /**
   * The fork script, expecting the source at `sourceVersion`; `restAndPast`: its rest argument,
   * then what a past version's fork adds; `remembered`: for a fork at the current version, the
   * bytes it adds to the source's rest (the fork's copy is then the source's).
   */
  private async forkByScript(conversationId: string, sourceVersion: bigint, forkedFrom: ForkOrigin, newConversationId: string, restAndPast: (string | Buffer)[], remembered?: number): Promise<"copied" | "exists" | "unavailable"> {
    const source = await this.connection.call("forking a conversation", () => this.atHome(conversationId, async (keys) => keys, () => false), conversationId);
    // On a cluster the fork lives under its source's home, claimed first (redis-scripts.ts, conversationKeys).
    const homeId = this.redis instanceof Cluster ? (source.homeId ?? conversationId) : undefined;
    if (homeId !== undefined) {
      const own = conversationKeys(this.keyPrefix, newConversationId);
      const claim = await this.connection.call("claiming a fork's home", () => this.redis.contextdClaimHome(own.version, own.header, ...own.segments, own.changes, own.home, homeId), newConversationId);
      if (claim[0] === "corrupt") throw corruptConversation(newConversationId, String(claim[1]));
      if (claim[0] === "exists") return "exists";
      if (claim[0] !== "ok") return "unavailable";
    }
    const target = conversationKeys(this.keyPrefix, newConversationId, homeId);
    const now = this.now();
    const change = this.values.seal(newConversationId, "change", toBinary(ChangeSchema, create(ChangeSchema, { conversationId: newConversationId, version: 1n, committedAtUnixMs: BigInt(now), forkedFrom })));
    // The fork script writes no idempotency record and so purges none: the records an earlier,
    // expired conversation under the new id left go first (only while it has no version; a
    // commit that gives it one makes the fork answer "exists").
    await this.sweepIdempotencyRecords([newConversationId], () => target);
    const [rest, ...past] = restAndPast;
    const created = randomUUID();
    const reply = await this.connection.call(
      "forking a conversation",
      () =>
        this.redis.contextdFork(
          source.version,
          source.header,
          ...source.segments,
          target.version,
          target.header,
          ...target.segments,
          target.changes,
          source.home,
          String(sourceVersion),
          created,
          rest!,
          change,
          String(now),
          String(this.maxChanges),
          this.values.encrypts ? String(maxSealerRuns) : "0",
          // As one array (ioredis flattens it), not spread: a fork's own messages may be 100,000.
          past,
        ),
      conversationId,
    );
    const outcome = String(reply[0]);
    if (outcome === "corrupt") throw corruptConversation(conversationId, String(reply[1]));
    if (outcome === "invalid") {
      if (homeId !== undefined) await this.unhome(newConversationId, homeId);
      throw new ConnectError(`the fork script refused its arguments (this sidecar's bug): ${String(reply[1])}`, Code.Internal);
    }
    if (outcome === "exists") return "exists";
    // "moved", or "home" for a source whose pointer was written since it was read: the engine
    // forks, under the own tag (a first commit cannot go under a home), so the claim goes first.
    if (outcome !== "ok") {
      if (homeId !== undefined) await this.unhome(newConversationId, homeId);
      return "unavailable";
    }
    if (homeId !== undefined) {
      // A commit that created the conversation under its own tag meanwhile removed the claim: the
      // fork under the home goes, and the engine answers (the conversation exists).
      const pointer = await this.connection.call("checking a fork's home", () => this.redis.get(conversationKeys(this.keyPrefix, newConversationId).home), newConversationId);
      if (pointer !== homeId) {
        await this.connection.call("removing a fork that lost its home", () =>
          this.redis.contextdDelete(target.version, target.header, ...target.segments, target.changes, target.previousIds, target.previousCalls, target.idempotencyRecords, target.home, ""),
        );
        return "unavailable";
      }
      this.homes.set(newConversationId, homeId);
    }
    await Promise.all([
      this.writeIndexEntry(newConversationId),
      this.redis.zadd(conversationUpdateIndexKey(this.keyPrefix), "LT", String(-now), newConversationId).catch(() => undefined),
    ]);
    if (remembered !== undefined) this.copies.rememberFork(forkedFrom, newConversationId, created, remembered);
    return "copied";
  }

  /**
   * Who sealed each of a read's entries (`Sealers`), from the runs a script sent with them
   * (scriptPrelude's segmentSealers: count and hash tag pairs, '' the reader): undefined without
   * encryption, where no value names its sealer, and when every entry is the reader's.
   */
  private sealersOf(conversationId: string, runs: unknown): Sealers | undefined {
    if (!this.values.encrypts || !Array.isArray(runs) || runs.length === 0) return undefined;
    const sealers: (string | undefined)[] = [];
    let others = false;
    for (let index = 0; index + 1 < runs.length; index += 2) {
      const tag = String(runs[index + 1]);
      const sealer = tag === "" ? undefined : conversationIdOfTag(tag);
      const by = sealer === conversationId ? undefined : sealer;
      if (by !== undefined) others = true;
      for (let count = Number(runs[index]); count > 0; count--) sealers.push(by);
    }
    return others ? sealers : undefined;
  }

  watch(conversationId: string, fromVersion: bigint, signal: AbortSignal): AsyncIterable<Change> {
    return this.watchAtHome(conversationId, fromVersion, signal);
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
    else await this.connection.call("checking that Redis takes writes", () => this.redis.contextdWriteProbe());
    const refused = this.refusedForMemory;
    if (refused === undefined) return;
    for (const master of this.connection.masters()) {
      const info = await this.connection.call("checking Redis's memory", () => master.info("memory"));
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
    if (cluster.status !== "ready") throw this.connection.unavailable("checking the cluster", new Error(`the cluster client is ${cluster.status}`));
    const masters = cluster.nodes("master");
    if (masters.length === 0) throw this.connection.unavailable("checking the cluster", new Error("the cluster client knows no master"));
    try {
      const info = await this.connection.call("checking the cluster's state", () => masters[0]!.cluster("INFO"));
      const state = /^cluster_state:(\w+)/m.exec(String(info))?.[1];
      if (state !== "ok") throw this.connection.unavailable("checking the cluster's state", new Error(`cluster_state is ${state ?? "missing"}: not every slot has a reachable master`));
      await Promise.all(masters.map((master) => this.connection.call(`checking that ${master.options.host}:${master.options.port} takes writes`, () => master.eval(writeProbeScript, 0))));
    } catch (error) {
      cluster.refreshSlotsCache();
      throw error;
    }
  }

  /**
   * Deletes the conversation's keys in one script (after the expected-version check), then its
   * listing entries, which live in other Cluster slots: a listing skips an entry without a
   * version meanwhile, and a failed removal is retried by the expiry sweep's next pass only for
   * expiring conversations, so it is awaited and reported.
   */
  async delete(conversationId: string, expectedVersion: bigint | undefined): Promise<bigint> {
    const { reply, keys } = await this.located(
      conversationId,
      (keys) =>
        this.connection.call(
          "deleting a conversation",
          () => this.redis.contextdDelete(keys.version, keys.header, ...keys.segments, keys.changes, keys.previousIds, keys.previousCalls, keys.idempotencyRecords, keys.home, expectedVersion === undefined ? "" : String(expectedVersion)),
          conversationId,
        ),
      (reply) => reply[1] === "0",
    );
    const outcome = String(reply[0]);
    if (outcome === "corrupt") throw corruptConversation(conversationId, String(reply[1]));
    const current = storedVersion(conversationId, String(reply[1]));
    if (outcome === "conflict") throw versionConflict(conversationId, expectedVersion!, current);
    // The pointer goes after the keys it leads to: a process sent there meanwhile finds nothing and asks the own tag again.
    if (keys.homeId !== undefined) await this.unhome(conversationId, keys.homeId);
    this.copies.forget(conversationId);
    this.indexedConversations.delete(conversationId);
    await this.connection.call("deleting a conversation's listing entries", () => this.removeListingEntries([conversationId]));
    await this.usage.forget([conversationId]);
    return current;
  }

  /** The idempotency records of expired conversations (one script per conversation: each is its own slot), unless one was committed to again. */
  private async sweepIdempotencyRecords(conversationIds: string[], keysOf = (id: string) => this.keys(id)): Promise<void> {
    const replies = await this.connection.call("sweeping expired conversations' idempotency records", () =>
      Promise.all(conversationIds.map((id) => { const keys = keysOf(id); return this.redis.contextdSweepIdempotency(keys.version, keys.idempotencyRecords, keys.home); })),
    );
    replies.forEach((reply, index) => {
      if (reply[0] === "corrupt") throw corruptConversation(conversationIds[index]!, String(reply[1]));
      // A home's answer: the records are there, and this process learnt where.
      if (reply[0] === "home") this.homes.set(conversationIds[index]!, String(reply[1]));
    });
  }

  /**
   * Sets a conversation's entry in the expiry index to `expiresAtUnixMs` (0n: removes it). Written
   * beside a commit, not in its script (another Cluster slot), and not failing it: a write that
   * fails is kept in `unwrittenExpiryEntries` and written again by the next sweep, until a later
   * write for the conversation succeeds. Without that, a conversation whose last commit lost its
   * entry (a command timeout, a failover) left its listing entries, ledger and idempotency
   * records in Redis for good after Redis expired its keys.
   */
  private writeExpiryEntry(conversationId: string, expiresAtUnixMs: bigint): Promise<void> {
    const index = conversationExpiryIndexKey(this.keyPrefix);
    const writing = expiresAtUnixMs > 0n ? this.redis.zadd(index, String(expiresAtUnixMs), conversationId) : this.redis.zrem(index, conversationId);
    return writing.then(
      () => this.unwrittenExpiryEntries.delete(conversationId),
      () => this.unwrittenExpiryEntries.set(conversationId, expiresAtUnixMs),
    );
  }

  /** Writes again up to `expirySweepBatch` of the expiry entries whose write failed (`writeExpiryEntry`), the oldest first. */
  private async rewriteExpiryEntries(): Promise<void> {
    const unwritten: [string, bigint][] = [];
    for (const entry of this.unwrittenExpiryEntries.oldestFirst()) {
      if (unwritten.push(entry) === expirySweepBatch) break;
    }
    await Promise.all(unwritten.map(([conversationId, expiresAtUnixMs]) => this.writeExpiryEntry(conversationId, expiresAtUnixMs)));
  }

  private removeListingEntries(conversationIds: string[]): Promise<unknown> {
    return Promise.all([
      this.redis.zrem(conversationIndexKey(this.keyPrefix), ...conversationIds),
      this.redis.zrem(conversationUpdateIndexKey(this.keyPrefix), ...conversationIds),
      this.redis.zrem(conversationExpiryIndexKey(this.keyPrefix), ...conversationIds),
    ]);
  }

  /**
   * Removes the idempotency records, usage ledgers and listing entries of conversations whose keys
   * Redis expired: batches of `expirySweepBatch` from the expiry index, soonest first, each a few
   * commands (an entry whose
   * conversation was committed to again in between still has its version key and is kept), up to
   * `expirySweepBatches` batches per pass. Returns how many entries went.
   */
  async sweepExpired(): Promise<number> {
    if (this.sweeping) return 0;
    this.sweeping = true;
    try {
      await this.rewriteExpiryEntries();
      let removed = 0;
      for (let batch = 0; batch < expirySweepBatches; batch++) {
        const due = await this.connection.call("sweeping expired conversations", () =>
          this.redis.zrangebyscore(conversationExpiryIndexKey(this.keyPrefix), "-inf", String(this.now()), "LIMIT", 0, expirySweepBatch),
        );
        if (due.length === 0) break;
        // PEXPIRETIME: -2 for a key that is gone, -1 for one without expiry, else when it expires.
        const versions = await this.connection.call("sweeping expired conversations", () =>
          Promise.all(due.map((id) => this.atHome(id, async (keys) => ({ keys, expiresAt: await this.redis.pexpiretime(keys.version) }), ({ expiresAt }) => expiresAt === -2))),
        );
        const gone = due.filter((_, index) => versions[index]!.expiresAt === -2);
        // An entry due for a conversation that lives on (its later commit's entry write was lost,
        // or it was committed to since this batch was read) takes the expiry its version key has:
        // left due, 100 of them filled every batch, and no expired conversation behind them was
        // ever swept. GT: never earlier than a commit's write meanwhile. One whose keys no longer
        // expire leaves the index (a commit that sets a TTL right then writes its entry again next time).
        const living = due.flatMap((id, index) => (versions[index]!.expiresAt === -1 || versions[index]!.expiresAt > this.now() ? [{ id, expiresAt: versions[index]!.expiresAt }] : []));
        if (living.length > 0) {
          const index = conversationExpiryIndexKey(this.keyPrefix);
          await this.connection.call("sweeping expired conversations", () =>
            Promise.all(living.map(({ id, expiresAt }) => (expiresAt === -1 ? this.redis.zrem(index, id) : this.redis.zadd(index, "GT", String(expiresAt), id)))),
          );
        }
        if (gone.length > 0) {
          // The records where the keys were (a fork's under its home), then an expired fork's
          // pointer (while it still names that home); the expiry index's entries go last: a pass
          // that fails before finds these ids again.
          const located = new Map(due.map((id, index) => [id, versions[index]!.keys]));
          await this.sweepIdempotencyRecords(gone, (id) => located.get(id)!);
          await Promise.all(versions.map(({ keys, expiresAt }, index) => (expiresAt === -2 && keys.homeId !== undefined ? this.unhome(due[index]!, keys.homeId) : undefined)));
          await this.usage.forget(gone);
          await this.connection.call("sweeping expired conversations", () => this.removeListingEntries(gone));
        }
        removed += gone.length;
        if (due.length < expirySweepBatch || gone.length + living.length === 0) break;
      }
      return removed;
    } finally {
      this.sweeping = false;
    }
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.followed.clear();
    this.stopNoticeSlotRefresh?.();
    this.noticeSubscriber?.disconnect();
    this.changes.close();
    this.redis.disconnect();
  }

  /** Where the conversation's keys are as this process knows: under its remembered home, else its own tag. */
  private keys(conversationId: string): ConversationKeys {
    requireStorableKey("conversation_id", conversationId, stringLimits.id);
    return conversationKeys(this.keyPrefix, conversationId, this.homes.get(conversationId));
  }

  /** The channel of the conversation's commit notices: named after its own tag wherever its keys are, so every process agrees. */
  private noticeChannelOf(conversationId: string): string {
    requireStorableKey("conversation_id", conversationId, stringLimits.id);
    return conversationKeys(this.keyPrefix, conversationId).changes;
  }

  /**
   * Runs a script on the keys where the conversation lives (redis-scripts.ts, conversationKeys):
   * follows a {'home', id} answer to the home it names, and a remembered home whose reply is
   * `absent` (the conversation no longer lives there) back to the own tag: at most three runs.
   */
  private async located<R extends readonly unknown[]>(conversationId: string, run: (keys: ConversationKeys) => Promise<R>, absent: (reply: R) => boolean): Promise<{ reply: R; keys: ConversationKeys }> {
    let keys = this.keys(conversationId);
    let pointed = false;
    for (;;) {
      const reply = await run(keys);
      if (String(reply[0]) === "home") {
        const homeId = String(reply[1]);
        if (pointed || keys.homeId !== undefined || homeId === conversationId) throw corruptConversation(conversationId, `its home pointer ${keys.home} names "${homeId.slice(0, 80)}", where its keys are not`);
        // Not this.keys: the memo may not keep it (an id over --listed-id-bytes).
        this.homes.set(conversationId, homeId);
        keys = conversationKeys(this.keyPrefix, conversationId, homeId);
        pointed = true;
        continue;
      }
      if (keys.homeId !== undefined && !pointed && absent(reply)) {
        this.homes.delete(conversationId);
        keys = this.keys(conversationId);
        continue;
      }
      return { reply, keys };
    }
  }

  /**
   * `located` for reads outside the scripts: on a cluster, without a remembered home, the pointer
   * is read beside the own keys (one round trip) and a pointer found sends the read to its home.
   * Only forks on a cluster have pointers (forkByScript), so one Redis reads its own keys.
   */
  private async atHome<T>(conversationId: string, read: (keys: ConversationKeys) => Promise<T>, absent: (value: T) => boolean): Promise<T> {
    const keys = this.keys(conversationId);
    if (!(this.redis instanceof Cluster)) return read(keys);
    if (keys.homeId !== undefined) {
      const value = await read(keys);
      if (!absent(value)) return value;
      this.homes.delete(conversationId);
      return this.atHome(conversationId, read, absent);
    }
    const [homeId, value] = await Promise.all([this.redis.get(keys.home), read(keys)]);
    if (homeId === null) return value;
    this.homes.set(conversationId, homeId);
    return read(conversationKeys(this.keyPrefix, conversationId, homeId));
  }

  /** Removes the conversation's home pointer while it names `homeId` (redis-scripts.ts, unhomeScript). */
  private async unhome(conversationId: string, homeId: string): Promise<void> {
    this.homes.delete(conversationId);
    await this.connection.call("removing a fork's home pointer", () => this.redis.contextdUnhome(conversationKeys(this.keyPrefix, conversationId).home, homeId), conversationId);
  }

  /** `watch` on the keys where the conversation lives when it starts. */
  private async *watchAtHome(conversationId: string, fromVersion: bigint, signal: AbortSignal): AsyncIterable<Change> {
    const keys = await this.connection.call("watching a conversation", () => this.atHome(conversationId, async (keys) => keys, () => false), conversationId);
    yield* this.changes.watch(conversationId, keys, fromVersion, signal);
  }

  /**
   * Reads the state and, for a non-empty key, the idempotency record, in one round trip. Only
   * what the cached copy lacks crosses the wire: nothing when the stored version is the cached
   * one, the new tail of each list that only grew since, and whole only the lists rewritten since
   * (or everything, without a usable cached copy).
   */
  private async read(conversationId: string, idempotencyKey: string): Promise<CommitRead> {
    const copy = this.copies.withLayout(conversationId);
    const layout = copy?.layout;
    const { reply } = await this.located(conversationId, (keys) => this.connection.call(
      "loading a conversation",
      () =>
        this.redis.contextdLoadBuffer(
          keys.version,
          keys.header,
          ...keys.segments,
          keys.idempotency(idempotencyKey),
          keys.home,
          idempotencyKey === "" ? "0" : "1",
          copy ? String(copy.state.version) : "",
          layout?.created ?? "",
          layout?.restAt ?? "",
          ...storedSegments.flatMap((_, index) => (layout ? [layout.segments[index]!.at, String(layout.segments[index]!.length)] : ["", ""])),
        ),
      conversationId,
    ), (reply) => String(reply[0]) === "ok" && reply[1] === null);
    if (String(reply[0]) === "corrupt") throw corruptConversation(conversationId, String(reply[1]));
    const [, versionBytes, fingerprint, recorded] = reply;
    const record = fingerprint && recorded ? { fingerprint: String(fingerprint), version: storedVersion(conversationId, String(recorded)) } : undefined;
    if (versionBytes === null) {
      this.copies.forget(conversationId);
      this.indexedConversations.delete(conversationId);
      return { state: emptyConversationState(conversationId), record };
    }
    const version = storedVersion(conversationId, String(versionBytes));
    if (reply.length === 4) {
      // The script answers this short only for the cached version.
      this.copies.touch(conversationId);
      return { state: copy!.state, record };
    }
    const received: ReceivedSegment[] = storedSegments.map((_, index) => ({
      at: String(reply[7 + 4 * index]),
      from: Number(reply[8 + 4 * index]),
      items: reply[9 + 4 * index] as Buffer[],
      sealers: this.sealersOf(conversationId, reply[10 + 4 * index]),
    }));
    const header = { created: String(reply[4]), restAt: String(reply[5]), rest: reply[6] as Buffer | null };
    return { state: this.copies.assemble(conversationId, version, header, received, copy?.state), record };
  }

  /** `read` for a commit: a replay is answered as applied only once the original's writes are on the replicas too. */
  private async readForCommit(conversationId: string, idempotencyKey: string): Promise<CommitRead> {
    const before = this.copies.copy(conversationId);
    const read = await this.read(conversationId, idempotencyKey);
    if (before !== undefined && read.state !== before && read.state.version > 0n) this.followed.othersWrote(conversationId);
    if (read.record && this.replicas.waitReplicas > 0) {
      this.replicas.requireReplicated(conversationId, read.record.version, await this.replicas.replicasAcknowledging(this.keys(conversationId)));
    }
    return read;
  }

  /** `readTail` for a commit: a kept tail found behind means another process writes the conversation. */
  private async readTailForCommit(conversationId: string, idempotencyKey: string, callIds: readonly string[]): Promise<TailRead> {
    const kept = this.copies.keptTail(conversationId);
    const read = await this.readTail(conversationId, idempotencyKey, callIds);
    if (kept !== undefined && read.version !== kept.state.version && read.version > 0n) this.followed.othersWrote(conversationId);
    return read;
  }

  /**
   * What a commit planned on the stored tail reads (`commitTailScript`), widening the window while
   * it holds only tool results; a conversation never written comes back whole.
   */
  private async readTail(conversationId: string, idempotencyKey: string, callIds: readonly string[]): Promise<TailRead> {
    for (let count = tailWindowMessages; ; count *= 8) {
      const { reply, keys } = await this.located(
        conversationId,
        (keys) =>
          this.connection.call(
            "reading a conversation's tail",
            () => this.redis.contextdCommitTailBuffer(keys.version, keys.header, ...keys.segments, keys.idempotency(idempotencyKey), keys.home, idempotencyKey === "" ? "0" : "1", String(count), ...callIds),
            conversationId,
          ),
        (reply) => String(reply[0]) === "ok" && reply[1] === null,
      );
      if (String(reply[0]) === "corrupt") throw corruptConversation(conversationId, String(reply[1]));
      const [, versionBytes, fingerprint, recorded] = reply;
      const record = fingerprint && recorded ? { fingerprint: String(fingerprint), version: storedVersion(conversationId, String(recorded)) } : undefined;
      if (record && this.replicas.waitReplicas > 0) {
        this.replicas.requireReplicated(conversationId, record.version, await this.replicas.replicasAcknowledging(keys));
      }
      if (versionBytes === null) {
        this.indexedConversations.delete(conversationId);
        return { version: 0n, record, whole: emptyConversationState(conversationId) };
      }
      const version = storedVersion(conversationId, String(versionBytes));
      if (String(reply[7]) !== "1") {
        this.markIdIndexStale(conversationId);
        return { version, record };
      }
      const received = storedSegments.map((_, index) => ({
        at: String(reply[8 + 5 * index]),
        length: Number(reply[9 + 5 * index]),
        from: Number(reply[10 + 5 * index]),
        items: reply[11 + 5 * index] as Buffer[],
        sealers: this.sealersOf(conversationId, reply[12 + 5 * index]),
      }));
      const header = { created: String(reply[4]), restAt: String(reply[5]), rest: reply[6] as Buffer | null };
      const tail = this.copies.tailOf(conversationId, version, header, received);
      if (tail === "wider" && count * 8 <= maxTailWindowMessages) continue;
      if (tail === "wider" || tail === undefined) return { version, record };
      const names = reply[28] as (Buffer | null)[];
      const headCallNames = new Map(callIds.map((id, index) => [id, names[index] == null ? undefined : String(names[index])]));
      this.copies.keepTail(tail);
      return { version, record, tail: { ...tail, headCallNames } };
    }
  }

  /**
   * The engine's write: the commit script (with `WAIT` behind it under `--redis-wait-replicas`) and
   * the listing entry beside it. A plan on `tail` is written after the stored head and kept as the
   * conversation's tail, not as its copy (kept-tails.ts). The id index (stored-id-index.ts) is written whole when a read or write found it stale.
   */
  private async write(
    conversationId: string,
    base: ConversationState,
    plan: CommitPlan,
    idempotencyKey: string,
    fingerprint: string,
    tail: CommitTail | undefined,
  ): Promise<CommitWrite> {
    const write = tail ? this.copies.writeOfTail(tail, plan.state) : this.copies.writeOf(base, plan.state);
    const { metadata } = plan;
    const call: CommitScriptCall = {
      idempotencyKey,
      expectedVersion: base.version,
      change: this.values.seal(conversationId, "change", toBinary(ChangeSchema, plan.change)),
      fingerprint,
      idempotencyTtlSeconds: this.idempotencyTtlSeconds,
      maxChanges: this.maxChanges,
      created: write.created,
      rest: write.rest,
      updatedAtUnixMs: metadata.updatedAtUnixMs,
      metadata: metadata.changed
        ? { title: this.sealedText(conversationId, "title", metadata.title), labels: this.sealedText(conversationId, "labels", JSON.stringify(metadata.labels)) }
        : undefined,
      segments: write.segments,
      idIndex: idIndexArguments(idIndexChanges(base, plan.state, this.lineage, tail ? "t" : this.staleIdIndexes.get(conversationId) === true ? "b" : "a")),
      expiresAtUnixMs: metadata.expiresAtUnixMs > 0n || metadata.expiryDropped ? metadata.expiresAtUnixMs : undefined,
    };
    let acknowledgedBy = 0;
    const runCommit = (keys: ConversationKeys) =>
      this.connection
        .call("committing", () => this.replicas.runCommitScript(...commitScriptArguments(keys, call)), conversationId)
        .then((result) => {
          acknowledgedBy = result.acknowledged;
          return result.reply;
        })
        .catch((error: unknown) => {
          if (error instanceof ConnectError && error.code === Code.ResourceExhausted) {
            this.refusedForMemory = { bytes: write.bytes + call.change.length, message: error.rawMessage };
          }
          throw error;
        });
    // A first commit sent to a home that holds no conversation under the id (its fork deleted or
    // expired, or a fork that has claimed the id but not written it yet) removes the pointer and
    // commits under the own tag (redis-scripts.ts, conversationKeys); a second such answer is a
    // fork claiming the id again meanwhile, answered as a conflict (the engine reads again).
    const committing = (async () => {
      let located = await this.located(conversationId, runCommit, (reply) => String(reply[0]) === "unhomed");
      if (String(located.reply[0]) === "unhomed") {
        await this.unhome(conversationId, located.keys.homeId!);
        located = await this.located(conversationId, runCommit, (reply) => String(reply[0]) === "unhomed");
      }
      return { reply: located.reply, acknowledged: acknowledgedBy };
    })();
    // The index entry is written beside the script, not in it (the index key is in another
    // Cluster slot); issued in the same event-loop iteration (see `call`), both leave in one
    // write. A failed index write does not fail a commit that applied: the entry is retried on
    // the next commit, and listing skips ids whose commit did not apply.
    const indexing = (this.indexedConversations.get(conversationId) ?? 0) > this.now() ? undefined : this.writeIndexEntry(conversationId);
    // The update order's entry moves with every commit, so it is written every time (LT: an older
    // commit's late write never moves it back); a lost write leaves it at its previous time until
    // the next commit, and a listing reports the header's time.
    const ordering = this.redis.zadd(conversationUpdateIndexKey(this.keyPrefix), "LT", String(-metadata.updatedAtUnixMs), conversationId).catch(() => undefined);
    // The expiry index says when to look for the entries of a conversation Redis expired.
    const expiring = metadata.expiresAtUnixMs > 0n || metadata.expiryDropped ? this.writeExpiryEntry(conversationId, metadata.expiresAtUnixMs) : undefined;
    const { reply, acknowledged } = await committing;
    await indexing;
    await ordering;
    await expiring;
    const outcome = String(reply[0]);
    if (outcome === "ok") {
      if (!tail) this.copies.remember(plan.state, write.layout);
      else this.copies.keepWrittenTail(tail, plan.state, write.layout);
      if (reply[2] !== undefined && String(reply[2]) === "unindexed") this.markIdIndexStale(conversationId);
      else this.staleIdIndexes.delete(conversationId);
      this.replicas.requireReplicated(conversationId, plan.state.version, acknowledged);
      if (this.followed.committed(conversationId)) this.publishNotice(this.noticeChannelOf(conversationId), plan.state.version);
      return { outcome: "ok" };
    }
    if (outcome === "replay") {
      const record = { fingerprint: String(reply[1]), version: storedVersion(conversationId, String(reply[2])) };
      if (record.fingerprint === fingerprint) this.replicas.requireReplicated(conversationId, record.version, acknowledged);
      return { outcome: "replay", record, current: storedVersion(conversationId, String(reply[3])) };
    }
    // Not written: a tail kept at the base is behind (or refused); the next commit reads the tail afresh.
    if (tail) this.copies.dropTail(conversationId);
    if (outcome === "corrupt") throw corruptConversation(conversationId, String(reply[1]));
    if (outcome === "unindexed") this.markIdIndexStale(conversationId);
    if (outcome === "unindexed" || outcome === "taken") return { outcome: "whole" };
    if (outcome === "unhomed") return { outcome: "conflict", current: 0n };
    if (outcome === "invalid") throw new ConnectError(`redis store: the commit script refused its arguments: ${String(reply[1])}`, Code.Internal);
    const current = storedVersion(conversationId, String(reply[1]));
    // The stored lists are not those of the cached state at its version (written behind this
    // process's back): forget the copy and read the stored state whole.
    if (outcome === "stale") {
      this.copies.forget(conversationId);
      return { outcome: "stale", current };
    }
    // "conflict": another writer committed between our read and our script; the next read
    // catches the cached copy up.
    this.followed.othersWrote(conversationId);
    return { outcome: "conflict", current };
  }

  /** A listing field as the header keeps it: sealed under encryption, as it is otherwise (an empty title too). */
  private sealedText(conversationId: string, kind: "title" | "labels", text: string): string | Buffer {
    return this.values.encrypts ? this.values.seal(conversationId, kind, Buffer.from(text, "utf8")) : text;
  }

  /** Remembers that the conversation's stored id index is stale: this process's next commit to it writes it whole. */
  private markIdIndexStale(conversationId: string): void {
    this.staleIdIndexes.set(conversationId, true);
  }

  /** Adds the conversation to the listing index; resolves (never rejects) once Redis answered. */
  private async writeIndexEntry(conversationId: string): Promise<void> {
    try {
      await this.redis.zadd(conversationIndexKey(this.keyPrefix), 0, conversationId);
    } catch {
      return;
    }
    this.indexedConversations.set(conversationId, this.now() + this.indexRefreshMs);
  }
}

/** A header's time field: 0 when absent (written before it was kept) or not a count. */
function storedMs(text: string | null): bigint {
  return text !== null && /^\d{1,16}$/.test(text) ? BigInt(text) : 0n;
}

/** A header's labels (a JSON object of strings); none when absent or not such an object. */
function storedLabels(text: string | null): Record<string, string> {
  if (text === null || text === "") return {};
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return {};
    return Object.fromEntries(Object.entries(parsed).filter((entry): entry is [string, string] => typeof entry[1] === "string"));
  } catch {
    return {};
  }
}
