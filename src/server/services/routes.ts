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
import { conversationService, type ConversationServiceDependencies } from "./conversation-service.js";
import { telemetryService } from "./telemetry-service.js";
import type { TelemetryHub } from "../../application/telemetry-hub.js";

/** The contextd services whose health follows the store. */
export const contextdServiceNames = [ContextService.typeName, ConversationService.typeName, TelemetryService.typeName];

/**
 * What each service is a function of; `server/composition-root.ts` builds it from the
 * configuration, a unit test from whatever it needs.
 */
export interface RouteDependencies {
  context: ContextServiceDependencies;
  conversation: ConversationServiceDependencies;
  /** Fan-out of compile observer events WatchEvents subscribes to. */
  telemetry: TelemetryHub;
  health: HealthStatus;
}

type ServiceDescriptorMap = <S extends DescService>(service: S) => S;

/**
 * The implementations are built once; the returned function may register them on several routers.
 * `serviceDescriptor` lets the binary adapter register the contextd services with its own request
 * descriptors (see `binary-requests.ts`); health and reflection always use the real ones.
 */
export function routes(dependencies: RouteDependencies) {
  const context = contextService(dependencies.context);
  const conversation = conversationService(dependencies.conversation);
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
