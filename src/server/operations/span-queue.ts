import type { Context } from "@opentelemetry/api";
import { TraceFlags } from "@opentelemetry/api";
import type { ExportResult } from "@opentelemetry/core";
import type { ReadableSpan, Span, SpanExporter, SpanProcessor } from "@opentelemetry/sdk-trace";

/**
 * Bounds in bytes what finished spans hold while they wait for the collector: from the moment a
 * span ends until its export is answered (the batch processor's queue, and the exporter's own
 * requests in flight and retries). A span that would take the total past `maxBytes`, or the count
 * past the batch processor's `maxSpans` (so that processor never drops a span this bound counted),
 * is dropped here and counted in `dropped`.
 *
 * Why: the batch processor bounds its queue in spans (2,048), and a span was as large as the
 * strings it carried: 80 compiles with 4 MB models against a collector that never answered held
 * +531 MB and ran a 512 MB heap out of memory. Attributes are now truncated (`Tracing`), and this
 * bound holds whatever a span carries.
 *
 * Use: `new SpanQueueBound(bounds)`; wrap the exporter with `exporter(...)`, and hand the processor
 * built on that exporter to `processor(...)`.
 */
export class SpanQueueBound {
  private held = 0;
  private count = 0;
  private readonly sizes = new WeakMap<ReadableSpan, number>();
  /** Spans dropped because the bound was reached, since start. */
  dropped = 0;

  constructor(private readonly bounds: { maxBytes: number; maxSpans: number }) {}

  /** Bytes of the spans waiting now. */
  get heldBytes(): number {
    return this.held;
  }

  /** `exporter`, releasing what its spans held once their export is answered (success or not). */
  exporter(exporter: SpanExporter): SpanExporter {
    return {
      export: (spans, resultCallback) => {
        let answered = false;
        exporter.export(spans, (result: ExportResult) => {
          if (!answered) {
            answered = true;
            for (const span of spans) this.release(span);
          }
          resultCallback(result);
        });
      },
      shutdown: () => exporter.shutdown(),
      forceFlush: () => exporter.forceFlush?.() ?? Promise.resolve(),
    };
  }

  /** `processor`, handed only the spans that fit. */
  processor(processor: SpanProcessor): SpanProcessor {
    return {
      onStart: (span: Span, parentContext: Context) => processor.onStart(span, parentContext),
      onEnd: (span: ReadableSpan) => {
        // As the batch processor does: unsampled spans are not queued, so not counted.
        if ((span.spanContext().traceFlags & TraceFlags.SAMPLED) === 0) return processor.onEnd(span);
        const bytes = spanBytes(span);
        if (this.held + bytes > this.bounds.maxBytes || this.count >= this.bounds.maxSpans) {
          this.dropped++;
          return;
        }
        this.held += bytes;
        this.count++;
        this.sizes.set(span, bytes);
        processor.onEnd(span);
      },
      shutdown: () => processor.shutdown(),
      forceFlush: () => processor.forceFlush(),
    };
  }

  private release(span: ReadableSpan): void {
    const bytes = this.sizes.get(span);
    if (bytes === undefined) return;
    this.sizes.delete(span);
    this.held -= bytes;
    this.count--;
  }
}

/** About what a finished span holds: its name, attributes and events, strings at a byte a character. */
export function spanBytes(span: ReadableSpan): number {
  let bytes = 512 + span.name.length + attributeBytes(span.attributes);
  for (const event of span.events) bytes += 64 + event.name.length + attributeBytes(event.attributes ?? {});
  return bytes;
}

function attributeBytes(attributes: Readonly<Record<string, unknown>>): number {
  let bytes = 0;
  for (const key in attributes) {
    const value = attributes[key];
    bytes += 32 + key.length;
    if (typeof value === "string") bytes += value.length;
    else if (Array.isArray(value)) for (const item of value) bytes += typeof item === "string" ? item.length + 8 : 8;
    else bytes += 8;
  }
  return bytes;
}
