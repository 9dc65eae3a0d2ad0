/**
 * Counts the calls in progress, so a shutdown can wait for them (`drained`) and `/metrics` can
 * report them. One owner for "is a call over": each call's `settle` is idempotent, because both
 * the end of our side and the stream's close report it.
 */
export class CallTracker {
  private count = 0;
  private waiters: (() => void)[] = [];

  get inFlight(): number {
    return this.count;
  }

  /** Counts a new call; the returned function ends it (idempotent). */
  track(): () => void {
    this.count++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.count--;
      if (this.count === 0) for (const wake of this.waiters.splice(0)) wake();
    };
  }

  /** Resolves true once no call is in progress, or false after `timeoutMs`. */
  async drained(timeoutMs: number): Promise<boolean> {
    if (this.count === 0) return true;
    let timer: NodeJS.Timeout | undefined;
    const idle = new Promise<boolean>((resolve) => this.waiters.push(() => resolve(true)));
    const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    const result = await Promise.race([idle, late]);
    clearTimeout(timer);
    return result;
  }
}
