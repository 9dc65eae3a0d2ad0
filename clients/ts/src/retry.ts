// Backoff for calls that failed with UNAVAILABLE, the same policy and defaults as the Go and Python
// clients, so that agents in any language ride out a sidecar restart alike.
import { Code } from "@connectrpc/connect";
import { ContextdError } from "./errors.js";

/**
 * How a client retries calls that failed with UNAVAILABLE (the sidecar is starting or stopping,
 * or its store is unreachable). Only calls that are safe to repeat are retried: reads, compiles
 * that do not commit, and writes with an idempotency key; the keyed writes (commits, compiles
 * with `commit`, turns) are also retried after DEADLINE_EXCEEDED and after an answer over the
 * receive limit, since they may have applied.
 *
 * The wait before retry n is random below min(initialBackoffMs * multiplier^(n-1), maxBackoffMs)
 * ("full jitter"), so many agents retrying at once do not stampede the sidecar.
 */
export interface RetryPolicy {
  /** Counts the first try; 1 disables retries. */
  maxAttempts: number;
  initialBackoffMs: number;
  maxBackoffMs: number;
  multiplier: number;
}

/** Rides out a sidecar restart of a few seconds. */
export const DEFAULT_RETRY_POLICY: Readonly<RetryPolicy> = Object.freeze({ maxAttempts: 6, initialBackoffMs: 100, maxBackoffMs: 2000, multiplier: 2 });

/** The upper bound, in milliseconds, of the wait before retry number `retry` (1-based). */
export function backoffBound(policy: RetryPolicy, retry: number): number {
  return Math.min(policy.initialBackoffMs * policy.multiplier ** (retry - 1), policy.maxBackoffMs);
}

/** A jittered wait, in milliseconds, before retry number `retry`. */
export function backoff(policy: RetryPolicy, retry: number): number {
  return Math.random() * backoffBound(policy, retry);
}

/** Waits `ms`, or rejects with CANCELLED when `signal` aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new ContextdError("cancelled while waiting to retry", Code.Canceled, { cause: signal.reason }));
    const onAbort = () => {
      clearTimeout(timer);
      reject(new ContextdError("cancelled while waiting to retry", Code.Canceled, { cause: signal?.reason }));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** One call's deadline across its retries; undefined = unbounded. */
export class Deadline {
  private readonly at: number | undefined;

  constructor(timeoutMs: number | undefined) {
    this.at = timeoutMs === undefined || timeoutMs <= 0 ? undefined : performance.now() + timeoutMs;
  }

  /** Milliseconds left (at least 0), or undefined when unbounded. */
  remaining(): number | undefined {
    return this.at === undefined ? undefined : Math.max(Math.ceil(this.at - performance.now()), 0);
  }

  /** Whether a pause of `ms` still leaves time for another try. */
  allows(ms: number): boolean {
    return this.at === undefined || performance.now() + ms < this.at;
  }
}
