import { afterAll, describe, expect, it } from "vitest";
import { startRedis } from "./support/redis.js";
import { startSidecar, type Sidecar } from "./support/sidecar.js";

const startLine = (sidecar: Sidecar) =>
  sidecar.logs.map((line) => JSON.parse(line) as Record<string, unknown>).find((entry) => entry.msg === "contextd listening")!;

describe("the start line says which store is used and whether it answered", () => {
  const stops: (() => Promise<unknown>)[] = [];
  afterAll(async () => {
    for (const stop of stops.reverse()) await stop();
  });

  it("the in-memory store, reachable, TLS off", async () => {
    const sidecar = await startSidecar();
    stops.push(() => sidecar.stop());
    expect(startLine(sidecar)).toMatchObject({ tls: "off", store: { kind: "memory", reachable: true } });
  });

  it("a Redis that answers", async () => {
    const redis = await startRedis();
    stops.push(() => redis.stop());
    const sidecar = await startSidecar(["--redis-url", redis.url]);
    stops.push(() => sidecar.stop());
    expect(startLine(sidecar)).toMatchObject({ store: { kind: "redis", reachable: true } });
  });

  it("a Redis that does not answer: the sidecar still starts (NOT_SERVING) and says so", async () => {
    const redis = await startRedis();
    const url = redis.url;
    await redis.stop();
    const sidecar = await startSidecar(["--redis-url", url]);
    stops.push(() => sidecar.stop());
    expect(startLine(sidecar)).toMatchObject({ store: { kind: "redis", reachable: false } });
  });
});
