import { spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { freePort, startRedis, type RedisProcess } from "../../support/redis.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

describe("health follows the store (real redis-server)", () => {
  let redis: RedisProcess;
  let sidecar: Sidecar;
  beforeAll(async () => {
    redis = await startRedis();
    sidecar = await startSidecar(["--redis-url", redis.url, "--health-interval-ms", "100"]);
  });
  afterAll(async () => {
    await sidecar?.stop();
    await redis?.stop();
  });

  it("is SERVING, NOT_SERVING while Redis is down, SERVING again when it returns; Watch sees each change", async () => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    const seen: ServingStatus[] = [];
    const watch = client.serverStream(Health.method.watch, { service: "contextd.v1.ConversationService" });
    watch.on("data", (response: { status: ServingStatus }) => seen.push(response.status));
    watch.on("error", () => undefined);
    try {
      expect((await client.unary(Health.method.check, { service: "" })).status).toBe(ServingStatus.SERVING);
      await expect.poll(() => seen).toEqual([ServingStatus.SERVING]);

      await redis.stop();
      await expect.poll(async () => (await client.unary(Health.method.check, { service: "" })).status, { timeout: 15_000 }).toBe(ServingStatus.NOT_SERVING);
      await expect.poll(() => seen.at(-1), { timeout: 15_000 }).toBe(ServingStatus.NOT_SERVING);
      const metrics = await (await fetch(`${sidecar.url}/metrics`)).text();
      expect(metrics).toContain("contextd_serving 0\n");

      await redis.restart();
      await expect.poll(async () => (await client.unary(Health.method.check, { service: "" })).status, { timeout: 15_000 }).toBe(ServingStatus.SERVING);
      await expect.poll(() => seen, { timeout: 15_000 }).toEqual([ServingStatus.SERVING, ServingStatus.NOT_SERVING, ServingStatus.SERVING]);
      expect(sidecar.logs.some((line) => line.includes("store unreachable: NOT_SERVING"))).toBe(true);
    } finally {
      watch.cancel();
      client.close();
    }
  });
});

describe("an unreachable store is loud (nothing listens on the Redis port)", () => {
  let sidecar: Sidecar;
  let redisUrl: string;
  beforeAll(async () => {
    redisUrl = `redis://127.0.0.1:${await freePort()}`;
    sidecar = await startSidecar(["--redis-url", redisUrl, "--health-interval-ms", "100"]);
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("names the cause at start, repeats it with backoff, and health's answer carries it", async () => {
    const listening = JSON.parse(sidecar.logs.find((line) => line.includes('"contextd listening"'))!) as { store: { reachable: boolean; error?: string } };
    expect(listening.store.reachable).toBe(false);
    expect(listening.store.error).toMatch(/ECONNREFUSED|connect|unavailable/i);
    const first = sidecar.logs.find((line) => line.includes('"store unreachable: NOT_SERVING"'));
    expect(first).toBeDefined();
    expect(JSON.parse(first!)).toMatchObject({ level: "error" });
    // The cause keeps being said while the store stays down (1 s, 2 s, … apart), not once.
    await expect.poll(() => sidecar.logs.filter((line) => line.includes('"store still unreachable: NOT_SERVING"')).length, { timeout: 10_000 }).toBeGreaterThanOrEqual(2);

    const response = await fetch(`${sidecar.url}/grpc.health.v1.Health/Check`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    expect(await response.json()).toEqual({ status: "NOT_SERVING" });
    expect(response.headers.get("contextd-health-reason")).toMatch(/ECONNREFUSED|connect|unavailable/i);
  });

  it("--store-required true exits with status 1 and the cause instead of serving", async () => {
    const child = spawn(process.execPath, [fileURLToPath(new URL("../../../dist/src/main.js", import.meta.url)), "--port", "0", "--redis-url", redisUrl, "--store-required", "true"], { stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (chunk) => (stderr += chunk));
    const [code] = (await once(child, "exit")) as [number | null];
    expect(code).toBe(1);
    expect(stderr).toMatch(/--store-required true: the store is not reachable: .*(ECONNREFUSED|connect|unavailable)/i);
  });
});
