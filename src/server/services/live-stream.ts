import { setImmediate as nextTurn } from "node:timers/promises";

/** One item of `whileRunning`: something `run` sent, or its result (always last). */
export type LiveItem<E, R> = { sent: E } | { result: R };

/**
 * Runs `run` and yields what it sends as it sends it, then its result; a failure of `run` is
 * thrown after what it sent before failing. Items wait in a queue while the consumer is busy, so
 * nothing is lost or reordered. For a CPU-bound `run`, pass `yieldToEventLoop` as its stage
 * boundary: the generator only gets to run (and the transport to write) when `run` waits.
 */
export async function* whileRunning<E, R>(run: (send: (item: E) => void) => Promise<R>): AsyncGenerator<LiveItem<E, R>> {
  const queue: E[] = [];
  let wake: (() => void) | undefined;
  let outcome: { result: R } | { error: unknown } | undefined;
  run((item) => {
    queue.push(item);
    wake?.();
  }).then(
    (result) => {
      outcome = { result };
      wake?.();
    },
    (error: unknown) => {
      outcome = { error };
      wake?.();
    },
  );
  for (;;) {
    while (queue.length > 0) yield { sent: queue.shift()! };
    if (outcome) {
      if ("error" in outcome) throw outcome.error;
      yield outcome;
      return;
    }
    await new Promise<void>((resolve) => (wake = resolve));
    wake = undefined;
  }
}

/** A stage boundary that lets pending I/O (stream writes) run before the next CPU-bound stage. */
export function yieldToEventLoop(): Promise<void> {
  return nextTurn();
}
