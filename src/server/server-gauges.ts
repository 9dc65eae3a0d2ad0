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
import type { ConversationStore } from "../store/conversation-store.js";

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
  /** Its decoded states and kept tails, when it keeps them (Redis, Postgres; not the memory store). */
  store: ConversationStore;
  /** Spans waiting for the collector, when tracing is on. */
  spanQueue?: SpanQueueBound;
}

export function registerServerGauges(metrics: Metrics, sources: GaugeSources): void {
  const { health, calls, streams, telemetry, codec, requestMemory, tokenCounts, connections, spanQueue, store } = sources;
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
  metrics.gauge("contextd_token_count_texts", "Texts whose token counts are kept across compiles (bounded at 200,000 and by --token-count-text-bytes).", () => tokenCounts.keptTexts);
  metrics.gauge("contextd_token_count_text_bytes", "Approximate bytes of the texts whose token counts are kept (bounded by --token-count-text-bytes).", () => tokenCounts.keptTextBytes);
  // The memory store holds every conversation itself: no copies to show, so no gauges (a zero would read as a cache that never fills).
  if (store.heldCopies !== undefined) {
    const held = () => store.heldCopies!;
    metrics.gauge("contextd_decoded_states", "Conversations whose decoded state the Redis or Postgres store keeps (at most 1,000, and within --decoded-state-bytes).", () => held().decodedStates.count);
    metrics.gauge("contextd_decoded_state_bytes", "Approximate heap bytes of the decoded states kept: encoding + 640 a message (bounded by --decoded-state-bytes; the newest is kept even over it).", () => held().decodedStates.bytes);
    metrics.gauge("contextd_kept_tails", "Conversations committed on without a copy whose stored tail the store keeps for their next commit (within --kept-tail-bytes).", () => held().keptTails.count);
    metrics.gauge("contextd_kept_tail_bytes", "Approximate heap bytes of the kept tails, weighed as decoded states (bounded by --kept-tail-bytes).", () => held().keptTails.bytes);
    metrics.total("contextd_kept_tail_commits_total", "Commits planned on a kept tail, with no read before the write.", () => held().keptTailCommits);
    metrics.gauge("contextd_followed_conversations", "Conversations followed for other processes' commit notices, their copy caught up before the next commit here (within --prefetch-conversations).", () => held().prefetch.followed);
    metrics.total("contextd_prefetch_catch_ups_total", "Catch-up reads commit notices started: reads a round-robin commit no longer makes before its write.", () => held().prefetch.catchUps);
    metrics.total("contextd_commit_tail_reads_total", "Tail reads commits made: commits on a conversation held neither decoded nor as a kept tail (or whose kept tail was stale).", () => held().tailReads);
  }
}
