import type { TelemetryHub } from "../application/telemetry-hub.js";
import type { Codec } from "../codec/codec.js";
import type { RequestMemoryBudget } from "./policy/request-memory.js";
import type { StreamCounter } from "./policy/stream-guard.js";
import type { CallTracker } from "./operations/call-tracker.js";
import { type HealthStatus, ServingStatus } from "./operations/health.js";
import type { Metrics } from "./operations/metrics.js";
import type { TokenCountCache } from "../core/tokens/token-count-cache.js";
import type { OpenConnections } from "./transport/open-connections.js";
import type { SpanQueueBound } from "./operations/span-queue.js";

/** The owners whose state `/metrics` shows as gauges, read at every scrape. */
export interface GaugeSources {
  health: HealthStatus;
  calls: CallTracker;
  streams: StreamCounter;
  telemetry: TelemetryHub;
  codec: Codec;
  requestMemory: RequestMemoryBudget;
  tokenCounts: TokenCountCache;
  connections: OpenConnections;
  /** Spans waiting for the collector, when tracing is on. */
  spanQueue?: SpanQueueBound;
}

export function registerServerGauges(metrics: Metrics, sources: GaugeSources): void {
  const { health, calls, streams, telemetry, codec, requestMemory, tokenCounts, connections, spanQueue } = sources;
  if (spanQueue) {
    metrics.gauge("contextd_trace_queue_bytes", "Bytes of finished spans waiting for the OpenTelemetry collector (bounded by --trace-queue-bytes).", () => spanQueue.heldBytes);
    metrics.countedBy("contextd_trace_spans_dropped_total", "Spans dropped because --trace-queue-bytes (or OTEL_BSP_MAX_QUEUE_SIZE) was reached.", "reason", () => ({ queue_full: spanQueue.dropped }));
  }
  metrics.gauge("contextd_serving", "1 while health is SERVING.", () => (health.current === ServingStatus.SERVING ? 1 : 0));
  metrics.gauge("contextd_requests_in_flight", "HTTP requests being handled (RPCs of every kind).", () => calls.inFlight);
  metrics.gauge("contextd_streams_active", "Streaming RPCs open.", () => streams.active);
  metrics.gauge("contextd_connections_open", "TCP connections open (bounded by --max-connections).", () => connections.size);
  metrics.countedBy(
    "contextd_connections_closed_total",
    "Connections the server closed, by reason: headers_timeout (no request headers within --headers-timeout-ms), idle_timeout (nothing in flight for --idle-timeout-ms), evicted (idle the longest when a connection came at --max-connections), refused (came at --max-connections while every open one had a call in flight).",
    "reason",
    () => connections.closed,
  );
  metrics.gauge("contextd_telemetry_subscribers", "WatchEvents subscribers.", () => telemetry.subscriberCount);
  metrics.gauge("contextd_telemetry_queued_bytes", "Bytes of events queued for WatchEvents subscribers, each event once (bounded by --telemetry-bytes).", () => telemetry.queuedBytes);
  metrics.gauge(
    "contextd_recent_messages_bytes",
    "Request messages kept to be handed out again, counted as encoding plus per-entry overhead (bounded by --recent-message-bytes).",
    () => codec.stats.recentMessageBytes,
  );
  metrics.gauge(
    "contextd_buffered_request_bytes",
    "Request bytes held by calls in progress (bounded by --max-buffered-request-bytes).",
    () => requestMemory.heldBytes,
  );
  metrics.gauge(
    "contextd_retained_encoding_bytes",
    "Encodings of immutable messages kept across calls (bounded by --retained-encoding-bytes).",
    () => codec.stats.retainedEncodingBytes,
  );
  metrics.cache("recent_messages", () => ({ lookups: codec.stats.recentMessageLookups, hits: codec.stats.recentMessageHits }));
  metrics.cache("retained_encodings", () => ({ lookups: codec.stats.retainedEncodingLookups, hits: codec.stats.retainedEncodingHits }));
  metrics.cache("token_count_lists", () => ({ lookups: tokenCounts.listLookups, hits: tokenCounts.listHits }));
  metrics.gauge("contextd_token_count_texts", "Texts whose token counts are kept across compiles (bounded at 200,000).", () => tokenCounts.keptTexts);
}

