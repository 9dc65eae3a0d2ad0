import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { appendHistory, textMessage } from "../../store/fixtures.js";
import { sidecarStores, startSidecar, type Sidecar } from "../../support/sidecar.js";
import { Registry } from "prom-client";
import { Metrics } from "../../../src/server/operations/metrics.js";

// /metrics from a real sidecar: the metric names and types the sidecar has always exposed, and
// the ones prom-client added (process and runtime, store latency, cache lookups and hits).

const sample = (text: string, series: string): number | undefined => {
  const line = text.split("\n").find((line) => line.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
};

describe.each(sidecarStores)("metrics (real sidecar, %s)", (_name, backend) => {
  let sidecar: Sidecar;
  let stopBackend: (() => Promise<void>) | undefined;

  beforeAll(async () => {
    const started = await backend();
    stopBackend = started.stop;
    sidecar = await startSidecar(started.args);
  });
  afterAll(async () => {
    await sidecar?.stop();
    await stopBackend?.();
  });

  it("keeps every metric name and type it had, and adds process, runtime, store and cache metrics", async () => {
    const transport = createGrpcTransport({ baseUrl: sidecar.url });
    const context = createClient(ContextService, transport);
    const conversations = createClient(ConversationService, transport);
    const conversationId = `metrics/${Date.now()}`;
    await conversations.commit({ conversationId, expectedVersion: 0n, deltas: [appendHistory(textMessage("u1", Role.USER, "hello there"))] });
    const history = { messages: [textMessage("h1", Role.USER, "same request twice"), textMessage("h2", Role.ASSISTANT, "so its messages are reused")] };
    for (let i = 0; i < 2; i++) await context.compile({ history, budget: { maxTokens: 1000n, estimator: { kind: EstimatorKind.CHARS } } });
    await context.compile({ conversationId, budget: { maxTokens: 1000n } });
    await expect(conversations.getState({ conversationId: "" })).rejects.toThrow();

    const response = await fetch(`${sidecar.url}/metrics`);
    expect(response.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    const text = await response.text();
    const types = Object.fromEntries([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((match) => [match[1], match[2]]));
    expect(types).toMatchObject({
      contextd_rpc_requests_total: "counter",
      contextd_rpc_duration_seconds: "histogram",
      contextd_compiles_total: "counter",
      contextd_compile_tokens_total: "counter",
      contextd_messages_dropped_total: "counter",
      contextd_serving: "gauge",
      contextd_requests_in_flight: "gauge",
      contextd_streams_active: "gauge",
      contextd_telemetry_subscribers: "gauge",
      contextd_recent_messages_bytes: "gauge",
      contextd_buffered_request_bytes: "gauge",
      contextd_retained_encoding_bytes: "gauge",
      // Added: the store, the caches, the process and the Node.js runtime.
      contextd_store_operation_duration_seconds: "histogram",
      contextd_cache_lookups_total: "counter",
      contextd_cache_hits_total: "counter",
      contextd_token_count_texts: "gauge",
      contextd_token_count_text_bytes: "gauge",
      process_resident_memory_bytes: "gauge",
      process_cpu_seconds_total: "counter",
      nodejs_heap_size_used_bytes: "gauge",
      nodejs_eventloop_lag_seconds: "gauge",
      nodejs_eventloop_lag_p99_seconds: "gauge",
      nodejs_gc_duration_seconds: "histogram",
    });
    expect(sample(text, 'contextd_rpc_requests_total{method="contextd.v1.ContextService/Compile",code="ok"}')).toBe(3);
    expect(sample(text, 'contextd_rpc_requests_total{method="contextd.v1.ConversationService/GetState",code="invalid_argument"}')).toBe(1);
    expect(sample(text, "contextd_compiles_total")).toBe(3);
    expect(sample(text, 'contextd_store_operation_duration_seconds_count{operation="load",outcome="ok"}')).toBe(1);
    expect(sample(text, 'contextd_store_operation_duration_seconds_count{operation="commit",outcome="ok"}')).toBe(1);
    expect(sample(text, 'contextd_store_operation_duration_seconds_count{operation="ping",outcome="ok"}')).toBeGreaterThanOrEqual(1);
    // The second identical compile found its two request messages among the recent ones.
    expect(sample(text, 'contextd_cache_hits_total{cache="recent_messages"}')).toBeGreaterThanOrEqual(2);
    expect(sample(text, 'contextd_cache_lookups_total{cache="recent_messages"}')).toBeGreaterThanOrEqual(sample(text, 'contextd_cache_hits_total{cache="recent_messages"}')!);
    expect(sample(text, 'contextd_cache_lookups_total{cache="token_count_lists"}')).toBeGreaterThan(0);
    expect(sample(text, "process_resident_memory_bytes")).toBeGreaterThan(10_000_000);
    expect(sample(text, "nodejs_heap_size_used_bytes")).toBeGreaterThan(1_000_000);

    // Counters read from the caches at scrape time only grow between scrapes.
    const again = await (await fetch(`${sidecar.url}/metrics`)).text();
    expect(sample(again, 'contextd_cache_lookups_total{cache="recent_messages"}')).toBeGreaterThanOrEqual(sample(text, 'contextd_cache_lookups_total{cache="recent_messages"}')!);
  });
});

describe("Metrics (unit)", () => {
  it("renders cumulative buckets, sums and counts per series in label order, in an injected registry", async () => {
    const registry = new Registry();
    const metrics = new Metrics({ registry, processRegistry: null });
    metrics.recordRpc("a.B/C", "ok", 0.0004);
    metrics.recordRpc("a.B/C", "ok", 0.003);
    metrics.recordRpc("a.B/C", "not_found", 20);
    metrics.recordStoreOperation("load", false, 0.0002);
    const text = await metrics.render();
    expect(text).toBe(await registry.metrics());
    expect(sample(text, 'contextd_rpc_requests_total{method="a.B/C",code="not_found"}')).toBe(1);
    expect(sample(text, 'contextd_rpc_requests_total{method="a.B/C",code="ok"}')).toBe(2);
    expect(sample(text, 'contextd_rpc_duration_seconds_bucket{method="a.B/C",le="0.0005"}')).toBe(1);
    expect(sample(text, 'contextd_rpc_duration_seconds_bucket{method="a.B/C",le="0.0025"}')).toBe(1);
    expect(sample(text, 'contextd_rpc_duration_seconds_bucket{method="a.B/C",le="0.005"}')).toBe(2);
    expect(sample(text, 'contextd_rpc_duration_seconds_bucket{method="a.B/C",le="10"}')).toBe(2);
    expect(sample(text, 'contextd_rpc_duration_seconds_bucket{method="a.B/C",le="+Inf"}')).toBe(3);
    expect(sample(text, 'contextd_rpc_duration_seconds_sum{method="a.B/C"}')).toBeCloseTo(20.0034, 6);
    expect(sample(text, 'contextd_rpc_duration_seconds_count{method="a.B/C"}')).toBe(3);
    expect(sample(text, 'contextd_store_operation_duration_seconds_bucket{operation="load",outcome="error",le="0.00025"}')).toBe(1);
    expect(sample(text, 'contextd_store_operation_duration_seconds_bucket{operation="load",outcome="error",le="0.0001"}')).toBe(0);
    // The process registry was left out.
    expect(text).not.toContain("process_resident_memory_bytes");
  });
});
