import { AsyncLocalStorage } from "node:async_hooks";
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Span, type Tracer } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { detectResources, envDetector, resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, TracerProvider, type SpanProcessor } from "@opentelemetry/sdk-trace";
import type { CompileRequest, CompileResult } from "#gen/contextd/v1/compile_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import type { ObserverEvent } from "#gen/contextd/v1/telemetry_pb";
import { SpanQueueBound } from "./span-queue.js";

/** Characters of a string attribute taken from a request (ids, model) before it is truncated with a marker. */
export const defaultMaxAttributeChars = 256;

/**
 * OpenTelemetry tracing: a SERVER span per RPC (parented on an incoming W3C `traceparent`), and
 * under it one span per compile stage (from the compile's `stageTiming` observer events: the core
 * stays free of OpenTelemetry) and per store operation. Off unless the standard environment asks
 * for it (`tracingFromEnvironment`); when off none of this is on the request path: the interceptor
 * is not installed, no observer is registered, and the store is not wrapped for spans.
 *
 * The provider is this server's own, never registered as the process-global one: two servers in a
 * process (tests) keep their traces apart, and nothing else in the process starts exporting. The
 * call's span travels with the call's async work through one AsyncLocalStorage per instance.
 *
 * Strings a request brings (conversation and message ids, the model) become attributes of at most
 * `maxAttributeChars` characters, cut with a marker saying how long they were: a span is kept until
 * the collector answers, and a 4 MB model made each one 4 MB (issue 29 #4). The SDK's own limit (the
 * same plus room for the marker) bounds every other attribute, without a marker.
 */
export class Tracing {
  private readonly provider: TracerProvider;
  private readonly tracer: Tracer;
  private readonly propagator = new W3CTraceContextPropagator();
  private readonly active = new AsyncLocalStorage<Span>();
  private readonly maxAttributeChars: number;

  constructor(processors: SpanProcessor[], serviceName: string, resourceAttributes: Attributes = {}, maxAttributeChars = defaultMaxAttributeChars, readonly queue?: SpanQueueBound) {
    this.maxAttributeChars = maxAttributeChars;
    this.provider = new TracerProvider({
      resource: resourceFromAttributes({ "service.name": serviceName, ...resourceAttributes }),
      spanProcessors: processors,
      spanLimits: { attributeValueLengthLimit: maxAttributeChars + 64 },
    });
    this.tracer = this.provider.getTracer("contextd");
  }

  /** `value` as an attribute: cut to `maxAttributeChars` with a marker when longer. */
  private bounded(value: string): string {
    return truncatedAttribute(value, this.maxAttributeChars);
  }

  /**
   * Runs `work` inside a new SERVER span for `method` ("package.Service/Method"), parented on the
   * `traceparent`/`tracestate` headers when present. `work` ends the span (through `end`) when the
   * call is over, which for a stream is after its last message.
   */
  runCall<T>(method: string, header: Headers, work: (span: Span) => T): T {
    const parent = this.propagator.extract(ROOT_CONTEXT, header, headerGetter);
    const slash = method.lastIndexOf("/");
    const span = this.tracer.startSpan(
      method,
      {
        kind: SpanKind.SERVER,
        attributes: { "rpc.system": "grpc", "rpc.service": method.slice(0, slash), "rpc.method": method.slice(slash + 1) },
      },
      parent,
    );
    return this.active.run(span, () => work(span));
  }

  /** Ends a call's span with its gRPC code (0 = OK); an error's message becomes the status. */
  endCall(span: Span, code: number, codeName: string, message?: string): void {
    span.setAttribute("rpc.grpc.status_code", code);
    if (code !== 0) span.setStatus({ code: SpanStatusCode.ERROR, message: message ?? codeName });
    span.end();
  }

  /** Runs `work` with `span` as the current call's span. */
  within<T>(span: Span, work: () => T): T {
    return this.active.run(span, work);
  }

  /** The span of the call running now, if any. */
  get current(): Span | undefined {
    return this.active.getStore();
  }

  /** A child span of the current call for a store operation; undefined outside a traced call. */
  startStoreSpan(operation: string, conversationId: string | undefined): Span | undefined {
    const parent = this.active.getStore();
    if (parent === undefined) return undefined;
    const attributes: Attributes = { "db.operation.name": operation, "db.system.name": "contextd" };
    if (conversationId !== undefined) attributes["contextd.conversation.id"] = this.bounded(conversationId);
    return this.tracer.startSpan(`store.${operation}`, { kind: SpanKind.INTERNAL, attributes }, trace.setSpan(ROOT_CONTEXT, parent));
  }

  /**
   * The compile observer: each `stageTiming` event closes a stage, so a span for it is made with
   * the stage's measured duration ending now, under the call's span; the compile's totals go on
   * the call's span.
   */
  readonly observe = (event: ObserverEvent): void => {
    const parent = this.active.getStore();
    if (parent === undefined) return;
    const body = event.event;
    if (body.case === "stageTiming") {
      const endMs = performance.timeOrigin + performance.now();
      const startMs = endMs - Number(body.value.durationNs) / 1e6;
      const span = this.tracer.startSpan(
        `compile.${body.value.stage}`,
        { kind: SpanKind.INTERNAL, startTime: startMs, attributes: { "contextd.compile.stage": body.value.stage, "contextd.compile.id": event.compileId } },
        trace.setSpan(ROOT_CONTEXT, parent),
      );
      span.end(endMs);
    } else if (body.case === "pipelineCompiled") {
      parent.setAttribute("contextd.compile.total_tokens", Number(body.value.totalCost));
    } else if (body.case === "messageDropped") {
      parent.addEvent("contextd.message_dropped", { "contextd.message.id": this.bounded(body.value.messageId), "contextd.reason": body.value.reason });
    } else if (body.case === "messageCleared") {
      parent.addEvent("contextd.message_cleared", {
        "contextd.message.id": this.bounded(body.value.messageId),
        "contextd.reason": body.value.reason,
        "contextd.freed_tokens": Number(body.value.freedTokens),
      });
    } else if (body.case === "historyHeadDropped") {
      parent.addEvent("contextd.history_head_dropped", {
        "contextd.messages.count": Number(body.value.count),
        "contextd.message.first_id": this.bounded(body.value.firstMessageId),
        "contextd.message.last_id": this.bounded(body.value.lastMessageId),
      });
    }
  };

  /**
   * GenAI semantic-convention attributes (provider, model, token usage) and contextd's own
   * (conversation id, versions, tokens trimmed) for a finished compile, on the current call's span.
   */
  annotateCompile(request: CompileRequest, result: CompileResult): void {
    const span = this.active.getStore();
    if (span === undefined) return;
    const attributes: Attributes = { "gen_ai.operation.name": "contextd.compile" };
    const provider = request.render?.provider ?? Provider.UNSPECIFIED;
    if (provider !== Provider.UNSPECIFIED) attributes["gen_ai.provider.name"] = genAiProviderName(provider);
    if (request.render?.model) attributes["gen_ai.request.model"] = this.bounded(request.render.model);
    if (request.conversationId !== "") attributes["contextd.conversation.id"] = this.bounded(request.conversationId);
    attributes["contextd.conversation.version"] = Number(result.version);
    if (result.committedVersion !== 0n) attributes["contextd.conversation.committed_version"] = Number(result.committedVersion);
    const usage = result.usage;
    if (usage) {
      // The prompt contextd built is the model call's input.
      attributes["gen_ai.usage.input_tokens"] = Number(usage.total);
      attributes["contextd.tokens.limit"] = Number(usage.limit);
      attributes["contextd.tokens.trimmed"] = Math.max(0, Number(usage.historyBeforeTrim - usage.history));
      attributes["contextd.tokens.estimator"] = usage.estimator;
    }
    attributes["contextd.compile.warnings"] = result.warnings.length;
    span.setAttributes(attributes);
  }

  /** Sends what is buffered and stops exporting. */
  shutdown(): Promise<void> {
    return this.provider.shutdown();
  }

  /** Sends what is buffered now. */
  forceFlush(): Promise<void> {
    return this.provider.forceFlush();
  }
}

/** `value` cut to `maxChars` characters (never inside a surrogate pair) and marked, when longer. */
export function truncatedAttribute(value: string, maxChars: number): string {
  if (value.length <= maxChars) return value;
  let end = maxChars;
  const last = value.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  return `${value.slice(0, end)}…[truncated, ${value.length} chars]`;
}

const headerGetter = {
  keys: (carrier: Headers) => [...carrier.keys()],
  get: (carrier: Headers, key: string) => carrier.get(key) ?? undefined,
};

// gen_ai.provider.name values of the GenAI semantic conventions.
function genAiProviderName(provider: Provider): string {
  switch (provider) {
    case Provider.OPENAI_CHAT:
    case Provider.OPENAI_RESPONSES:
      return "openai";
    case Provider.ANTHROPIC_MESSAGES:
      return "anthropic";
    case Provider.GEMINI:
      return "gcp.gemini";
    default:
      return Provider[provider]?.toLowerCase() ?? String(provider);
  }
}

/**
 * Tracing as the standard OpenTelemetry environment configures it, or undefined (off):
 * on when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set, unless
 * `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. OTLP over HTTP with protobuf bodies
 * (`OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL` http/protobuf, the default) or over gRPC (`grpc`);
 * http/json is refused with a clear error. The exporter reads its endpoint, headers, timeout and compression from the
 * same variables; `OTEL_BSP_*` tune the batching. `OTEL_SERVICE_NAME` (default
 * "contextd") and `OTEL_RESOURCE_ATTRIBUTES` describe the process.
 */
export async function tracingFromEnvironment(env: NodeJS.ProcessEnv, bounds: { queueBytes: number }): Promise<Tracing | undefined> {
  if (env.OTEL_SDK_DISABLED === "true") return undefined;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? "otlp").split(",").map((name) => name.trim());
  if (exporters.includes("none")) return undefined;
  if (!env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT && !env.OTEL_EXPORTER_OTLP_ENDPOINT) return undefined;
  if (!exporters.every((name) => name === "otlp")) {
    throw new Error(`OTEL_TRACES_EXPORTER "${env.OTEL_TRACES_EXPORTER}": contextd exports traces with "otlp" only (or "none")`);
  }
  const protocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL ?? "http/protobuf";
  if (protocol !== "http/protobuf" && protocol !== "grpc") {
    throw new Error(`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL "${protocol}": contextd exports OTLP as http/protobuf (the collector's port 4318) or grpc (port 4317)`);
  }
  const resource = detectResources({ detectors: [envDetector] });
  const batching = {
    scheduledDelayMillis: positiveInteger(env, "OTEL_BSP_SCHEDULE_DELAY"),
    exportTimeoutMillis: positiveInteger(env, "OTEL_BSP_EXPORT_TIMEOUT"),
    maxQueueSize: positiveInteger(env, "OTEL_BSP_MAX_QUEUE_SIZE"),
    maxExportBatchSize: positiveInteger(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
  };
  // Loaded only when tracing is on: the gRPC exporter brings grpc-js with it.
  const { OTLPTraceExporter } = protocol === "grpc" ? await import("@opentelemetry/exporter-trace-otlp-grpc") : await import("@opentelemetry/exporter-trace-otlp-proto");
  // What waits for the collector is bounded in bytes (--trace-queue-bytes) besides the processor's count.
  const queue = new SpanQueueBound({ maxBytes: bounds.queueBytes, maxSpans: batching.maxQueueSize ?? 2_048 });
  const processor = new BatchSpanProcessor({
    exporter: queue.exporter(new OTLPTraceExporter()),
    ...Object.fromEntries(Object.entries(batching).filter(([, value]) => value !== undefined)),
  });
  const maxAttributeChars = positiveInteger(env, "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT") ?? positiveInteger(env, "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT") ?? defaultMaxAttributeChars;
  return new Tracing([queue.processor(processor)], env.OTEL_SERVICE_NAME || "contextd", resource.attributes as Attributes, maxAttributeChars, queue);
}

// The batch span processor's OTEL_BSP_* settings (the SDK leaves reading them to the caller).
function positiveInteger(env: NodeJS.ProcessEnv, variable: string): number | undefined {
  const text = env[variable];
  if (text === undefined || text === "") return undefined;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1) throw new Error(`invalid ${variable} "${text}": want a positive integer`);
  return value;
}

