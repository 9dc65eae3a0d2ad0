import type { ServiceImpl } from "@connectrpc/connect";
import type { ContextService } from "../../../gen/ts/contextd/v1/context_service_pb.js";

/** ContextService: compile, count, render. Methods not listed answer UNIMPLEMENTED. */
export function contextService(): Partial<ServiceImpl<typeof ContextService>> {
  return {};
}
