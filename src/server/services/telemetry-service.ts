import type { ServiceImpl } from "@connectrpc/connect";
import type { TelemetryService } from "#gen/contextd/v1/telemetry_service_pb";
import { tenantKey } from "../policy/call-context.js";
import type { TelemetryHub } from "../../application/telemetry-hub.js";

/** TelemetryService: live observer events of every compile, per subscriber bounded. */
export function telemetryService(hub: TelemetryHub): ServiceImpl<typeof TelemetryService> {
  return {
    async *watchEvents(request, context) {
      // A tenant's token sees only its own conversations (the auth interceptor has already
      // rejected a conversation id outside the tenant).
      const tenant = context.values.get(tenantKey);
      const filter = { conversationId: request.conversationId, conversationPrefix: tenant ? `${tenant}/` : "" };
      for await (const { event, dropped } of hub.subscribe(filter, context.signal)) {
        yield { event, dropped };
      }
    },
  };
}
