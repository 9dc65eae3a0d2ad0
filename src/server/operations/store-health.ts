import { setImmediate as nextTurn, setTimeout as delay } from "node:timers/promises";
import type { ConversationStore } from "../../store/conversation-store.js";
import { type HealthStatus, ServingStatus } from "./health.js";
import type { Logger } from "./logger.js";

/** Intervals a ping may go unanswered before health is NOT_SERVING (see `pollStoreHealth`). */
export const pingTimeoutIntervals = 3;

/** How often "store still unreachable" repeats while the store stays down: 1 s, 2 s, 4 s … then every minute. */
const firstRepeatMs = 1_000;
const maxRepeatMs = 60_000;

/**
 * Drives health from the store: pings it every `intervalMs` (and once at once), SERVING while
 * pings succeed, NOT_SERVING while they fail or go unanswered for `pingTimeoutIntervals` intervals. The health status
 * carries the last failure as its reason (the Check answer's `contextd-health-reason` header).
 *
 * It exists to make a wrong or unreachable store loud: a sidecar started with a Redis URL nobody
 * listens on used to print one info line saying `"reachable":false` and then nothing, while
 * clients waited 30 s for a NOT_SERVING without a cause. Now the first check is always logged
 * (reachable, or the cause at level error), and while the store stays down the cause is logged
 * again with backoff (1 s, 2 s, 4 s … every minute), and at once when the cause changes.
 * `firstCheck` settles after the first ping with its failure ("" when reachable); `stop` ends
 * polling (shutdown sets NOT_SERVING itself).
 *
 * Why a ping gets three intervals, and is late only if its answer has not come once the event loop
 * has had a turn to read it (`pingWithin`): a ping shares the store's connection (Redis) or pool
 * (Postgres) with the sidecar's own requests and waits behind them, and a busy process runs an
 * overdue timer before it reads the socket that already holds the answer. With one interval and no
 * such turn, 8 concurrent readers of a 12 MB tool result on a loaded machine (load 15-17, the CI
 * run that failed) made the sidecar report NOT_SERVING for a store that answered every ping.
 * Kubernetes' probes count three failures before acting for the same reason.
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
    const failure = await pingWithin(store, pingTimeoutIntervals * intervalMs);
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

/**
 * The store's ping, "" when it answered within `timeoutMs`, else why not. When the deadline's
 * timer fires, the answer may be in the socket already, unread because this process was busy:
 * timers run before the event loop reads its sockets, so the verdict waits one turn of the loop
 * (`setImmediate` runs after that read) and counts an answer read in it as in time.
 */
async function pingWithin(store: Pick<ConversationStore, "ping">, timeoutMs: number): Promise<string> {
  let answer: string | undefined;
  const ping = store.ping().then(
    () => (answer = ""),
    (error: unknown) => (answer = (error instanceof Error ? error.message : String(error)) || "store ping failed"),
  );
  const answered = new AbortController();
  const overdue = delay(timeoutMs, undefined, { signal: answered.signal }).then(
    async () => {
      await nextTurn();
      return answer ?? `store ping took longer than ${timeoutMs} ms`;
    },
    () => "",
  );
  try {
    return await Promise.race([ping, overdue]);
  } finally {
    answered.abort();
  }
}
