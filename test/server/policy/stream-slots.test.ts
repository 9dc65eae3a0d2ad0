import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TelemetryService } from "#gen/contextd/v1/telemetry_service_pb";
import { streamsPerTenant } from "../../../src/server/policy/stream-guard.js";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

// Issue 29, "also seen": --max-streams was one pool for all tenants, so one tenant holding
// WatchEvents streams open starved every other. Now each tenant has its share (policy/stream-guard.ts).

const tokenA = "stream-slots-token-a-0123456789";
const tokenB = "stream-slots-token-b-0123456789";

describe("streamsPerTenant", () => {
  it("divides --max-streams among the tokens' tenants unless given, one pool without tokens", () => {
    expect(streamsPerTenant(1_000, 0, [])).toBe(1_000);
    expect(streamsPerTenant(1_000, 0, ["a", "b", "b", ""])).toBe(333);
    expect(streamsPerTenant(4, 0, ["a", "b", "c", "d", "e"])).toBe(1);
    expect(streamsPerTenant(1_000, 600, ["a", "b"])).toBe(600);
    expect(streamsPerTenant(10, 600, ["a"])).toBe(10);
  });
});

describe("streaming slots per tenant (real sidecar)", () => {
  let sidecar: Sidecar;
  const clients: ReturnType<typeof grpcJsClient>[] = [];
  beforeAll(async () => {
    sidecar = await startSidecar(["--max-streams", "4"], { CONTEXTD_AUTH_TOKENS: `${tokenA}=a,${tokenB}=b` });
  });
  afterAll(async () => {
    for (const client of clients) client.close();
    await sidecar?.stop();
  });

  const streamsActive = async () => Number(/^contextd_streams_active (\d+)$/m.exec(await (await fetch(`${sidecar.url}/metrics`)).text())?.[1]);

  /** Opens WatchEvents with `token`; resolves with the error's code and message if it is refused. */
  const watch = (token: string) => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    clients.push(client);
    const metadata = new grpc.Metadata();
    metadata.set("authorization", `Bearer ${token}`);
    const call = client.serverStream(TelemetryService.method.watchEvents, {}, metadata);
    return new Promise<string>((resolve) => {
      call.on("error", (error: grpc.ServiceError) => resolve(`${error.code} ${error.details}`));
    });
  };

  it("refuses tenant a's third stream (its share of --max-streams 4 is 2) while tenant b still opens its two", async () => {
    void watch(tokenA);
    void watch(tokenA);
    await expect.poll(streamsActive).toBe(2);
    expect(await watch(tokenA)).toBe(
      '8 contextd.v1.TelemetryService/WatchEvents: tenant "a" has 2 streams open, the limit per tenant is 2 (--max-streams-per-tenant / CONTEXTD_MAX_STREAMS_PER_TENANT)',
    );
    void watch(tokenB);
    void watch(tokenB);
    await expect.poll(streamsActive).toBe(4);
    expect(await watch(tokenB)).toMatch(/^8 .*tenant "b" has 2 streams open/);
  });
});
