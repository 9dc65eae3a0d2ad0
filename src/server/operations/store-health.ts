import type { ConversationStore } from "../../store/conversation-store.js";
import { type HealthStatus, ServingStatus } from "./health.js";
import type { Logger } from "./logger.js";

/**
 * Drives health from the store: pings it every `intervalMs` (and once at once), SERVING while
 * pings succeed, NOT_SERVING while they fail or take longer than the interval. Logs each change.
 * `firstCheck` settles after the first ping; `stop` ends polling (shutdown sets NOT_SERVING itself).
 */
export function pollStoreHealth(store: Pick<ConversationStore, "ping">, health: HealthStatus, intervalMs: number, logger: Logger): { firstCheck: Promise<void>; stop: () => void } {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const check = async () => {
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
      failure = error instanceof Error ? error.message : String(error);
    } finally {
      clearTimeout(timeout);
    }
    if (stopped) return;
    const status = failure === "" ? ServingStatus.SERVING : ServingStatus.NOT_SERVING;
    if (status !== health.current) {
      if (status === ServingStatus.SERVING) logger.log("info", "store reachable: SERVING");
      else logger.log("error", "store unreachable: NOT_SERVING", { error: failure });
    }
    health.set(status);
    timer = setTimeout(check, intervalMs);
  };
  return {
    firstCheck: check(),
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
