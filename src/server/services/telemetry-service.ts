import type { ServiceImpl } from "@connectrpc/connect";
import type { TelemetryService } from "../../../gen/ts/contextd/v1/telemetry_service_pb.js";

/** TelemetryService: live observer events. Methods not listed answer UNIMPLEMENTED. */
export function telemetryService(): Partial<ServiceImpl<typeof TelemetryService>> {
  return {};
}
