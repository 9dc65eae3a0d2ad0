import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "../../../gen/ts/grpc/health/v1/health_pb.js";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startRedis, type RedisProcess } from "../../support/redis.js";
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
