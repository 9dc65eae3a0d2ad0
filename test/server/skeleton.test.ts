import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health, HealthCheckResponse_ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { grpcJsClient } from "../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../support/sidecar.js";

const run = promisify(execFile);

describe("sidecar skeleton", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await startSidecar();
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("answers health SERVING to a grpc-js client, for the server and for each service", async () => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    try {
      for (const service of ["", "contextd.v1.ContextService", "contextd.v1.ConversationService", "contextd.v1.TelemetryService"]) {
        const response = await client.unary(Health.method.check, { service });
        expect(response.status, service).toBe(HealthCheckResponse_ServingStatus.SERVING);
      }
      await expect(client.unary(Health.method.check, { service: "no.such.Service" })).rejects.toMatchObject({ code: 5 });
    } finally {
      client.close();
    }
  });

  it("lists every service through reflection with buf curl", async () => {
    const { stdout } = await run("npx", ["buf", "curl", "--protocol", "grpc", "--http2-prior-knowledge", "--list-methods", sidecar.url]);
    const services = new Set(stdout.trim().split("\n").map((line) => line.slice(0, line.indexOf("/"))));
    expect([...services].sort()).toEqual([
      "contextd.v1.ContextService",
      "contextd.v1.ConversationService",
      "contextd.v1.TelemetryService",
      "grpc.health.v1.Health",
      "grpc.reflection.v1.ServerReflection",
      "grpc.reflection.v1alpha.ServerReflection",
    ]);
    expect(stdout).toContain("contextd.v1.ContextService/Compile\n");
  });

  it("serves Connect JSON over HTTP/1.1 on the same port", async () => {
    const response = await fetch(`${sidecar.url}/grpc.health.v1.Health/Check`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ status: "SERVING" });
  });
});
