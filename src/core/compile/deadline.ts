import { Code, ConnectError } from "@connectrpc/connect";

/**
 * Why it exists: compile stages are CPU-bound, so neither the call's deadline timer nor any other
 * caller (health checks included) gets the event loop while they run. Without help a call whose
 * caller had given up went on to the end (a 16 s regex, a 40 s token count), and a call without a
 * deadline held the loop for its whole length: 12 s for 16 MiB of random letters counted by the
 * TOKENIZER estimator (`npm run bench:event-loop`). Long loops call `check` instead; it reads the
 * clock only every few calls, so it costs nothing measurable on a small compile, and says when
 * `slice` ms of work have passed since the loop last had a turn. Stages that can wait then await
 * `pause`, which gives the event loop its turn (the context's `yieldToEventLoop`) and checks the
 * deadline again: the timer and the abort signal have had their chance to fire meanwhile.
 */

/** When the call ends: its abort signal, and/or the wall-clock time (`CompileContext.now`) of its deadline. */
export interface CallDeadline {
  signal?: AbortSignal;
  atMs?: number;
}

/** Units of work between two readings of the clock (one unit ≈ one message, or 1 KiB of text). */
const unitsBetweenReadings = 32;

/**
 * Milliseconds of work between two turns of the event loop. Small enough that a health check
 * waits at most a few tens of milliseconds behind the largest request; large enough that a compile
 * of a thousand messages (a few milliseconds) never yields.
 */
export const defaultSliceMs = 20;

export class DeadlineCheck {
  private units = 0;
  private sliceStartedMs: number;
  private due = false;

  constructor(
    private readonly deadline: CallDeadline | undefined,
    private readonly now: () => number,
    /** Gives the event loop a turn (e.g. `setImmediate`); without it `pause` never waits. */
    private readonly yieldToEventLoop?: () => Promise<void>,
    private readonly sliceMs = defaultSliceMs,
  ) {
    this.sliceStartedMs = yieldToEventLoop ? now() : 0;
  }

  /** True when `pause` can give the event loop a turn: work done only so that it can (a paced pre-count) is skipped otherwise. */
  get yields(): boolean {
    return this.yieldToEventLoop !== undefined;
  }

  /** No deadline and no yielding: `check` never throws, `pause` never waits. */
  static readonly none = new DeadlineCheck(undefined, () => 0);

  /**
   * DEADLINE_EXCEEDED (or the signal's own code, e.g. CANCELED) naming `stage` once the call is over.
   * `units` weighs the work done since the last call, so one huge text reads the clock at once.
   * True when a slice of work has passed since the event loop last had a turn: a caller that can
   * wait then awaits `pause`.
   */
  check(stage: string, units = 1): boolean {
    if (!this.deadline && !this.yieldToEventLoop) return false;
    this.units += units;
    if (this.units < unitsBetweenReadings) return this.due;
    this.units = 0;
    return this.checkNow(stage);
  }

  /** `check` reading the clock now (stage ends, before and after one long piece of work). */
  checkNow(stage: string): boolean {
    const deadline = this.deadline;
    if (!deadline && !this.yieldToEventLoop) return false;
    const nowMs = this.now();
    if (deadline) {
      const signal = deadline.signal;
      if (signal?.aborted) {
        const reason = signal.reason instanceof ConnectError ? signal.reason : undefined;
        throw new ConnectError(`${stage}: the call ended (${reason?.rawMessage ?? "aborted"}), the compile gave up`, reason?.code ?? Code.DeadlineExceeded);
      }
      if (deadline.atMs !== undefined && nowMs >= deadline.atMs) {
        throw new ConnectError(`${stage}: the call's deadline passed, the compile gave up`, Code.DeadlineExceeded);
      }
    }
    // A clock that went back (wall-clock adjustments) starts a new slice rather than never ending one.
    if (nowMs < this.sliceStartedMs) this.sliceStartedMs = nowMs;
    if (this.yieldToEventLoop && nowMs - this.sliceStartedMs >= this.sliceMs) this.due = true;
    return this.due;
  }

  /**
   * Gives the event loop a turn when `check` said one is due, then checks the deadline again.
   * `await` it only when `check` returned true, so the common case creates no promise.
   */
  async pause(stage: string): Promise<void> {
    if (!this.due || !this.yieldToEventLoop) return;
    await this.yieldToEventLoop();
    this.due = false;
    this.units = 0;
    this.sliceStartedMs = this.now();
    this.checkNow(stage);
  }

  /** `check` and, when due, `pause`: for loops whose steps are each worth a promise. */
  async checkAndPause(stage: string, units = 1): Promise<void> {
    if (this.check(stage, units)) await this.pause(stage);
  }
}
