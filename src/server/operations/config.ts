import { readFileSync } from "node:fs";
import { parseStoredTokenEstimator } from "./stored-token-estimator.js";
import { defaultCalibrationStorage } from "../../application/usage-calibration.js";
import { availableParallelism } from "node:os";
import { parseArgs } from "node:util";
import { defaultMaxCompileTextBytes } from "../../core/compile/text-allowance.js";
import { stringLimits } from "../../core/model/string-limits.js";
import { defaultMaxTokenCountListBytes } from "../../core/tokens/token-count-cache.js";
import { defaultDecodedStateBytes } from "../../store/decoded-state-cache.js";
import { defaultKeptTailBytes } from "../../store/kept-tails.js";
import { defaultPrefetchConversations } from "../../store/followed-conversations.js";
import { defaultListedIdBytes } from "../../store/recent-ids.js";
import { defaultExpirySweepMs } from "../../store/conversation-expiry.js";
import { metadataLimits } from "../../core/deltas/conversation-metadata.js";
import { parseClusterSeeds } from "../../store/redis-cluster-seeds.js";
import { parseEncryptionKeys, type AtRestKey } from "../../store/at-rest-encryption.js";

/** One accepted bearer token; `tenant` empty = the token sees every conversation. */
export interface AuthToken {
  token: string;
  tenant: string;
}

/** Everything the sidecar can be configured with. Flags win over `CONTEXTD_*` environment variables. */
export interface Config {
  /** Interface to bind; loopback by default, "0.0.0.0" in a container. */
  host: string;
  /** The one port serving gRPC, gRPC-Web, Connect and the metrics path; 0 picks a free port. */
  port: number;
  /** Redis URL for the production store; empty = the embedded in-memory store. */
  redisUrl: string;
  /**
   * Seed nodes of a Redis Cluster for the store, instead of `redisUrl`: "host:port", or
   * "redis://[user[:password]@]host:port" / "rediss://..." (TLS) with the cluster's credentials,
   * the same in every entry; empty = none.
   */
  redisClusterNodes: string[];
  /** PEM file of the CAs that signed the Redis servers' certificates (rediss:// only); empty = the system's CAs. */
  redisTlsCa: string;
  /** Replicas that must acknowledge each commit (Redis WAIT) before it is answered; 0 = none. */
  redisWaitReplicas: number;
  /** How long a commit waits for those acknowledgements before UNAVAILABLE, in milliseconds. */
  redisWaitTimeoutMs: number;
  redisCommandTimeoutMs: number;
  /** Processes serving the port (node:cluster); more than one needs a shared store. */
  workers: number;
  /** Postgres URL for the Postgres store; empty = not used. Exclusive with `redisUrl`. */
  postgresUrl: string;
  /** Log level: "debug" logs one line per RPC, "info" start/stop and errors, "error" only errors. */
  logLevel: "debug" | "info" | "warn" | "error";
  /** Largest request message accepted, in bytes (RESOURCE_EXHAUSTED above). */
  maxRequestBytes: number;
  /** Request bytes all calls in progress may hold together (RESOURCE_EXHAUSTED beyond). */
  maxBufferedRequestBytes: number;
  /** How long a request body may take to arrive after its headers, in milliseconds (DEADLINE_EXCEEDED, or a reset stream, beyond). */
  requestBodyTimeoutMs: number;
  /**
   * Serve unary binary gRPC straight from the HTTP/2 stream (transport/grpc-unary.ts) instead of
   * through connect-node's adapter. The one switch for that path: same services, interceptors,
   * codes and bytes either way (test/server/transport/parity.test.ts); on by default because it
   * costs less CPU per call (docs/benchmarks.md).
   */
  directUnaryGrpc: boolean;
  /** Largest deadline a caller may ask for, in milliseconds (INVALID_ARGUMENT above); 0 = no limit. */
  maxDeadlineMs: number;
  /** Most `contextd.v1.Message`s one request may carry (RESOURCE_EXHAUSTED above). */
  maxMessages: number;
  /** Most text one compile may produce, whatever its request (RESOURCE_EXHAUSTED above; see docs/limits.md). */
  maxCompileTextBytes: number;
  /** How long a CompileSession waits for each summarize_response before DEADLINE_EXCEEDED, in milliseconds. */
  summarizeTimeoutMs: number;
  /** Most streaming calls open at once over the whole server, and HTTP/2 streams per connection. */
  maxStreams: number;
  /** Responses at least this large are compressed when the caller accepts it; 0 = never compress. */
  compressMinBytes: number;
  /** How long unary calls may run on after SIGTERM before connections are cut, in milliseconds. */
  shutdownGraceMs: number;
  /** How often the store is pinged to drive health, in milliseconds. */
  healthIntervalMs: number;
  /** Events buffered per `WatchEvents` subscriber before new ones are dropped. */
  telemetryQueue: number;
  /** HTTP path serving Prometheus text metrics on the same port (GET). */
  metricsPath: string;
  /** Accepted bearer tokens; empty = no authentication. */
  authTokens: AuthToken[];
  /** PEM certificate chain file; with `tlsKey`, the port serves TLS only (ALPN h2 and http/1.1). Empty = cleartext. */
  tlsCert: string;
  /** PEM private key file of `tlsCert`. */
  tlsKey: string;
  /** PEM CA bundle file; when set, every connection must present a client certificate it signed (mutual TLS). */
  tlsClientCa: string;
  /** Bytes of request messages the codec keeps to hand out again (each counted as encoding + 1 KiB); 0 = none. */
  recentMessageBytes: number;
  /** Bytes of encodings of immutable messages and lists the codec keeps across calls; 0 = none. */
  retainedEncodingBytes: number;
  cacheImpactBytes: number;
  /** (tenant, provider, model, estimator) keys whose calibration correction is kept (`ReportUsage`); 0 = none. */
  calibrationKeys: number;
  /** Calibration keys the store keeps per tenant, the least recently reported forgotten first. */
  calibrationKeysPerTenant: number;
  /** Days after which a calibration key not reported is forgotten by the store. */
  calibrationTtlDays: number;
  /** How long a correction read from the store is used before it is read again. */
  calibrationRefreshMs: number;
  /** Usage ledger entries kept per conversation, older ones counted in its totals only; 0 = no ledger (usage_ledger.proto). */
  usageEntriesPerConversation: number;
  /**
   * Approximate bytes of the stored histories' facts kept between compiles, so a stateful compile
   * walks only the tail the budget may keep (docs/incremental-compile.md); 0 = none, every compile
   * walks its whole history.
   */
  historyFactsBytes: number;
  /** Conversations whose history facts are kept (the least recently compiled go first); 0 = none. */
  historyFactsConversations: number;
  /**
   * Approximate bytes of stored messages' terms kept for `Recall` searches (each message's terms
   * and its text; the least recently searched go first); 0 = none, every search reads the texts.
   */
  recallIndexBytes: number;
  /** UTF-8 bytes of message text one `Recall` search may read and split into terms (kept terms cost none). */
  recallScanBytes: number;
  /**
   * Whose token counts the stores keep with each message they write, as `provider:model` (the
   * estimator a compile rendered for that provider and model uses), or `none`
   * (docs/incremental-compile.md, "Token counts stored with the messages").
   */
  storedTokenEstimator: string;
  /** What the token count cache's text level keeps (texts and entries, approximately); past it the oldest go. */
  tokenCountTextBytes: number;
  /** Approximate heap bytes of the last counted list per conversation start the token counts keep (TokenCountCache); the oldest go past it. */
  tokenCountListBytes: number;
  /** Serve the web inspector under /inspector/ (its data comes through the RPCs, with their auth). */
  inspector: boolean;
  /**
   * Commits refuse what breaks a tool round's pairing (a message after an open round, a result
   * without its open call) with INVALID_ARGUMENT (TOOL_ROUND_INVALID), as before conversations
   * stored them; off = store what happened, the compile repairs the prompt (docs/semantics.md).
   */
  strictToolRounds: boolean;
  /** Exit at start when the store cannot be reached (fail fast) instead of serving NOT_SERVING while it retries. */
  storeRequired: boolean;
  /**
   * Host names served besides localhost, 127.0.0.1 and [::1] while no bearer tokens are configured
   * (lower case, no port; ".example.com" = every name under it). Others are PERMISSION_DENIED:
   * DNS rebinding (policy/request-origin.ts).
   */
  allowedHosts: string[];
  /** A connection with no request in flight for this long is closed (HTTP/2: GOAWAY), in milliseconds. */
  idleTimeoutMs: number;
  /**
   * How long a new connection may take to send its first request's headers (HTTP/1.1: each
   * request's), in milliseconds; the connection is closed past it.
   */
  headersTimeoutMs: number;
  /**
   * Most connections open at once; a connection beyond it closes the one idle the longest, or is
   * closed itself when none is idle. 0 = the process's open-file limit less 128 (at least 64).
   */
  maxConnections: number;
  /** Bytes of events queued per `WatchEvents` subscriber before new ones are dropped (besides `telemetryQueue` events). */
  telemetryQueueBytes: number;
  /** Bytes of events one tenant's `WatchEvents` subscribers together may hold queued (each queue counted). */
  telemetryBytes: number;
  /** Most streaming calls open at once per tenant; 0 = `maxStreams` divided among the tenants of the tokens. */
  maxStreamsPerTenant: number;
  /** Bytes of finished spans waiting for the OpenTelemetry collector; spans beyond are dropped. */
  traceQueueBytes: number;

  /**
   * Bytes of messages the ReadMessages windows kept for page tokens hold together (counted as on
   * the wire), so a later page is read at its first page's version after the conversation moved
   * on; past it the least recently used window goes, and a window larger alone is not kept (its
   * pages are read while its version is current).
   */
  readPinBytes: number;
  /**
   * Approximate heap bytes of the decoded conversation states the Redis and Postgres stores keep
   * between calls (DecodedStateCache); the least recently used go past it. The newest state is
   * kept even when it alone is larger.
   */
  decodedStateBytes: number;
  /**
   * Approximate heap bytes of the stored tails the Redis and Postgres stores keep of conversations
   * they committed on without a copy (kept-tails.ts), so the next commit is one round trip; 0 = none.
   */
  keptTailBytes: number;
  /**
   * Most conversations the Redis (Cluster too, on sharded pub/sub) and Postgres stores follow for other sidecars'
   * commit notices, catching their copy up before their next commit (followed-conversations.ts); 0 = none.
   */
  prefetchConversations: number;
  /** Approximate heap bytes of the conversation ids the Redis store remembers having put in its listing index (recent-ids.ts); the oldest go past it. */
  listedIdBytes: number;
  /**
   * The keys the Redis and Postgres stores encrypt contents with (AES-256-GCM), from
   * `--encryption-key-file` or `CONTEXTD_ENCRYPTION_KEYS`: the first without a tenant writes, a
   * tenant's first writes its conversations, every one reads. Empty = contents stored as they are.
   */
  encryptionKeys: AtRestKey[];
  /**
   * Under encryption at rest, a fork on one Redis or on Postgres shares its source's stored
   * messages, each opened as the conversation that sealed it (true), or writes every message again
   * sealed for the fork (false): what sidecars of a release that opens shared values only as their
   * own conversation's read, for a rolling upgrade from one (docs/encryption-at-rest.md).
   */
  shareEncryptedForks: boolean;
  /**
   * How long a conversation lives without a commit, in ms, unless its tenant has an override or it
   * has its own (`ConversationState.idle_ttl_ms`); 0 = forever. Conversation lifetime, not the
   * retention of a change log.
   */
  idleTtlMs: number;
  /** Per tenant (the conversation id's part before its first "/"), its idle TTL in ms; 0 = forever. */
  idleTtlPerTenant: Record<string, number>;
  /** How often a store removes expired conversations, in bounded batches, in ms; 0 = only as reads meet them. */
  expirySweepMs: number;
  /** The default prune (`HistoryBound`): history messages kept past the head's summary; 0 = no bound. */
  pruneMaxMessages: number;
  /** The default prune: history bytes (protobuf encodings) kept past the head's summary; 0 = no bound. */
  pruneMaxBytes: number;
  /** Per tenant, its prune bound overriding both defaults; `{0, 0}` = none. */
  prunePerTenant: Record<string, { maxMessages: number; maxBytes: number }>;
  /** Changes kept per conversation (what Watch resumes from and what past versions are rebuilt from; docs/history.md). */
  historyRetentionVersions: number;
  /** Messages the logged changes one read of a past version (GetState at_version, Fork, Rewind) applies bring at most. */
  historyReadMessages: number;
  /** Bytes the undo each change records may hold (`--history-undo-bytes`, store/change-undo.ts); 0 = none recorded. */
  historyUndoBytes: number;
}

export const defaultConfig: Config = {
  host: "127.0.0.1",
  port: 7420,
  redisUrl: "",
  redisClusterNodes: [],
  redisTlsCa: "",
  redisWaitReplicas: 0,
  redisWaitTimeoutMs: 1_000,
  redisCommandTimeoutMs: 2_000,
  workers: 1,
  postgresUrl: "",
  logLevel: "info",
  maxRequestBytes: 16 * 1024 * 1024,
  maxBufferedRequestBytes: 256 * 1024 * 1024,
  requestBodyTimeoutMs: 30_000,
  directUnaryGrpc: true,
  maxDeadlineMs: 300_000,
  maxMessages: 10_000,
  maxCompileTextBytes: defaultMaxCompileTextBytes,
  summarizeTimeoutMs: 120_000,
  maxStreams: 1_000,
  compressMinBytes: 0,
  shutdownGraceMs: 10_000,
  healthIntervalMs: 1_000,
  telemetryQueue: 1_024,
  metricsPath: "/metrics",
  authTokens: [],
  tlsCert: "",
  tlsKey: "",
  tlsClientCa: "",
  recentMessageBytes: 64 * 1024 * 1024,
  retainedEncodingBytes: 64 * 1024 * 1024,
  cacheImpactBytes: 16 * 1024 * 1024,
  calibrationKeys: 1_024,
  calibrationKeysPerTenant: defaultCalibrationStorage.bounds.maxKeysPerTenant,
  calibrationTtlDays: defaultCalibrationStorage.bounds.ttlMs / 86_400_000,
  calibrationRefreshMs: defaultCalibrationStorage.refreshMs,
  usageEntriesPerConversation: 1_000,
  historyFactsBytes: 64 * 1024 * 1024,
  historyFactsConversations: 10_000,
  recallIndexBytes: 256 * 1024 * 1024,
  recallScanBytes: 64 * 1024 * 1024,
  storedTokenEstimator: "openai_chat:gpt-4o",
  tokenCountTextBytes: 64 * 1024 * 1024,
  tokenCountListBytes: defaultMaxTokenCountListBytes,
  inspector: true,
  strictToolRounds: false,
  storeRequired: false,
  allowedHosts: [],
  idleTimeoutMs: 120_000,
  headersTimeoutMs: 10_000,
  maxConnections: 0,
  telemetryQueueBytes: 1024 * 1024,
  telemetryBytes: 32 * 1024 * 1024,
  maxStreamsPerTenant: 0,
  traceQueueBytes: 16 * 1024 * 1024,

  readPinBytes: 256 * 1024 * 1024,
  decodedStateBytes: defaultDecodedStateBytes,
  keptTailBytes: defaultKeptTailBytes,
  prefetchConversations: defaultPrefetchConversations,
  listedIdBytes: defaultListedIdBytes,
  encryptionKeys: [],
  shareEncryptedForks: true,
  idleTtlMs: 0,
  idleTtlPerTenant: {},
  pruneMaxMessages: 0,
  pruneMaxBytes: 0,
  prunePerTenant: {},
  expirySweepMs: defaultExpirySweepMs,
  historyRetentionVersions: 10_000,
  historyReadMessages: 1_000_000,
  historyUndoBytes: 1_048_576,
};

/**
 * Every flag, with what it means: the one list `loadConfig` accepts and `usage` prints (each has a
 * `CONTEXTD_*` environment variable; its default is the `defaultConfig` field of the same name).
 */
export const flags = {
  host: "interface to bind (0.0.0.0 in a container)",
  port: "the one port for gRPC, gRPC-Web, Connect and metrics (0 = pick a free port)",
  "redis-url": "Redis store (Redis >= 7); empty = the in-memory store",
  "redis-cluster-nodes": "Redis Cluster store instead: seed nodes host:port,... or redis[s]://[user[:password]@]host:port,... (the client finds the rest)",
  "redis-tls-ca": "PEM file of the CAs that signed the Redis servers' certificates, for rediss:// (default: the system's CAs)",
  "redis-wait-replicas": "replicas that must acknowledge each commit (Redis WAIT) before it is answered; 0 = none",
  "redis-wait-timeout-ms": "how long a commit waits for those replicas before answering UNAVAILABLE",
  "redis-command-timeout-ms": "how long one Redis command may go unanswered before its call answers UNAVAILABLE (a commit waiting for replicas gets the wait timeout on top)",
  workers: "processes serving the port (node:cluster), or auto = one per core; more than 1 needs a shared store (Redis, Redis Cluster or Postgres)",
  "postgres-url": "Postgres store (tested with PostgreSQL 15), e.g. postgres://user:password@host:5432/db; the sidecar creates and migrates its tables; empty = not used",
  "log-level": "debug (one line per RPC), info, warn or error; a failed RPC is logged at error when the server is at fault (INTERNAL, UNAVAILABLE, DATA_LOSS, ...), warn for refused callers (UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED), info for the caller's normal failures (ABORTED version conflicts, INVALID_ARGUMENT, NOT_FOUND, ...)",
  "store-required": "true = exit (status 1) when the store cannot be reached at start, instead of serving NOT_SERVING and retrying",
  "max-request-bytes": "largest request message, bytes (RESOURCE_EXHAUSTED above)",
  "max-buffered-request-bytes": "request bytes all calls in progress may hold together (RESOURCE_EXHAUSTED beyond; health is never refused)",
  "request-body-timeout-ms": "how long a request body may take to arrive after its headers",
  "direct-unary-grpc": "serve unary binary gRPC straight from the HTTP/2 stream (true) or through connect-node (false)",
  "max-deadline-ms": "largest deadline a caller may ask for (INVALID_ARGUMENT above); 0 = no limit",
  "max-messages": "most contextd.v1.Messages one request may carry",
  "max-compile-text-bytes": "most text one compile may produce (also capped at 1 MiB + 8x the request's text)",
  "summarize-timeout-ms": "how long a CompileSession waits for each summary",
  "max-streams": "open streaming RPCs, server-wide",
  "max-streams-per-tenant": "open streaming RPCs per tenant (tokens without a tenant, or no tokens, count as one); 0 = --max-streams divided among the tenants of the tokens",
  "compress-min-bytes": "compress responses at least this large when the caller accepts it; 0 = never",
  "shutdown-grace-ms": "how long unary calls may finish after SIGTERM",
  "health-interval-ms": "store ping interval; a ping unanswered for three intervals makes health NOT_SERVING",
  "telemetry-queue": "queued events per WatchEvents subscriber",
  "telemetry-queue-bytes": "bytes of queued events per WatchEvents subscriber (events beyond are dropped and counted)",
  "telemetry-bytes": "bytes of queued events of one tenant's WatchEvents subscribers together (tokens without a tenant, or no tokens, are one), counted in every queue",
  "metrics-path": "Prometheus text endpoint (GET)",
  "auth-tokens-file": "file of bearer tokens (or CONTEXTD_AUTH_TOKENS), token or token=tenant per line",
  "tls-cert": "PEM certificate chain file; with --tls-key the port serves TLS only (h2 and http/1.1 by ALPN); empty = cleartext",
  "tls-key": "PEM private key file for --tls-cert",
  "tls-client-ca": "PEM CA file: require client certificates signed by it (mutual TLS); empty = no client certificates",
  "recent-message-bytes": "request messages kept to be handed out again when resent; 0 = none",
  "retained-encoding-bytes": "encodings of immutable messages and lists kept across calls; 0 = none",
  "cache-impact-bytes": "memory of each conversation's last compile, for CompileResult.cache_impact; 0 = none",
  "calibration-keys": "(tenant, provider, model, estimator) keys whose token calibration correction this process caches, from ReportUsage and the store; 0 = no calibration",
  "calibration-keys-per-tenant": "token calibration keys the store keeps per tenant, the least recently reported forgotten first",
  "calibration-ttl-days": "days after which the store forgets a token calibration key no report came for",
  "calibration-refresh-ms": "how long a token calibration correction read from the store is used before it is read again (how stale another sidecar's reports can be)",
  "usage-entries-per-conversation": "usage ledger entries (ReportUsage with a conversation) the store keeps per conversation, older ones counted in its totals only; 0 = no ledger",
  "history-facts-bytes": "approximate bytes of stored histories' facts kept so a compile walks only the tail it may keep; 0 = none",
  "history-facts-conversations": "conversations whose history facts are kept; 0 = none",
  "recall-index-bytes": "approximate bytes of stored messages' terms (and their texts) kept for Recall searches; 0 = none, every search reads the texts again",
  "recall-scan-bytes": "UTF-8 bytes of message text one Recall search may read and split into terms (messages whose terms are kept cost none); a search that reaches it answers from what it read, complete = false",
  "token-count-text-bytes": "approximate bytes of the texts whose token counts are kept across compiles (2 per character + 64 each); the oldest go past it",
  "token-count-list-bytes": "approximate heap bytes of the last counted list per conversation start kept for the next compile (640 per message + 2 per character of its texts; at most 64 lists); the oldest go past it, a list over it alone is not kept",
  "stored-token-estimator": "whose token counts the stores keep with each message they write: provider:model (the estimator a compile rendered for them uses), or none",
  inspector: "serve the web inspector at /inspector/ (true) or not (false); its data comes through the RPCs, with their tokens and tenants",
  "allowed-hosts": "host names served besides localhost, 127.0.0.1 and [::1] while no bearer tokens are configured, comma separated (.example.com = every name under it); other Hosts get PERMISSION_DENIED (DNS rebinding)",
  "idle-timeout-ms": "close a connection with no request in flight for this long (HTTP/2: GOAWAY)",
  "headers-timeout-ms": "close a connection whose request headers have not all arrived this long after it opened (HTTP/1.1: after the previous request)",
  "max-connections": "most open connections; one more closes the longest idle, or is closed when none is idle; 0 = the open-file limit less 128",
  "trace-queue-bytes": "bytes of finished spans waiting for the OpenTelemetry collector; spans beyond are dropped",
  "read-pin-bytes": "bytes of messages the ReadMessages windows with pages to come keep together, so their later pages read at the first page's version after the conversation moved on (least recently used out first); 0 = none kept",
  "decoded-state-bytes": "approximate heap bytes of the decoded conversation states the Redis and Postgres stores keep between calls (the least recently used go past it; the newest is always kept)",
  "kept-tail-bytes": "approximate heap bytes of the stored tails the Redis and Postgres stores keep of conversations committed on without a copy, so the next such commit is one round trip (the least recently used go past it); 0 = none kept",
  "prefetch-conversations": "most conversations the Redis, Redis Cluster (sharded pub/sub) and Postgres stores follow for commit notices: one this sidecar commits to that another sidecar writes too (round-robin) is caught up in the background on the other's commit, so this sidecar's next commit is the write alone; unfollowed after 3 notices without a commit here or 3 commits here without a notice; 0 = none (no subscriber connection)",
  "listed-id-bytes": "approximate heap bytes of the conversation ids the Redis store remembers having put in its listing index, so a commit skips that write for 60 s (80 + 2 per character each; the oldest go past it, and their next commit writes the entry again); the same again for the ids of conversations whose stored id index a commit found stale (Redis, Postgres), and again for the homes of forks on Redis Cluster (a fork forgotten costs its next request one hop through its own hash tag)",
  "encryption-key-file": "file of encryption-at-rest keys (or CONTEXTD_ENCRYPTION_KEYS), [tenant/]key-id:base64 of 32 bytes per line, the first writes: the Redis and Postgres stores keep message contents as AES-256-GCM ciphertext (docs/encryption-at-rest.md); none = stored as they are",
  "share-encrypted-forks":
    "under encryption at rest a fork on one Redis or on Postgres shares its source's stored messages, each opened as the conversation that sealed it (true), or writes every message again sealed for the fork (false: while sidecars of a release before shared encrypted forks still read the store, which answer DATA_LOSS for a shared one)",
  "idle-ttl-ms": "a conversation expires this long after its last commit (then it reads as never written, on every store) unless its tenant or the conversation itself says otherwise; 0 = never",
  "idle-ttl-per-tenant": "per-tenant idle TTLs overriding --idle-ttl-ms, tenant=ms comma separated (the tenant is the conversation id's part before its first /); 0 = never",
  "prune-max-messages":
    "every commit keeps a conversation's history within this many messages (and one summary at its head standing for what went), pruning as a prune_history delta does, down to 90% of it, unless its tenant has its own bound; 0 = no bound",
  "prune-max-bytes": "the same bound in bytes of the history's messages (their protobuf encoding); 0 = no bound; with both set, both hold",
  "prune-per-tenant": "per-tenant prune bounds overriding --prune-max-messages and --prune-max-bytes, tenant=messages:bytes comma separated (0 = no bound of that kind; 0:0 = none for the tenant)",
  "expiry-sweep-ms": "how often each store removes expired conversations, a bounded batch at a time; 0 = never (reads still treat them as gone)",
  "history-retention-versions": "changes kept per conversation: what Watch resumes from, and the history window GetState at_version, Fork and Rewind read past versions in (Redis keeps about this many)",
  "history-read-messages": "messages the logged changes one read of a past version (GetState at_version, Fork at a past version, Rewind) applies may bring, all together (RESOURCE_EXHAUSTED past it)",
  "history-undo-bytes": "bytes the undo each commit logs with its change may hold (what reads a past version backward from the current state); past it the change is logged without one and versions before it are read forward, while the log reaches back to the first; 0 = no undos",
  "strict-tool-rounds": "commits refuse a message after an open tool round and a result without its open call (true), or store them and let the compile repair the prompt (false)",
} as const;
type Flag = keyof typeof flags;

/** What `contextd --help` prints: every flag, its environment variable and its default. */
export function usage(): string {
  const lines = ["usage: contextd [flags]   (every flag also as CONTEXTD_<FLAG>; flags win)", ""];
  for (const [flag, meaning] of Object.entries(flags)) {
    const variable = `CONTEXTD_${flag.toUpperCase().replaceAll("-", "_")}`;
    const field = flag.replace(/-([a-z])/g, (_, letter: string) => letter.toUpperCase()) as keyof Config;
    const fallback = field in defaultConfig && field !== "authTokens" ? JSON.stringify(defaultConfig[field]) : "none";
    lines.push(`  --${flag} (${variable}, default ${fallback})`, `      ${meaning}`);
  }
  lines.push("  --help       this text", "  --version    the version");
  lines.push("", "OpenTelemetry tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set: OTLP http/protobuf or grpc, OTEL_* as usual (docs/observability.md).");
  return lines.join("\n");
}

/**
 * Reads flags (`--max-messages 100`) and environment (`CONTEXTD_MAX_MESSAGES=100`). Tokens come
 * from `CONTEXTD_AUTH_TOKENS` or the file named by `--auth-tokens-file`, never from a flag value,
 * so they do not show up in process listings. Invalid values throw, naming the flag and variable.
 */
export function loadConfig(argv: string[], env: NodeJS.ProcessEnv): Config {
  const { values } = parseArgs({
    args: argv,
    options: Object.fromEntries(Object.keys(flags).map((flag) => [flag, { type: "string" as const }])),
    strict: true,
  });
  const pick = (flag: Flag) => {
    const variable = `CONTEXTD_${flag.toUpperCase().replaceAll("-", "_")}`;
    const text = (values[flag] as string | undefined) ?? env[variable];
    return { text, where: `--${flag} or ${variable}` };
  };
  const integer = (flag: Flag, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER) => {
    const { text, where } = pick(flag);
    if (text === undefined) return fallback;
    const value = Number(text);
    if (text.trim() === "" || !Number.isInteger(value) || value < min || value > max) {
      throw new Error(`invalid ${where} "${text}": want an integer from ${min} to ${max}`);
    }
    return value;
  };
  const string = (flag: Flag, fallback: string) => pick(flag).text ?? fallback;
  const boolean = (flag: Flag, fallback: boolean) => {
    const { text, where } = pick(flag);
    if (text === undefined) return fallback;
    if (text === "true" || text === "false") return text === "true";
    throw new Error(`invalid ${where} "${text}": want true or false`);
  };

  const metricsPath = string("metrics-path", defaultConfig.metricsPath);
  if (!metricsPath.startsWith("/")) {
    throw new Error(`invalid --metrics-path or CONTEXTD_METRICS_PATH "${metricsPath}": want a path starting with "/"`);
  }
  const tlsCert = string("tls-cert", defaultConfig.tlsCert);
  const tlsKey = string("tls-key", defaultConfig.tlsKey);
  const tlsClientCa = string("tls-client-ca", defaultConfig.tlsClientCa);
  if ((tlsCert === "") !== (tlsKey === "")) {
    throw new Error("invalid TLS configuration: --tls-cert (CONTEXTD_TLS_CERT) and --tls-key (CONTEXTD_TLS_KEY) go together; give both or neither");
  }
  if (tlsClientCa !== "" && tlsCert === "") {
    throw new Error("invalid --tls-client-ca or CONTEXTD_TLS_CLIENT_CA: client certificates need TLS; give --tls-cert and --tls-key too");
  }
  const redisUrl = string("redis-url", defaultConfig.redisUrl);
  const redisClusterNodes = (pick("redis-cluster-nodes").text ?? "").split(",").map((node) => node.trim()).filter((node) => node !== "");
  let clusterTls = false;
  if (redisClusterNodes.length > 0) {
    try {
      clusterTls = parseClusterSeeds(redisClusterNodes).tls;
    } catch (error) {
      throw new Error(`invalid --redis-cluster-nodes or CONTEXTD_REDIS_CLUSTER_NODES: ${(error as Error).message}`);
    }
  }
  const redisTlsCa = string("redis-tls-ca", defaultConfig.redisTlsCa);
  if (redisTlsCa !== "" && !redisUrl.startsWith("rediss://") && !clusterTls) {
    throw new Error("invalid --redis-tls-ca or CONTEXTD_REDIS_TLS_CA: it is for TLS to Redis; give a rediss:// --redis-url or rediss:// --redis-cluster-nodes");
  }
  if (redisUrl !== "" && redisClusterNodes.length > 0) {
    throw new Error("--redis-url and --redis-cluster-nodes (or their CONTEXTD_ variables) name two stores: give one");
  }
  const postgresUrl = checkedPostgresUrl(string("postgres-url", defaultConfig.postgresUrl), redisUrl, redisClusterNodes);
  const workersText = pick("workers").text;
  if (workersText !== undefined && workersText !== "auto" && !/^[1-9][0-9]{0,2}$/.test(workersText.trim())) {
    throw new Error(`invalid --workers or CONTEXTD_WORKERS "${workersText}": want an integer from 1 to 256, or auto (one per core)`);
  }
  const workers = workersText === "auto" ? availableParallelism() : integer("workers", defaultConfig.workers, 1, 256);
  if (workers > 1 && redisUrl === "" && redisClusterNodes.length === 0 && postgresUrl === "") {
    throw new Error(
      `--workers ${workersText} needs a shared store (--redis-url, --redis-cluster-nodes or --postgres-url): the in-memory store's conversations live in one process, ` +
        "so each worker would see different ones",
    );
  }
  const encryptionKeyFile = pick("encryption-key-file").text;
  const encryptionKeys = encryptionKeysOf(encryptionKeyFile, env.CONTEXTD_ENCRYPTION_KEYS);
  const tokensFile = pick("auth-tokens-file").text;
  const tokensText = tokensFile ? readFileSync(tokensFile, "utf8") : env.CONTEXTD_AUTH_TOKENS ?? "";
  return {
    host: string("host", defaultConfig.host),
    port: integer("port", defaultConfig.port, 0, 65535),
    redisUrl,
    postgresUrl,
    redisClusterNodes,
    redisTlsCa,
    redisWaitReplicas: integer("redis-wait-replicas", defaultConfig.redisWaitReplicas, 0, 1_000),
    redisWaitTimeoutMs: integer("redis-wait-timeout-ms", defaultConfig.redisWaitTimeoutMs, 1, 2 ** 31 - 1),
    redisCommandTimeoutMs: integer("redis-command-timeout-ms", defaultConfig.redisCommandTimeoutMs, 1, 2 ** 31 - 1),
    workers,
    logLevel: parseLogLevel(string("log-level", defaultConfig.logLevel)),
    maxRequestBytes: integer("max-request-bytes", defaultConfig.maxRequestBytes, 1, 0xffffffff),
    maxBufferedRequestBytes: integer("max-buffered-request-bytes", defaultConfig.maxBufferedRequestBytes, 1),
    requestBodyTimeoutMs: integer("request-body-timeout-ms", defaultConfig.requestBodyTimeoutMs, 1, 2 ** 31 - 1),
    directUnaryGrpc: boolean("direct-unary-grpc", defaultConfig.directUnaryGrpc),
    maxDeadlineMs: integer("max-deadline-ms", defaultConfig.maxDeadlineMs, 0),
    maxMessages: integer("max-messages", defaultConfig.maxMessages, 1),
    // V8 strings end at 2^29 - 24 code units.
    maxCompileTextBytes: integer("max-compile-text-bytes", defaultConfig.maxCompileTextBytes, 1, 2 ** 29 - 24),
    summarizeTimeoutMs: integer("summarize-timeout-ms", defaultConfig.summarizeTimeoutMs, 1),
    maxStreams: integer("max-streams", defaultConfig.maxStreams, 1, 0xffffffff),
    compressMinBytes: integer("compress-min-bytes", defaultConfig.compressMinBytes, 0, 0xffffffff),
    shutdownGraceMs: integer("shutdown-grace-ms", defaultConfig.shutdownGraceMs, 0),
    healthIntervalMs: integer("health-interval-ms", defaultConfig.healthIntervalMs, 10),
    telemetryQueue: integer("telemetry-queue", defaultConfig.telemetryQueue, 1),
    metricsPath,
    authTokens: parseAuthTokens(tokensText, tokensFile ? `--auth-tokens-file ${tokensFile}` : "CONTEXTD_AUTH_TOKENS"),
    tlsCert,
    tlsKey,
    tlsClientCa,
    recentMessageBytes: integer("recent-message-bytes", defaultConfig.recentMessageBytes, 0),
    retainedEncodingBytes: integer("retained-encoding-bytes", defaultConfig.retainedEncodingBytes, 0),
    cacheImpactBytes: integer("cache-impact-bytes", defaultConfig.cacheImpactBytes, 0),
    calibrationKeys: integer("calibration-keys", defaultConfig.calibrationKeys, 0),
    calibrationKeysPerTenant: integer("calibration-keys-per-tenant", defaultConfig.calibrationKeysPerTenant, 1, 1_000_000),
    calibrationTtlDays: integer("calibration-ttl-days", defaultConfig.calibrationTtlDays, 1, 3_650),
    calibrationRefreshMs: integer("calibration-refresh-ms", defaultConfig.calibrationRefreshMs, 0, 86_400_000),
    // At most 10,000: the Redis scripts hand a conversation's kept report ids to one HMGET.
    usageEntriesPerConversation: integer("usage-entries-per-conversation", defaultConfig.usageEntriesPerConversation, 0, 10_000),
    historyFactsBytes: integer("history-facts-bytes", defaultConfig.historyFactsBytes, 0),
    historyFactsConversations: integer("history-facts-conversations", defaultConfig.historyFactsConversations, 0),
    recallIndexBytes: integer("recall-index-bytes", defaultConfig.recallIndexBytes, 0),
    recallScanBytes: integer("recall-scan-bytes", defaultConfig.recallScanBytes, 1024),
    tokenCountTextBytes: integer("token-count-text-bytes", defaultConfig.tokenCountTextBytes, 1024),
    tokenCountListBytes: integer("token-count-list-bytes", defaultConfig.tokenCountListBytes, 0),
    storedTokenEstimator: checkedStoredTokenEstimator(string("stored-token-estimator", defaultConfig.storedTokenEstimator), pick("stored-token-estimator").where),
    inspector: boolean("inspector", defaultConfig.inspector),
    strictToolRounds: boolean("strict-tool-rounds", defaultConfig.strictToolRounds),
    storeRequired: boolean("store-required", defaultConfig.storeRequired),
    allowedHosts: parseAllowedHosts(pick("allowed-hosts").text ?? ""),
    idleTimeoutMs: integer("idle-timeout-ms", defaultConfig.idleTimeoutMs, 100, 2 ** 31 - 1),
    headersTimeoutMs: integer("headers-timeout-ms", defaultConfig.headersTimeoutMs, 100, 2 ** 31 - 1),
    maxConnections: integer("max-connections", defaultConfig.maxConnections, 0, 10_000_000),
    telemetryQueueBytes: integer("telemetry-queue-bytes", defaultConfig.telemetryQueueBytes, 1024),
    telemetryBytes: integer("telemetry-bytes", defaultConfig.telemetryBytes, 1024),
    maxStreamsPerTenant: integer("max-streams-per-tenant", defaultConfig.maxStreamsPerTenant, 0, 0xffffffff),
    traceQueueBytes: integer("trace-queue-bytes", defaultConfig.traceQueueBytes, 64 * 1024),

    readPinBytes: integer("read-pin-bytes", defaultConfig.readPinBytes, 0),
    decodedStateBytes: integer("decoded-state-bytes", defaultConfig.decodedStateBytes, 0),
    keptTailBytes: integer("kept-tail-bytes", defaultConfig.keptTailBytes, 0),
    prefetchConversations: integer("prefetch-conversations", defaultConfig.prefetchConversations, 0, 1_000_000),
    listedIdBytes: integer("listed-id-bytes", defaultConfig.listedIdBytes, 0),
    encryptionKeys,
    shareEncryptedForks: boolean("share-encrypted-forks", defaultConfig.shareEncryptedForks),
    idleTtlMs: integer("idle-ttl-ms", defaultConfig.idleTtlMs, 0, metadataLimits.maxIdleTtlMs),
    idleTtlPerTenant: parseIdleTtlPerTenant(pick("idle-ttl-per-tenant")),
    expirySweepMs: integer("expiry-sweep-ms", defaultConfig.expirySweepMs, 0, 2 ** 31 - 1),
    pruneMaxMessages: integer("prune-max-messages", defaultConfig.pruneMaxMessages, 0, maxPruneMessages),
    pruneMaxBytes: integer("prune-max-bytes", defaultConfig.pruneMaxBytes, 0),
    prunePerTenant: parsePrunePerTenant(pick("prune-per-tenant")),
    historyRetentionVersions: integer("history-retention-versions", defaultConfig.historyRetentionVersions, 1, 10_000_000),
    historyReadMessages: integer("history-read-messages", defaultConfig.historyReadMessages, 1),
    historyUndoBytes: integer("history-undo-bytes", defaultConfig.historyUndoBytes, 0, 1 << 30),
  };
}

/** `tenant=ms,...`: each tenant's idle TTL; an invalid entry throws naming the flag, the entry and the limit. */
function parseIdleTtlPerTenant({ text, where }: { text: string | undefined; where: string }): Record<string, number> {
  const perTenant: Record<string, number> = {};
  for (const entry of (text ?? "").split(",").map((part) => part.trim()).filter((part) => part !== "")) {
    const match = /^([A-Za-z0-9._-]+)=(\d{1,16})$/.exec(entry);
    if (!match || Number(match[2]) > metadataLimits.maxIdleTtlMs) {
      throw new Error(`invalid ${where} entry "${entry}": want tenant=ms, the tenant letters, digits, ".", "_" or "-", the ms 0 to ${metadataLimits.maxIdleTtlMs}`);
    }
    if (Object.hasOwn(perTenant, match[1]!)) throw new Error(`invalid ${where}: tenant "${match[1]}" given twice`);
    perTenant[match[1]!] = Number(match[2]);
  }
  return perTenant;
}

/** The most messages a prune bound may keep: `PruneHistory.max_messages` is a uint32. */
const maxPruneMessages = 0xffffffff;

/** `tenant=messages:bytes,...`: each tenant's prune bound; an invalid entry throws naming the flag, the entry and the limits. */
function parsePrunePerTenant({ text, where }: { text: string | undefined; where: string }): Record<string, { maxMessages: number; maxBytes: number }> {
  const perTenant: Record<string, { maxMessages: number; maxBytes: number }> = {};
  for (const entry of (text ?? "").split(",").map((part) => part.trim()).filter((part) => part !== "")) {
    const match = /^([A-Za-z0-9._-]+)=(\d{1,16}):(\d{1,16})$/.exec(entry);
    if (!match || Number(match[2]) > maxPruneMessages || Number(match[3]) > Number.MAX_SAFE_INTEGER) {
      throw new Error(`invalid ${where} entry "${entry}": want tenant=messages:bytes, the tenant letters, digits, ".", "_" or "-", the messages 0 to ${maxPruneMessages}, the bytes 0 to ${Number.MAX_SAFE_INTEGER}`);
    }
    if (Object.hasOwn(perTenant, match[1]!)) throw new Error(`invalid ${where}: tenant "${match[1]}" given twice`);
    perTenant[match[1]!] = { maxMessages: Number(match[2]), maxBytes: Number(match[3]) };
  }
  return perTenant;
}

/** The configuration as printed at start: secrets replaced by what is safe to show. */
export function printableConfig(config: Config) {
  const tenants = [...new Set(config.authTokens.map((token) => token.tenant).filter(Boolean))].sort();
  return {
    ...config,
    redisUrl: config.redisUrl ? config.redisUrl.replace(/\/\/[^@/]*@/, "//(credentials)@") : "",
    redisClusterNodes: config.redisClusterNodes.map((node) => node.replace(/\/\/[^@/]*@/, "//(credentials)@")),
    postgresUrl: config.postgresUrl.replace(/\/\/[^@/]*@/, "//(credentials)@"),
    authTokens: config.authTokens.length,
    tenants,
    encryptionKeys: config.encryptionKeys.map((key) => (key.tenant === "" ? key.id : `${key.tenant}/${key.id}`)),
  };
}

/**
 * The keys of `--encryption-key-file` (or `CONTEXTD_ENCRYPTION_KEYS`, never a flag value, so keys
 * stay out of process listings); a file that is missing, unreadable or holds a bad key stops the
 * start, naming the file and the entry.
 */
function encryptionKeysOf(file: string | undefined, variable: string | undefined): AtRestKey[] {
  if (file !== undefined && file !== "") {
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch (error) {
      throw new Error(`cannot read --encryption-key-file ${file}: ${(error as Error).message}`);
    }
    return parseEncryptionKeys(text, `--encryption-key-file ${file}`);
  }
  return variable === undefined || variable.trim() === "" ? [] : parseEncryptionKeys(variable, "CONTEXTD_ENCRYPTION_KEYS");
}

/**
 * Tokens separated by commas or newlines; `token=tenant` scopes a token to conversation ids that
 * start with `tenant/`. Lines starting with `#` are comments.
 */
export function parseAuthTokens(text: string, where: string): AuthToken[] {
  const tokens: AuthToken[] = [];
  for (const raw of text.split(/[,\n]/)) {
    const entry = raw.trim();
    if (entry === "" || entry.startsWith("#")) continue;
    const equals = entry.indexOf("=");
    const token = equals < 0 ? entry : entry.slice(0, equals).trim();
    const tenant = equals < 0 ? "" : entry.slice(equals + 1).trim();
    if (token.length < 16) throw new Error(`invalid token in ${where}: tokens must have at least 16 characters`);
    if (equals >= 0 && !/^[A-Za-z0-9._-]+$/.test(tenant)) {
      throw new Error(`invalid tenant "${tenant}" in ${where}: want letters, digits, ".", "_" or "-"`);
    }
    if (tenant.length > stringLimits.tenant) {
      throw new Error(`invalid tenant "${tenant.slice(0, 32)}..." in ${where}: ${tenant.length} characters, at most ${stringLimits.tenant}`);
    }
    tokens.push({ token, tenant });
  }
  return tokens;
}

/** `--allowed-hosts`: comma-separated host names without ports, lower-cased; ".name" allows every name under it. */
export function parseAllowedHosts(text: string): string[] {
  const hosts = text.split(",").map((host) => host.trim().toLowerCase()).filter((host) => host !== "");
  for (const host of hosts) {
    if (!/^\.?[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$/.test(host) && !/^\[[0-9a-f:.]+\]$/.test(host)) {
      throw new Error(`invalid --allowed-hosts or CONTEXTD_ALLOWED_HOSTS entry "${host}": want a host name without a port (example.internal, .example.internal, 10.0.0.5 or [fd00::5])`);
    }
  }
  return hosts;
}

/** The Postgres URL, refused beside a Redis URL (one store per sidecar). */
function checkedPostgresUrl(url: string, redisUrl: string, redisClusterNodes: readonly string[]): string {
  if (url !== "" && (redisUrl !== "" || redisClusterNodes.length > 0)) {
    throw new Error(`--postgres-url (CONTEXTD_POSTGRES_URL) and ${redisUrl !== "" ? "--redis-url (CONTEXTD_REDIS_URL)" : "--redis-cluster-nodes (CONTEXTD_REDIS_CLUSTER_NODES)"} are both set: choose one store`);
  }
  if (url !== "" && !/^postgres(ql)?:\/\//.test(url)) {
    throw new Error(`invalid --postgres-url or CONTEXTD_POSTGRES_URL "${url.replace(/\/\/[^@/]*@/, "//(credentials)@")}": want postgres://user:password@host:port/database`);
  }
  return url;
}

function parseLogLevel(text: string): Config["logLevel"] {
  if (text === "debug" || text === "info" || text === "warn" || text === "error") return text;
  throw new Error(`invalid log level "${text}": want debug, info, warn or error (--log-level or CONTEXTD_LOG_LEVEL)`);
}

function checkedStoredTokenEstimator(text: string, where: string): string {
  parseStoredTokenEstimator(text, where);
  return text;
}
