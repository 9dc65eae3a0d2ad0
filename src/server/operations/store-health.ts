import type { ConversationStore } from "../../store/conversation-store.js";
import { type HealthStatus, ServingStatus } from "./health.js";
import type { Logger } from "./logger.js";

/** How often "store still unreachable" repeats while the store stays down: 1 s, 2 s, 4 s … then every minute. */
const firstRepeatMs = 1_000;
const maxRepeatMs = 60_000;

/**
 * Drives health from the store: pings it every `intervalMs` (and once at once), SERVING while
 * pings succeed, NOT_SERVING while they fail or take longer than the interval. The health status
 * carries the last failure as its reason (the Check answer's `contextd-health-reason` header).
 *
 * It exists to make a wrong or unreachable store loud: a sidecar started with a Redis URL nobody
 * listens on used to print one info line saying `"reachable":false` and then nothing, while
 * clients waited 30 s for a NOT_SERVING without a cause. Now the first check is always logged
 * (reachable, or the cause at level error), and while the store stays down the cause is logged
 * again with backoff (1 s, 2 s, 4 s … every minute), and at once when the cause changes.
 * `firstCheck` settles after the first ping with its failure ("" when reachable); `stop` ends
 * polling (shutdown sets NOT_SERVING itself).
 */
export function pollStoreHealth(
  store: Pick<ConversationStore, "ping">,
  health: HealthStatus,
  intervalMs: number,
  logger: Logger,
  now: () => number = Date.now,
): { firstCheck: Promise<string>; stop: () => void } {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let first = true;
  let downSince = 0;
  let lastFailure = "";
  let nextRepeatAt = 0;
  let repeatMs = firstRepeatMs;
  const check = async (): Promise<string> => {
    let failure = "";
    let timeout: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        store.ping(),
        new Promise<never>((_, reject) => {
          timeout = setTimeout(() => reject(new Error(`store ping took longer than ${intervalMs} ms`)), intervalMs);
        }),
      ]);
    } catch (error) {
      failure = (error instanceof Error ? error.message : String(error)) || "store ping failed";
    } finally {
      clearTimeout(timeout);
    }
    if (stopped) return failure;
    const at = now();
    if (failure === "") {
      if (first || health.current !== ServingStatus.SERVING) {
        logger.log("info", "store reachable: SERVING", downSince > 0 ? { downMs: at - downSince } : {});
      }
      downSince = 0;
      health.set(ServingStatus.SERVING);
    } else {
      const wentDown = first || health.current === ServingStatus.SERVING;
      if (wentDown) {
        downSince = at;
        repeatMs = firstRepeatMs;
        logger.log("error", "store unreachable: NOT_SERVING", { error: failure });
        nextRepeatAt = at + repeatMs;
      } else if (failure !== lastFailure || at >= nextRepeatAt) {
        logger.log("error", "store still unreachable: NOT_SERVING", { error: failure, downMs: at - downSince });
        repeatMs = Math.min(repeatMs * 2, maxRepeatMs);
        nextRepeatAt = at + repeatMs;
      }
      health.set(ServingStatus.NOT_SERVING, failure);
    }
    first = false;
    lastFailure = failure;
    timer = setTimeout(check, intervalMs);
    return failure;
  };
  return {
    firstCheck: check(),
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
