import { execFileSync } from "node:child_process";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HealthStatus, ServingStatus } from "../../../src/server/operations/health.js";
import { createLogger } from "../../../src/server/operations/logger.js";
import { pingTimeoutIntervals, pollStoreHealth } from "../../../src/server/operations/store-health.js";
import { startRedis, type RedisProcess } from "../../support/redis.js";

// CI failed on a sidecar that reported NOT_SERVING while 8 readers kept it busy on a loaded machine:
// its ping timer ran before it read the answer already in its socket. Here the process is kept busy
// past the ping's deadline while a real redis-server answers; the verdict must be SERVING.
describe("store health (real redis-server)", () => {
  let redis: RedisProcess;
  let client: Redis;
  beforeAll(async () => {
    redis = await startRedis();
    client = new Redis(redis.url, { lazyConnect: true });
    await client.connect();
  });
  afterAll(async () => {
    client?.disconnect();
    await redis?.stop();
  });

  it("counts an answer that came while the process was busy past the deadline as in time", async () => {
    const intervalMs = 100;
    const health = new HealthStatus(new Set());
    const lines: string[] = [];
    const polling = pollStoreHealth({ ping: async () => void (await client.ping()) }, health, intervalMs, createLogger("info", (line) => lines.push(line)));
    // Busy past the deadline, then until redis-server has answered a later PING of another client
    // (it answers in order, so the first PING's answer is written by then): the answer is unread.
    const busyUntil = Date.now() + (pingTimeoutIntervals + 1) * intervalMs;
    while (Date.now() < busyUntil);
    execFileSync("redis-cli", ["-p", String(redis.port), "ping"]);
    try {
      expect(await polling.firstCheck).toBe("");
      expect(health.current).toBe(ServingStatus.SERVING);
      expect(lines.join("\n")).toContain("store reachable: SERVING");
    } finally {
      polling.stop();
    }
  });

  it("stays SERVING through a ping that answers after two intervals", async () => {
    const intervalMs = 100;
    const health = new HealthStatus(new Set());
    const slowPing = () => new Promise<void>((resolve) => setTimeout(resolve, (pingTimeoutIntervals - 1) * intervalMs));
    const polling = pollStoreHealth({ ping: slowPing }, health, intervalMs, createLogger("error", () => undefined));
    try {
      expect(await polling.firstCheck).toBe("");
      expect(health.current).toBe(ServingStatus.SERVING);
    } finally {
      polling.stop();
    }
  });

  it("is NOT_SERVING, naming the deadline, when the store does not answer for three intervals", async () => {
    const intervalMs = 100;
    const timeoutMs = pingTimeoutIntervals * intervalMs;
    const health = new HealthStatus(new Set());
    const polling = pollStoreHealth({ ping: () => new Promise<void>(() => undefined) }, health, intervalMs, createLogger("error", () => undefined));
    try {
      expect(await polling.firstCheck).toBe(`store ping took longer than ${timeoutMs} ms`);
      expect(health.current).toBe(ServingStatus.NOT_SERVING);
      expect(health.reason).toBe(`store ping took longer than ${timeoutMs} ms`);
    } finally {
      polling.stop();
    }
  });

  it("is NOT_SERVING with the store's own error when the ping fails", async () => {
    const health = new HealthStatus(new Set());
    const polling = pollStoreHealth({ ping: () => Promise.reject(new Error("connect ECONNREFUSED 127.0.0.1:1")) }, health, 100, createLogger("error", () => undefined));
    try {
      expect(await polling.firstCheck).toBe("connect ECONNREFUSED 127.0.0.1:1");
      expect(health.current).toBe(ServingStatus.NOT_SERVING);
    } finally {
      polling.stop();
    }
  });
});
