import type { HistoryFactsLimits } from "../../application/history-facts-cache.js";
import type { ConnectRouter } from "@connectrpc/connect";
import { createRegistry, type DescService } from "@bufbuild/protobuf";
import { ContextService, file_contextd_v1_context_service } from "#gen/contextd/v1/context_service_pb";
import {
  ConversationService,
  file_contextd_v1_conversation_service,
} from "#gen/contextd/v1/conversation_service_pb";
import {
  TelemetryService,
  file_contextd_v1_telemetry_service,
} from "#gen/contextd/v1/telemetry_service_pb";
import { Health, file_grpc_health_v1_health } from "#gen/grpc/health/v1/health_pb";
import * as reflectionV1 from "#gen/grpc/reflection/v1/reflection_pb";
import * as reflectionV1alpha from "#gen/grpc/reflection/v1alpha/reflection_pb";
import { HealthStatus, healthService } from "../operations/health.js";
import { registerReflection } from "./reflection.js";
import { contextService, type ContextServiceDependencies } from "./context-service.js";
import type { TokenCountCache } from "../../core/tokens/token-count-cache.js";
import { conversationService } from "./conversation-service.js";
import { telemetryService } from "./telemetry-service.js";
import type { TelemetryHub } from "../../application/telemetry-hub.js";
import type { ConversationStore } from "../../store/conversation-store.js";
import type { RegexSearch } from "../../core/compile/compile-context.js";
import type { Codec } from "../../codec/codec.js";

/** The contextd services whose health follows the store. */
export const contextdServiceNames = [ContextService.typeName, ConversationService.typeName, TelemetryService.typeName];

/** Everything the routes depend on; built by `src/main.ts`, replaced by fakes in unit tests. */
export interface RouteDependencies {
  health: HealthStatus;
  /** Fan-out of compile observer events; services publish with `telemetry.publish`. */
  telemetry: TelemetryHub;
  /** Where conversations live (memory or Redis). */
  store: ConversationStore;
  /** Aborted at shutdown: streaming RPCs end with UNAVAILABLE. */
  shutdown: AbortSignal;
  /** Idle time after which a ConversationService.Watch stream sends a heartbeat. */
  watchHeartbeatMs: number;
  /** How long a CompileSession waits for each summarize_response. */
  summarizeTimeoutMs: number;
  /** Most text one compile may produce (`--max-compile-text-bytes`). */
  maxCompileTextBytes?: number;
  /** The server's per-message token counts (a fresh cache when not given). */
  tokenCounts?: TokenCountCache;
  /** See `ContextServiceDependencies.compiled`. */
  compiled?: ContextServiceDependencies["compiled"];
  /** Where long texts' built-in redaction patterns are searched, off the event loop. */
  searchRegexOffThread?: RegexSearch;
  /** Memory of recent compiles for `cache_impact` (`--cache-impact-bytes`). */
  cacheImpactBytes?: number;
  /** Keys of token calibration corrections cached (`--calibration-keys`); 0 = no calibration. */
  calibrationKeys?: number;
  /** See `ContextServiceDependencies.calibrationStorage`. */
  calibrationStorage?: ContextServiceDependencies["calibrationStorage"];
  /** The server's codec (message sizes for ConversationService's reads). */
  codec?: Codec;
  /** The largest GetState answer: the message limit, `--max-request-bytes`. */
  maxResponseBytes?: number;
  /** Bytes of messages ReadMessages keeps for page tokens (`--read-pin-bytes`). */
  readPinBytes?: number;
  /** Bounds of the history facts kept between compiles (`--history-facts-bytes`, `--history-facts-conversations`). */
  historyFacts?: HistoryFactsLimits;
}

type ServiceDescriptorMap = <S extends DescService>(service: S) => S;

/**
 * The implementations are built once; the returned function may register them on several routers.
 * `serviceDescriptor` lets the binary adapter register the contextd services with its own request
 * descriptors (see `binary-requests.ts`); health and reflection always use the real ones.
 */
export function routes(dependencies: RouteDependencies) {
  const context = contextService({
    store: dependencies.store,
    publish: dependencies.telemetry.publish,
    summarizeTimeoutMs: dependencies.summarizeTimeoutMs,
    maxCompileTextBytes: dependencies.maxCompileTextBytes,
    tokenCounts: dependencies.tokenCounts,
    compiled: dependencies.compiled,
    searchRegexOffThread: dependencies.searchRegexOffThread,
    cacheImpactBytes: dependencies.cacheImpactBytes,
    calibrationKeys: dependencies.calibrationKeys,
    calibrationStorage: dependencies.calibrationStorage,
    historyFacts: dependencies.historyFacts,
  });
  const conversation = conversationService(dependencies);
  const telemetry = telemetryService(dependencies.telemetry);
  return (router: ConnectRouter, serviceDescriptor: ServiceDescriptorMap = (service) => service) => {
    router.service(serviceDescriptor(ContextService), context);
    router.service(serviceDescriptor(ConversationService), conversation);
    router.service(serviceDescriptor(TelemetryService), telemetry);
    router.service(Health, healthService(dependencies.health));
    const registry = createRegistry(
      file_contextd_v1_context_service,
      file_contextd_v1_conversation_service,
      file_contextd_v1_telemetry_service,
      file_grpc_health_v1_health,
      reflectionV1.file_grpc_reflection_v1_reflection,
      reflectionV1alpha.file_grpc_reflection_v1alpha_reflection,
    );
    registerReflection(router, registry, [
      ...contextdServiceNames,
      Health.typeName,
      reflectionV1.ServerReflection.typeName,
      reflectionV1alpha.ServerReflection.typeName,
    ]);
  };
}
