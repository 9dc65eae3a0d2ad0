import type { StageTiming } from "#gen/contextd/v1/compile_pb";
import type { ObserverEvent } from "#gen/contextd/v1/telemetry_pb";
import type { CompileContext } from "./compile-context.js";

type EventBody = ObserverEvent["event"];

/**
 * Emits the observer events of one compile and times its stages. The observer is telemetry: an
 * exception it throws is swallowed so it can never change or fail a compile.
 */
export class CompileEvents {
  readonly compileId: string;
  readonly timings: StageTiming[] = [];
  private readonly started: bigint;
  private stageStarted: bigint;

  constructor(
    private readonly context: CompileContext,
    private readonly conversationId: string,
  ) {
    this.compileId = context.observer ? context.randomId() : "";
    this.started = context.monotonicNs();
    this.stageStarted = this.started;
  }

  /** Whether events go anywhere: work done only to emit them is skipped otherwise. */
  get observed(): boolean {
    return this.context.observer !== undefined;
  }

  emit(event: EventBody): void {
    const observer = this.context.observer;
    if (!observer) return;
    try {
      // A literal with every field set equals create(ObserverEventSchema, ...) without its
      // reflective walk, which matters at one message_dropped event per dropped message.
      observer({
        $typeName: "contextd.v1.ObserverEvent",
        conversationId: this.conversationId,
        compileId: this.compileId,
        timestampUnixMs: BigInt(this.context.now()),
        event,
      });
    } catch {
      // Telemetry never changes results.
    }
  }

  /**
   * Closes the running stage under `stage` and starts the next one; returns the context's
   * `stageBoundary` wait (the caller awaits it) so a stream can send the events so far.
   */
  stageDone(stage: string): Promise<void> | undefined {
    const now = this.context.monotonicNs();
    const timing: StageTiming = { $typeName: "contextd.v1.StageTiming", stage, durationNs: now - this.stageStarted };
    this.stageStarted = now;
    this.timings.push(timing);
    this.emit({ case: "stageTiming", value: timing });
    const boundary = this.context.stageBoundary?.();
    // The wait is not part of the next stage's time.
    if (boundary) return boundary.then(() => void (this.stageStarted = this.context.monotonicNs()));
    return undefined;
  }

  /** Nanoseconds since the compile started. */
  elapsedNs(): bigint {
    return this.context.monotonicNs() - this.started;
  }
}
