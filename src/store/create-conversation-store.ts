import { randomUUID } from "node:crypto";
import type { Codec } from "../codec/codec.js";
import type { ConversationExpiry } from "./conversation-expiry.js";
import type { ConversationStore } from "./conversation-store.js";
import type { HistoryBound } from "./history-bound.js";
import { plainValues, type StoredValues } from "./at-rest-encryption.js";
import { defaultDecodedStateBytes } from "./decoded-state-cache.js";
import { defaultKeptTailBytes } from "./kept-tails.js";
import { defaultPrefetchConversations } from "./followed-conversations.js";
import { defaultListedIdBytes } from "./recent-ids.js";
import { MemoryConversationStore } from "./memory-conversation-store.js";
import { PostgresConversationStore } from "./postgres-conversation-store.js";
import { RedisConversationStore } from "./redis-conversation-store.js";
import type { HistoryLimits } from "./version-history.js";

/** Where a Redis store runs beside its URL: a cluster's seed nodes, and the replica acknowledgement of commits. */
export interface RedisDeployment {
  /** Seed nodes of a Redis Cluster (host:port or redis[s]:// URLs); when given, the URL is empty. */
  clusterNodes?: readonly string[];
  /** PEM of the CAs that signed the servers' certificates (rediss://); undefined = the system's. */
  tlsCa?: string;
  waitReplicas?: number;
  waitTimeoutMs?: number;
  /** `--redis-command-timeout-ms` (`RedisStoreOptions.commandTimeoutMs`). */
  commandTimeoutMs?: number;
}

/** How long conversations live (`--idle-ttl-ms`, `--idle-ttl-per-tenant`), how often the expired are swept (`--expiry-sweep-ms`), and the default prune (`--prune-*`). */
export interface StoreRetention {
  expiry?: ConversationExpiry;
  expirySweepMs?: number;
  historyBound?: HistoryBound;
}

/** How much change log every store keeps (`--history-retention-versions`) and what one history read may cost. */
export interface HistoryOptions {
  maxChangesPerConversation?: number;
  historyLimits?: HistoryLimits;
}

/** What `createConversationStore` builds a store from; every field but `codec` has a default. */
export interface ConversationStoreSettings {
  codec: Codec;
  /** Redis URL; none (and no `redis.clusterNodes`, no `postgresUrl`) = the in-memory store. */
  redisUrl?: string;
  redis?: RedisDeployment;
  postgresUrl?: string;
  /** How long to wait for the first connection (5 s). */
  connectTimeoutMs?: number;
  /** `--strict-tool-rounds`: commits refuse the tool-round pairing rules. */
  strictToolRounds?: boolean;
  /** `--decoded-state-bytes`: what the Redis and Postgres stores' decoded states may weigh. */
  decodedStateBytes?: number;
  /** `--kept-tail-bytes`: what the Redis and Postgres stores' kept tails may weigh (kept-tails.ts). */
  keptTailBytes?: number;
  /** `--prefetch-conversations`: most conversations the Redis (Cluster too) and Postgres stores follow for commit notices (followed-conversations.ts). */
  prefetchConversations?: number;
  /** `--listed-id-bytes`: what the Redis store's memo of conversations it put in the listing index may weigh (recent-ids.ts). */
  listedIdBytes?: number;
  /** `--encryption-key-file`: how the Redis and Postgres stores keep contents; the memory store holds nothing outside the process and takes none. */
  values?: StoredValues;
  /** `--share-encrypted-forks`: under encryption, the Redis and Postgres stores' forks share stored messages (default) or write them all again. */
  shareEncryptedForks?: boolean;
  retention?: StoreRetention;
  history?: HistoryOptions;
}

/**
 * The store for a configured Postgres URL, Redis URL or Redis Cluster: none = the embedded in-memory store.
 * Waits up to `connectTimeoutMs` for the first connection; if Redis is not reachable yet the store
 * is returned anyway, answers UNAVAILABLE (and `ping` fails, so health says NOT_SERVING) and keeps
 * reconnecting in the background.
 */
export async function createConversationStore({
  codec,
  redisUrl = "",
  redis = {},
  postgresUrl = "",
  connectTimeoutMs = 5_000,
  strictToolRounds = false,
  decodedStateBytes = defaultDecodedStateBytes,
  keptTailBytes = defaultKeptTailBytes,
  prefetchConversations = defaultPrefetchConversations,
  listedIdBytes = defaultListedIdBytes,
  values = plainValues,
  shareEncryptedForks = true,
  retention = {},
  history = {},
}: ConversationStoreSettings): Promise<ConversationStore> {
  // How every store applies deltas: random ids for messages without one, and the tool-round rules.
  const deltaContext = { newMessageId: () => randomUUID(), strictToolRounds };
  // Postgres: the same, and the schema is created or migrated on the first connection.
  if (postgresUrl !== "") {
    const store = new PostgresConversationStore(postgresUrl, { codec, deltaContext, cacheBytes: decodedStateBytes, keptTailBytes, prefetchConversations, listedIdBytes, values, shareEncryptedForks, ...retention, ...history });
    await store.connected(connectTimeoutMs);
    return store;
  }
  const clusterNodes = redis.clusterNodes ?? [];
  if (redisUrl === "" && clusterNodes.length === 0) return new MemoryConversationStore({ codec, deltaContext, ...retention, ...history });
  const store = new RedisConversationStore(clusterNodes.length > 0 ? { clusterNodes } : redisUrl, {
    codec,
    deltaContext,
    cacheBytes: decodedStateBytes,
    keptTailBytes,
    prefetchConversations,
    listedIdBytes,
    values,
    shareEncryptedForks,
    ...history,
    waitReplicas: redis.waitReplicas,
    waitTimeoutMs: redis.waitTimeoutMs,
    ...(redis.commandTimeoutMs !== undefined ? { commandTimeoutMs: redis.commandTimeoutMs } : {}),
    ...retention,
    ...(redis.tlsCa !== undefined ? { tlsCa: redis.tlsCa } : {}),
  });
  await store.connected(connectTimeoutMs);
  return store;
}
