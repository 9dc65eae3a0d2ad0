import type { ServiceImpl } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  Health,
  HealthCheckResponse_ServingStatus as ServingStatus,
} from "#gen/grpc/health/v1/health_pb";

export { ServingStatus };

/**
 * The serving status the health service reports. The empty service name stands for the whole
 * sidecar; every contextd service reports the same status, because all of them depend on the store.
 */
export class HealthStatus {
  private status = ServingStatus.NOT_SERVING;
  private why = "starting";
  private readonly listeners = new Set<(status: ServingStatus) => void>();

  constructor(private readonly services: ReadonlySet<string>) {}

  get current(): ServingStatus {
    return this.status;
  }

  /** Why the status is not SERVING ("" while SERVING): the store's last failure, "shutting down", … */
  get reason(): string {
    return this.why;
  }

  set(status: ServingStatus, reason = ""): void {
    this.why = status === ServingStatus.SERVING ? "" : reason;
    if (status === this.status) return;
    this.status = status;
    for (const listener of this.listeners) listener(status);
  }

  /** Whether `service` is one this server reports on ("" is the server as a whole). */
  knows(service: string): boolean {
    return service === "" || this.services.has(service);
  }

  subscribe(listener: (status: ServingStatus) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

/**
 * The response header that says why health is not SERVING. The health protocol's answer has only
 * a status; a client waiting for readiness quotes this header so that its timeout names the cause
 * (say, `connect ECONNREFUSED 127.0.0.1:6999`). Printable ASCII, at most `maxReasonLength` characters.
 */
export const healthReasonHeader = "contextd-health-reason";
const maxReasonLength = 300;

export function healthService(health: HealthStatus): ServiceImpl<typeof Health> {
  return {
    check(request, context) {
      if (!health.knows(request.service)) {
        throw new ConnectError(`unknown service "${request.service}"`, Code.NotFound);
      }
      const reason = health.reason;
      if (health.current !== ServingStatus.SERVING && reason !== "") {
        context.responseHeader.set(healthReasonHeader, reason.replace(/[^\x20-\x7e]/g, "?").slice(0, maxReasonLength));
      }
      return { status: health.current };
    },
    async *watch(request, context) {
      if (!health.knows(request.service)) {
        yield { status: ServingStatus.SERVICE_UNKNOWN };
        return;
      }
      // Send the current status, then every change until the caller or the server goes away.
      let wake: (() => void) | undefined;
      let latest = health.current;
      const unsubscribe = health.subscribe((status) => {
        latest = status;
        wake?.();
      });
      const aborted = new Promise<void>((resolve) =>
        context.signal.addEventListener("abort", () => resolve(), { once: true }),
      );
      try {
        let sent: ServingStatus | undefined;
        while (!context.signal.aborted) {
          if (latest !== sent) {
            sent = latest;
            yield { status: sent };
          }
          await Promise.race([new Promise<void>((resolve) => (wake = resolve)), aborted]);
        }
      } finally {
        unsubscribe();
      }
    },
  };
}
