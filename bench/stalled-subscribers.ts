// `node dist/bench/stalled-subscribers.js` (issue 29's unexplained RSS): a sidecar on a 512 MB heap
// with three WatchEvents subscribers that stopped reading, and 4,000 compiles with 1 KB
// conversation ids, printing RSS beside the heap in use and the buffers after a full GC (through the
// V8 inspector: live data, not garbage) every 1,000 compiles, and the telemetry queue's bytes.
// CONTEXTD_BENCH_SIDECAR_MAIN: another build's dist/src/main.js, for a before/after.
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { TelemetryService } from "#gen/contextd/v1/telemetry_service_pb";
import { grpcJsClient } from "../test/support/grpc-js.js";
import { startBuiltSidecar } from "./bench-processes.js";
import { loadAverage, mb } from "./fleet/agent-turns.js";

const main = process.env.CONTEXTD_BENCH_SIDECAR_MAIN;
console.log(`stalled WatchEvents subscribers: 3 stalled, 4,000 compiles with 1 KB ids, 512 MB heap${main ? ` (sidecar ${main})` : ""}; load average ${loadAverage()}`);
const sidecar = await startBuiltSidecar([], ["--max-old-space-size=512"], { inspect: true, ...(main ? { main } : {}) });
const address = `127.0.0.1:${new URL(sidecar.url).port}`;
const inspector = await sidecar.inspector();
const stalled = [0, 1, 2].map(() => {
  const client = grpcJsClient(address);
  const call = client.serverStream(TelemetryService.method.watchEvents, { conversationId: "" });
  call.on("error", () => undefined);
  call.pause();
  return { client, call };
});
await new Promise((resolve) => setTimeout(resolve, 500));
const client = grpcJsClient(address);
for (let round = 0; round < 4; round++) {
  for (let index = 0; index < 1_000; index++) await client.unary(ContextService.method.compile, { conversationId: `${round}-${index}-`.padEnd(1_024, "x") });
  const rss = sidecar.rssBytes();
  const live = await inspector.liveMemory();
  const metrics = await (await fetch(`${sidecar.url}/metrics`)).text();
  const queued = /^contextd_telemetry_queued_bytes (\S+)$/m.exec(metrics)?.[1] ?? "?";
  console.log(`  ${(round + 1) * 1_000} compiles: RSS ${mb(rss)}; after a full GC heap in use ${mb(live.heapUsed)}, buffers ${mb(live.external)}; telemetry queued ${queued} bytes`);
}
inspector.close();
for (const subscriber of stalled) {
  subscriber.call.cancel();
  subscriber.client.raw.close();
}
client.raw.close();
await sidecar.stop();
process.exit(0);
