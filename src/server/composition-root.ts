import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import type { DescService } from "@bufbuild/protobuf";
import type { Message } from "#gen/contextd/v1/message_pb";
import { Compiler } from "../application/compiler.js";
import { HistoryFactsCache } from "../application/history-facts-cache.js";
import { HistoryRecall } from "../application/history-recall.js";
import { RecallTermIndex } from "../application/recall-term-index.js";
import { MessageWindows } from "../application/message-windows.js";
import { RecentCompiles } from "../application/recent-compiles.js";
import { RegexSearchThread } from "../application/regex-search-thread.js";
import { StateSizeLimit } from "../application/state-size.js";
import { TelemetryHub } from "../application/telemetry-hub.js";
import { defaultToolResultTextBytes, ToolResultTexts } from "../application/tool-result-texts.js";
import { UsageCalibration } from "../application/usage-calibration.js";
import { UsageLedger } from "../application/usage-ledger.js";
import { Codec } from "../codec/codec.js";
import { TokenCountCache } from "../core/tokens/token-count-cache.js";
import type { ConversationStore } from "../store/conversation-store.js";
import { ConversationExpiry } from "../store/conversation-expiry.js";
import { HistoryBound } from "../store/history-bound.js";
import { createConversationStore } from "../store/create-conversation-store.js";
import { storedValuesOf } from "../store/at-rest-encryption.js";
import { defaultHistoryLimits } from "../store/version-history.js";
import { CallTracker } from "./operations/call-tracker.js";
import type { Config } from "./operations/config.js";
import { HealthStatus } from "./operations/health.js";
import { InspectorAssets } from "./operations/inspector-route.js";
import { createLogger, type Logger } from "./operations/logger.js";
import { Metrics } from "./operations/metrics.js";
import { ObservedStore } from "./operations/observed-store.js";
import { storedTokenEstimator } from "./operations/stored-token-estimator.js";
import type { Tracing } from "./operations/tracing.js";
import { Admission } from "./policy/admission.js";
import { authenticate, BearerTokens } from "./policy/auth.js";
import { traceCalls } from "./policy/call-tracing.js";
import { instrumentCalls } from "./policy/instrumentation.js";
import { enforceDeadlines, limitMessagesPerRequest, limitRequestStrings } from "./policy/limits.js";
import { RequestMemoryBudget } from "./policy/request-memory.js";
import { RequestOrigins } from "./policy/request-origin.js";
import { guardStreams, StreamCounter, streamsPerTenant } from "./policy/stream-guard.js";
import type { ConversationReads } from "./services/conversation-service.js";
import { contextdServiceNames, routes } from "./services/routes.js";

/**
 * Why it exists: the one place that builds the sidecar's objects from its configuration — the
 * codec and the store, every cache (each bounded by its flag), the compiler, calibration, recent
 * compiles, message windows, telemetry, health, metrics and the policy — and hands them to the
 * services, which are plain functions of what they are given (services/routes.ts), and to the
 * transport (server.ts), which only serves them. A new cache or use case is built here, from a
 * flag, and nowhere else (test/architecture.test.ts refuses a service that constructs one).
 */

/** What a caller may bring instead of what the configuration would build. */
export interface SidecarParts {
  store: ConversationStore;
  /**
   * Decodes requests and encodes responses; give the store the same one, so responses reuse the
   * encodings of the states it hands out. A new one bounded by the configuration otherwise.
   */
  codec?: Codec;
  logger?: Logger;
  /** Idle time after which a Watch stream sends a heartbeat; 15 s when not given. */
  watchHeartbeatMs?: number;
  /** Where metrics are kept; a new `Metrics` (own registry, the process's runtime metrics) when not given. */
  metrics?: Metrics;
  /** OpenTelemetry tracing; off when not given (`src/main.ts` reads the OTEL_* environment). */
  tracing?: Tracing;
  /**
   * What the metrics path serves, given this server's own rendering: with `--workers`, every
   * worker's metrics gathered by the primary (operations/worker-processes.ts). This server's alone otherwise.
   */
  gatherMetrics?: (render: () => Promise<string>) => () => Promise<string>;
  /**
   * Connects this server's telemetry to other processes': with `--workers`, WatchEvents sees the
   * compiles of every worker (operations/worker-processes.ts). This server's alone otherwise.
   */
  shareTelemetry?: (telemetry: TelemetryHub) => void;
}

/** The use cases and the caches they share, as the services are given them. */
export interface Application {
  store: ConversationStore;
  codec: Codec;
  /** Per-message token counts shared by every compile and count (`--token-count-text-bytes`, `--token-count-list-bytes`). */
  tokenCounts: TokenCountCache;
  /** Fan-out of compile observer events (`--telemetry-queue`, `--telemetry-queue-bytes`, `--telemetry-bytes`). */
  telemetry: TelemetryHub;
  /** Where long texts' built-in redaction patterns are searched, off the event loop; `close` ends its thread. */
  regexSearch: RegexSearchThread;
  compiler: Compiler;
  /** The token calibration corrections (`--calibration-keys`); none at 0. */
  calibration?: UsageCalibration;
  /** The usage ledger (`--usage-entries-per-conversation`); none at 0. */
  usageLedger?: UsageLedger;
  /** What GetState, ReadMessages, ReadToolResult and Recall read through. */
  reads: ConversationReads;
}

/**
 * The application objects over `store`, each bounded by its flag. Tests and benchmarks that call a
 * service in process compose it with this, as the server does.
 */
export function composeApplication(config: Config, store: ConversationStore, codec: Codec): Application {
  // The counts the store read with its messages are not counted again (StoredTokenCounts).
  const tokenCounts = new TokenCountCache(undefined, codec.storedTokenCounts, config.tokenCountTextBytes, config.tokenCountListBytes);
  const telemetry = new TelemetryHub(config.telemetryQueue, { queueBytes: config.telemetryQueueBytes, tenantBytes: config.telemetryBytes });
  const regexSearch = new RegexSearchThread();
  const calibration =
    config.calibrationKeys > 0
      ? new UsageCalibration({
          store,
          maxKeys: config.calibrationKeys,
          bounds: { maxKeysPerTenant: config.calibrationKeysPerTenant, ttlMs: config.calibrationTtlDays * 86_400_000 },
          refreshMs: config.calibrationRefreshMs,
        })
      : undefined;
  const compiler = new Compiler({
    store,
    tokenCounts,
    maxCompileTextBytes: config.maxCompileTextBytes,
    searchRegexOffThread: regexSearch.search,
    compileMemory: config.cacheImpactBytes > 0 ? new RecentCompiles(config.cacheImpactBytes) : undefined,
    historyFacts: new HistoryFactsCache({ maxBytes: config.historyFactsBytes, maxConversations: config.historyFactsConversations }, store.lineage),
    calibration,
  });
  // Message sizes come from the codec's kept encodings; the message limit bounds GetState answers
  // and ReadMessages pages alike.
  const messageBytes = (message: Message) => codec.encodeStoredMessage(message).byteLength;
  const reads: ConversationReads = {
    stateLimit: new StateSizeLimit(config.maxRequestBytes, { messageBytes, restBytes: (state) => codec.encodeStateRest(state).byteLength }),
    windows: new MessageWindows(store, { messageBytes, messageLimitBytes: config.maxRequestBytes, maxPinnedBytes: config.readPinBytes }),
    toolResultTexts: new ToolResultTexts(defaultToolResultTextBytes),
    recall: new HistoryRecall(store, new RecallTermIndex(config.recallIndexBytes), { scanBytes: config.recallScanBytes }),
  };
  const usageLedger = config.usageEntriesPerConversation > 0 ? new UsageLedger({ store, bounds: { maxEntriesPerConversation: config.usageEntriesPerConversation } }) : undefined;
  return { store, codec, tokenCounts, telemetry, regexSearch, compiler, calibration, usageLedger, reads };
}

/** Everything the transport (server.ts) serves with, composed once per server. */
export interface Sidecar {
  config: Config;
  logger: Logger;
  application: Application;
  health: HealthStatus;
  metrics: Metrics;
  tracing?: Tracing;
  /** What the metrics path answers with. */
  metricsText: () => Promise<string>;
  /** The inspector's static files (`--inspector`). */
  inspector?: InspectorAssets;
  /** Decides on a call's headers before its body is read (policy/admission.ts). */
  admission: Admission;
  /** The one list of policy interceptors, outermost first, every path runs. */
  policy: Interceptor[];
  /** Registers every service on a router (services/routes.ts). */
  registerServices: (router: ConnectRouter, serviceDescriptor?: <S extends DescService>(service: S) => S) => void;
  /** Calls in flight, which the bounded shutdown waits for. */
  calls: CallTracker;
  streams: StreamCounter;
  /** Aborted at shutdown: streaming RPCs end with UNAVAILABLE. */
  endStreams: AbortController;
}

/** The sidecar over `parts.store`: the application, the services' dependencies, the policy and the operations objects. */
export function composeSidecar(config: Config, parts: SidecarParts): Sidecar {
  const logger = parts.logger ?? createLogger(config.logLevel);
  const metrics = parts.metrics ?? new Metrics();
  const tracing = parts.tracing;
  const codec = parts.codec ?? new Codec({ recentMessageBytes: config.recentMessageBytes, retainedEncodingBytes: config.retainedEncodingBytes });
  // Every store operation the services make is timed (and spanned when tracing is on).
  const application = composeApplication(config, new ObservedStore(parts.store, metrics, tracing), codec);
  const { store, telemetry } = application;
  telemetry.listen(metrics.observe);
  if (tracing) telemetry.listen(tracing.observe);
  parts.shareTelemetry?.(telemetry);
  const health = new HealthStatus(new Set(contextdServiceNames));
  const endStreams = new AbortController();
  const streams = new StreamCounter();
  const tokens = new BearerTokens(config.authTokens);
  const origins = new RequestOrigins({ allowedHosts: config.allowedHosts, checkHost: config.authTokens.length === 0, metricsPath: config.metricsPath, tls: config.tlsCert !== "" });
  const admission = new Admission(tokens, new RequestMemoryBudget(config.maxBufferedRequestBytes), config.requestBodyTimeoutMs, config.maxRequestBytes, origins);
  const renderMetrics = () => metrics.render();

  const registerServices = routes({
    context: {
      store,
      compiler: application.compiler,
      calibration: application.calibration,
      usageLedger: application.usageLedger,
      publish: telemetry.publish,
      summarizeTimeoutMs: config.summarizeTimeoutMs,
      compiled: tracing ? (request, result) => tracing.annotateCompile(request, result) : undefined,
    },
    conversation: { store, shutdown: endStreams.signal, watchHeartbeatMs: parts.watchHeartbeatMs ?? 15_000, reads: application.reads, usageLedger: application.usageLedger },
    telemetry,
    health,
  });
  // The one list of policy interceptors, outermost first: every call, on every path, is timed and
  // logged, then given its deadline, authenticated, and checked.
  const policy = [
    // Tracing, when on, is outermost: its span is current for everything the call does.
    ...(tracing ? [traceCalls(tracing)] : []),
    instrumentCalls(logger, metrics),
    enforceDeadlines(),
    authenticate(tokens),
    limitMessagesPerRequest(config.maxMessages),
    limitRequestStrings(),
    guardStreams(
      { maxStreams: config.maxStreams, maxStreamsPerTenant: streamsPerTenant(config.maxStreams, config.maxStreamsPerTenant, config.authTokens.map((token) => token.tenant)) },
      streams,
      endStreams.signal,
    ),
  ];
  return {
    config,
    logger,
    application,
    health,
    metrics,
    tracing,
    metricsText: parts.gatherMetrics ? parts.gatherMetrics(renderMetrics) : renderMetrics,
    inspector: config.inspector ? new InspectorAssets() : undefined,
    admission,
    policy,
    registerServices,
    calls: new CallTracker(),
    streams,
    endStreams,
  };
}

/**
 * The codec and the store the configuration names (memory, Redis, Redis Cluster or Postgres),
 * sharing one codec, which also counts the tokens of the messages the store writes with the
 * estimator most compiles use. `tlsCa`: the PEM `--redis-tls-ca` names, read by the caller.
 */
export async function openConfiguredStore(config: Config, tlsCa: { tlsCa?: string }): Promise<{ codec: Codec; store: ConversationStore }> {
  const codec = new Codec({ recentMessageBytes: config.recentMessageBytes, retainedEncodingBytes: config.retainedEncodingBytes }, await storedTokenEstimator(config.storedTokenEstimator));
  const store = await createConversationStore({
    codec,
    redisUrl: config.redisUrl,
    redis: { clusterNodes: config.redisClusterNodes, waitReplicas: config.redisWaitReplicas, waitTimeoutMs: config.redisWaitTimeoutMs, commandTimeoutMs: config.redisCommandTimeoutMs, ...tlsCa },
    postgresUrl: config.postgresUrl,
    strictToolRounds: config.strictToolRounds,
    decodedStateBytes: config.decodedStateBytes,
    keptTailBytes: config.keptTailBytes,
    prefetchConversations: config.prefetchConversations,
    listedIdBytes: config.listedIdBytes,
    values: storedValuesOf(config.encryptionKeys),
    shareEncryptedForks: config.shareEncryptedForks,
    retention: {
      expiry: new ConversationExpiry({ defaultMs: config.idleTtlMs, perTenant: new Map(Object.entries(config.idleTtlPerTenant)) }),
      expirySweepMs: config.expirySweepMs,
      historyBound: new HistoryBound({ defaultLimits: { maxMessages: config.pruneMaxMessages, maxBytes: config.pruneMaxBytes }, perTenant: new Map(Object.entries(config.prunePerTenant)) }),
    },
    history: { maxChangesPerConversation: config.historyRetentionVersions, historyLimits: { ...defaultHistoryLimits, maxReplayMessages: config.historyReadMessages, maxUndoBytes: config.historyUndoBytes } },
  });
  return { codec, store };
}
