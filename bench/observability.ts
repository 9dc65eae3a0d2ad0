// `npm run bench:observability`: what metrics and tracing cost per call. In one process, one run:
// - Compile RPCs (gRPC, 10 and 100 history messages, stateful: a store load each) against two
//   in-process servers: tracing off (the default) and tracing on with every span handed to an
//   exporter that drops it through the batch processor (the SDK's full cost without the network). Rounds alternate between the
//   servers so machine load hits them alike; CPU time per call (process.cpuUsage, client included:
//   the client is the same for both) and median latency.
// - Per-operation costs of what every call pays with tracing off: Metrics.recordRpc (prom-client
//   series resolved once) and the ObservedStore wrapper around a memory-store load, beside that
//   load unwrapped as the anchor.
import { loadavg, cpus } from "node:os";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { ExportResult } from "@opentelemetry/core";
import { BatchSpanProcessor, type ReadableSpan, type SpanExporter } from "@opentelemetry/sdk-trace";
import { EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment } from "#gen/contextd/v1/state_pb";
import { Metrics } from "../src/server/operations/metrics.js";
import { ObservedStore } from "../src/server/operations/observed-store.js";
import { Tracing } from "../src/server/operations/tracing.js";
import { startServer, type RunningServer } from "../src/server/server.js";
import { MemoryConversationStore } from "../src/store/memory-conversation-store.js";

const roundsPerServer = Number(process.env.BENCH_ROUNDS ?? 6);
const callsPerRound = Number(process.env.BENCH_CALLS ?? 150);

class DroppingExporter implements SpanExporter {
  spans = 0;
  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.spans += spans.length;
    done({ code: 0 });
  }
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

function history(count: number) {
  return Array.from({ length: count }, (_, index) =>
    create(MessageSchema, { id: `m${index}`, role: index % 2 === 0 ? Role.USER : Role.ASSISTANT, parts: [{ kind: { case: "text", value: { text: `message ${index}: ${"lorem ipsum dolor sit amet ".repeat(4)}` } } }] }),
  );
}

async function seeded(size: number) {
  const store = new MemoryConversationStore();
  await store.commit("bench/c", 0n, [create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: history(size) } } })], "");
  return store;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

console.log(`observability cost (Node ${process.version}, ${cpus().length} cores, load average ${loadavg().map((value) => value.toFixed(2)).join(" / ")} at start)`);
const exporter = new DroppingExporter();
for (const size of [10, 100]) {
  const servers: [string, RunningServer][] = [
    ["tracing off (default)", await startServer({ port: 0, logLevel: "error", store: await seeded(size) })],
    ["tracing on, all spans exported", await startServer({ port: 0, logLevel: "error", store: await seeded(size), tracing: new Tracing([new BatchSpanProcessor({ exporter, scheduledDelayMillis: 100, maxQueueSize: 65_536 })], "bench") })],
  ];
  const clients = servers.map(([, server]) => createClient(ContextService, createGrpcTransport({ baseUrl: `http://127.0.0.1:${server.address.port}` })));
  const request = { conversationId: "bench/c", budget: { maxTokens: 100_000n, estimator: { kind: EstimatorKind.CHARS } } };
  const cpu = servers.map(() => [] as number[]);
  const latency = servers.map(() => [] as number[]);
  for (const client of clients) for (let index = 0; index < 200; index++) await client.compile(request);
  for (let round = 0; round < roundsPerServer; round++) {
    for (const [which, client] of clients.entries()) {
      const started = process.cpuUsage();
      for (let index = 0; index < callsPerRound; index++) {
        const before = performance.now();
        await client.compile(request);
        latency[which]!.push(performance.now() - before);
      }
      const used = process.cpuUsage(started);
      cpu[which]!.push((used.user + used.system) / callsPerRound);
    }
  }
  console.log(`\nCompile over gRPC, stateful, ${size} history messages (${roundsPerServer} alternating rounds of ${callsPerRound} calls per server)`);
  console.log("server                           CPU/call (median round)   p50 latency   CPU vs tracing off");
  const base = median(cpu[0]!);
  for (const [which, [name]] of servers.entries()) {
    console.log(`${name.padEnd(32)} ${`${median(cpu[which]!).toFixed(0)} µs`.padStart(12)}              ${`${median(latency[which]!).toFixed(3)} ms`.padStart(9)}      ${(median(cpu[which]!) / base).toFixed(3)}x`);
  }
  for (const [, server] of servers) await server.shutdown(0);
}
console.log(`(spans exported by the tracing-on server: ${exporter.spans})`);

// Per-operation costs on the path of every call with tracing off.
const metrics = new Metrics({ processRegistry: null });
const iterations = 1_000_000;
let started = performance.now();
for (let index = 0; index < iterations; index++) metrics.recordRpc("contextd.v1.ContextService/Compile", "ok", 0.0004);
const recordNs = ((performance.now() - started) * 1e6) / iterations;
const store = await seeded(10);
const observed = new ObservedStore(store, metrics, undefined);
const loads = 200_000;
const timeLoads = async (target: { load(id: string): Promise<unknown> }) => {
  const begin = performance.now();
  for (let index = 0; index < loads; index++) await target.load("bench/c");
  return ((performance.now() - begin) * 1e6) / loads;
};
await timeLoads(store);
await timeLoads(observed);
const rawNs = Math.min(await timeLoads(store), await timeLoads(store));
const observedNs = Math.min(await timeLoads(observed), await timeLoads(observed));
started = performance.now();
console.log("\nper operation (tracing off)");
console.log(`Metrics.recordRpc (counter + histogram)           ${recordNs.toFixed(0).padStart(6)} ns`);
console.log(`memory store load, unwrapped (anchor)             ${rawNs.toFixed(0).padStart(6)} ns`);
console.log(`memory store load through ObservedStore           ${observedNs.toFixed(0).padStart(6)} ns   (+${(observedNs - rawNs).toFixed(0)} ns: two clock reads and a histogram observe)`);
console.log(`load average at end: ${loadavg().map((value) => value.toFixed(2)).join(" / ")}`);
process.exit(0);
