import { Code, ConnectError } from "@connectrpc/connect";

/**
 * Why it exists: compile stages are synchronous, so the call's deadline timer cannot fire while
 * they run, and a call whose caller has given up went on to the end (a 16 s regex, a 40 s token
 * count) before its late answer was thrown away. Long loops call `check` instead; it reads the
 * clock only every few calls, so it costs nothing measurable on a small compile.
 */

/** When the call ends: its abort signal, and/or the wall-clock time (`CompileContext.now`) of its deadline. */
export interface CallDeadline {
  signal?: AbortSignal;
  atMs?: number;
}

/** Units of work between two readings of the clock (one unit ≈ one message, or 1 KiB of text). */
const unitsBetweenReadings = 32;

export class DeadlineCheck {
  private units = 0;

  constructor(
    private readonly deadline: CallDeadline | undefined,
    private readonly now: () => number,
  ) {}

  /** No deadline: `check` never throws. */
  static readonly none = new DeadlineCheck(undefined, () => 0);

  /**
   * DEADLINE_EXCEEDED (or the signal's own code, e.g. CANCELED) naming `stage` once the call is over.
   * `units` weighs the work done since the last call, so one huge text reads the clock at once.
   */
  check(stage: string, units = 1): void {
    const deadline = this.deadline;
    if (!deadline) return;
    this.units += units;
    if (this.units < unitsBetweenReadings) return;
    this.units = 0;
    this.checkNow(stage);
  }

  /** `check` reading the clock now (stage ends, before and after one long piece of work). */
  checkNow(stage: string): void {
    const deadline = this.deadline;
    if (!deadline) return;
    const signal = deadline.signal;
    if (signal?.aborted) {
      const reason = signal.reason instanceof ConnectError ? signal.reason : undefined;
      throw new ConnectError(`${stage}: the call ended (${reason?.rawMessage ?? "aborted"}), the compile gave up`, reason?.code ?? Code.DeadlineExceeded);
    }
    if (deadline.atMs !== undefined && this.now() >= deadline.atMs) {
      throw new ConnectError(`${stage}: the call's deadline passed, the compile gave up`, Code.DeadlineExceeded);
    }
  }
}
