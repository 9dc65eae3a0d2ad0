import type { ObserverEvent } from "#gen/contextd/v1/telemetry_pb";
import type { CompileContext } from "./compile-context.js";

type EventBody = ObserverEvent["event"];

/**
 * Emits the observer events of one compile (its stages' events come from `StageRunner`). The
 * observer is telemetry: an exception it throws is swallowed so it can never change or fail a compile.
 */
export class CompileEvents {
  readonly compileId: string;
  /** When the compile started (`CompileContext.monotonicNs`): also when its first stage did. */
  readonly startedNs: bigint;

  constructor(
    private readonly context: CompileContext,
    private readonly conversationId: string,
  ) {
    this.compileId = context.observer ? context.randomId() : "";
    this.startedNs = context.monotonicNs();
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

  /** Nanoseconds since the compile started. */
  elapsedNs(): bigint {
    return this.context.monotonicNs() - this.startedNs;
  }
}
