import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { TelemetryService } from "#gen/contextd/v1/telemetry_service_pb";
import { Health } from "#gen/grpc/health/v1/health_pb";
import { stringLimits } from "../../../src/core/model/string-limits.js";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startRedis, type RedisProcess } from "../../support/redis.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

// Issue 29 #2 and #1, on a 512 MB heap. WatchEvents queues were bounded in events only, and each
// event carries its conversation id: 3 subscribers that stopped reading + compiles with 4 MB ids
// ran the heap out of memory. With --workers, every compile event of one worker crossed the primary
// while another worker had any subscriber: 60 compiles with 4 MB ids killed the primary in
// JSON.parse, and the sidecar with it (40 with 1 MB ids: primary 90 -> 777 MB). Now queues and the IPC relay are bounded in bytes, and a
// worker forwards only the events another worker's subscribers would receive.

async function metricSum(sidecar: Sidecar, name: string): Promise<number> {
  const text = await (await fetch(`${sidecar.url}/metrics`)).text();
  return [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\d+)$`, "gm"))].reduce((sum, match) => sum + Number(match[1]), 0);
}

/** Health checks every 50 ms on a connection of their own until stopped: their statuses and latencies. */
function probeHealth(sidecar: Sidecar) {
  const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  const statuses: number[] = [];
  const latencies: number[] = [];
  let running = true;
  const done = (async () => {
    while (running) {
      const started = performance.now();
      statuses.push((await client.unary(Health.method.check, {}, undefined, { deadline: Date.now() + 10_000 })).status);
      latencies.push(performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  })();
  return {
    async stop() {
      running = false;
      await done;
      client.close();
      latencies.sort((a, b) => a - b);
      return { statuses, p50: Math.round(latencies[Math.floor(latencies.length / 2)] ?? 0), max: Math.round(latencies.at(-1) ?? 0) };
    },
  };
}

function rssMb(pid: number): number {
  return Math.round(Number(/^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) / 1024);
}

/** A subscriber that reads nothing after subscribing: its queue on the server fills. */
function stalledSubscriber(sidecar: Sidecar, conversationId = "") {
  const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  const call = client.serverStream(TelemetryService.method.watchEvents, { conversationId });
  call.on("error", () => undefined);
  call.pause();
  return { close: () => (call.cancel(), client.close()) };
}

async function compileWithIds(sidecar: Sidecar, ids: string[]): Promise<void> {
  const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  try {
    for (const conversationId of ids) await client.unary(ContextService.method.compile, { conversationId });
  } finally {
    client.close();
  }
}

describe("WatchEvents queues bounded in bytes (512 MB heap)", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await startSidecar([], {}, { heapMb: 512 });
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("three stalled subscribers and compiles with 4 MB and 200 KB ids: no crash, health answered, queues within --telemetry-bytes", async () => {
    const stalled = [0, 1, 2].map(() => stalledSubscriber(sidecar));
    await expect.poll(() => metricSum(sidecar, "contextd_telemetry_subscribers")).toBe(3);
    const health = probeHealth(sidecar);
    // The 4 MB ids are refused at the door now (ids are at most 1,024 bytes,
    // core/model/string-limits.ts); the queues' byte bounds stay, tried here with ids at that limit.
    const refused = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    await expect(refused.unary(ContextService.method.compile, { conversationId: "x".repeat(4 * 1024 * 1024) })).rejects.toMatchObject({ code: 3 });
    refused.close();
    await compileWithIds(sidecar, Array.from({ length: 400 }, (_, index) => `${index}-`.padEnd(stringLimits.id, "x")));
    const queued = await metricSum(sidecar, "contextd_telemetry_queued_bytes");
    const { statuses, p50, max } = await health.stop();
    console.log(`stalled subscribers: sidecar RSS ${rssMb(sidecar.process.pid!)} MB, queued ${queued} bytes, health p50 ${p50} ms, max ${max} ms over ${statuses.length} checks`);
    expect(statuses.length).toBeGreaterThan(0);
    expect(statuses.every((status) => status === 1)).toBe(true);
    // With ids of 1 KB the events of 400 compiles leave the queues for the streams' buffers (the 4 MB
    // ids filled the HTTP/2 window and stayed queued), so what is queued may be 0 here.
    expect(queued).toBeLessThanOrEqual(32 * 1024 * 1024);
    expect(sidecar.process.exitCode).toBeNull();
    for (const subscriber of stalled) subscriber.close();
    await expect.poll(() => metricSum(sidecar, "contextd_telemetry_queued_bytes"), { timeout: 15_000 }).toBe(0);
  }, 120_000);
});

describe("--workers: compile events across the primary bounded in bytes (512 MB heaps)", () => {
  let redis: RedisProcess;
  let sidecar: Sidecar;
  beforeAll(async () => {
    redis = await startRedis();
    sidecar = await startSidecar(["--redis-url", redis.url, "--workers", "2"], {}, { heapMb: 512 });
  }, 30_000);
  afterAll(async () => {
    await sidecar?.stop();
    await redis?.stop();
  });

  it("60 compiles with 1 MB ids beside subscribers on both workers: the primary stays up, no worker dies, the watched conversation's events arrive", async () => {
    // Connections go to the workers in turn: two subscribers of one conversation and two stalled
    // ones of everything, on both workers.
    const watchers = [0, 1].map(() => {
      const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
      const compiles = new Set<string>();
      const call = client.serverStream(TelemetryService.method.watchEvents, { conversationId: "w/watched" });
      call.on("data", (message: { event?: { compileId: string } }) => message.event && compiles.add(message.event.compileId));
      call.on("error", () => undefined);
      return { compiles, close: () => (call.cancel(), client.close()) };
    });
    const stalled = [0, 1].map(() => stalledSubscriber(sidecar));
    await expect.poll(() => metricSum(sidecar, "contextd_telemetry_subscribers"), { timeout: 10_000 }).toBe(4);
    const primaryBefore = rssMb(sidecar.process.pid!);
    const health = probeHealth(sidecar);
    // Over several connections one after the other, so both workers compile. 1 MB ids: the
    // issue's 40 of them took the primary from 90 to 777 MB (4 MB keys are slow enough to load from
    // Redis on a loaded machine to pass the store's 5 s timeout).
    // Ids at the door's limit (1,024 bytes): the 1 MB ids are refused before any compile.
    for (const part of [0, 1, 2, 3]) await compileWithIds(sidecar, Array.from({ length: 50 }, (_, index) => `${part}-${index}-`.padEnd(stringLimits.id, "z")));
    const { statuses, p50, max } = await health.stop();
    console.log(`--workers 2: primary RSS ${primaryBefore} -> ${rssMb(sidecar.process.pid!)} MB, health p50 ${p50} ms, max ${max} ms over ${statuses.length} checks`);
    expect(statuses.length).toBeGreaterThan(0);
    expect(statuses.every((status) => status === 1)).toBe(true);
    expect(sidecar.process.exitCode).toBeNull();
    expect(sidecar.logs.some((line) => line.includes("worker died"))).toBe(false);
    // Compiles of the watched conversation on both workers reach both of its subscribers.
    await compileWithIds(sidecar, ["w/watched"]);
    await compileWithIds(sidecar, ["w/watched"]);
    await expect.poll(() => watchers.map((watcher) => watcher.compiles.size), { timeout: 10_000 }).toEqual([2, 2]);
    for (const each of [...watchers, ...stalled]) each.close();
  }, 180_000);
});
