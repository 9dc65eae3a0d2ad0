import type { ObserverEvent } from "#gen/contextd/v1/telemetry_pb";

/**
 * Receives the observer events of a compile as they happen. The compile pipeline calls it; the
 * server fans events out to `CompileStream` and `TelemetryService` subscribers. An observer must
 * never throw into the pipeline: telemetry never changes results.
 */
export type Observer = (event: ObserverEvent) => void;
