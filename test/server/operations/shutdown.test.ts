import * as http from "node:http";
import * as net from "node:net";
import * as grpc from "@grpc/grpc-js";
import { describe, expect, it } from "vitest";
import { TelemetryService } from "#gen/contextd/v1/telemetry_service_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar } from "../../support/sidecar.js";

/** Starts a Connect JSON unary call over HTTP/1.1 whose body is sent in two halves. */
function slowUnary(port: number, body: string) {
  const request = http.request({ host: "127.0.0.1", port, method: "POST", path: "/contextd.v1.ConversationService/GetState", headers: { "content-type": "application/json" } });
  const response = new Promise<{ status: number; body: string }>((resolve, reject) => {
    request.on("response", (incoming) => {
      let text = "";
      incoming.on("data", (chunk) => (text += chunk));
      incoming.on("end", () => resolve({ status: incoming.statusCode!, body: text }));
    });
    request.on("error", reject);
  });
  const half = Math.floor(body.length / 2);
  request.write(body.slice(0, half));
  return { finish: () => request.end(body.slice(half)), response };
}

function connects(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1", () => {
      socket.destroy();
      resolve(true);
    });
    socket.on("error", () => resolve(false));
  });
}

function streamOutcome(stream: grpc.ClientReadableStream<unknown>, received: unknown[]) {
  return new Promise<grpc.ServiceError | "ended">((resolve) => {
    stream.on("data", (message) => received.push(message));
    stream.on("error", resolve);
    stream.on("end", () => resolve("ended"));
  });
}

describe("graceful shutdown of the real process", () => {
  it("SIGTERM: NOT_SERVING first, streams end UNAVAILABLE, an in-flight unary call finishes, exit 0", async () => {
    const sidecar = await startSidecar(["--shutdown-grace-ms", "20000"]);
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    const healthUpdates: { status: ServingStatus }[] = [];
    const health = client.serverStream(Health.method.watch, { service: "" });
    const healthEnd = streamOutcome(health, healthUpdates);
    const events = client.serverStream(TelemetryService.method.watchEvents, {});
    const eventsEnd = streamOutcome(events, []);
    await expect.poll(() => healthUpdates.length).toBe(1);
    await expect.poll(async () => (await (await fetch(`${sidecar.url}/metrics`)).text()).includes("contextd_telemetry_subscribers 1\n")).toBe(true);

    const unary = slowUnary(sidecar.port, JSON.stringify({ conversationId: "shutdown/in-flight" }));
    await expect.poll(async () => (await (await fetch(`${sidecar.url}/metrics`)).text()).match(/contextd_requests_in_flight (\d+)/)?.[1]).toBe("3");

    const exited = sidecar.stop("SIGTERM");
    const healthError = await healthEnd;
    expect(healthUpdates.map((update) => update.status)).toEqual([ServingStatus.SERVING, ServingStatus.NOT_SERVING]);
    expect(healthError).toMatchObject({ code: grpc.status.UNAVAILABLE, details: expect.stringContaining("shutting down") });
    expect(await eventsEnd).toMatchObject({ code: grpc.status.UNAVAILABLE });

    // New connections are refused while the unary call is still being served.
    await expect.poll(() => connects(sidecar.port)).toBe(false);
    unary.finish();
    const finished = await unary.response;
    expect(finished.status).toBe(200);
    expect(JSON.parse(finished.body)).toMatchObject({ state: { conversationId: "shutdown/in-flight" } });
    expect(await exited).toBe(0);
    expect(sidecar.logs.some((line) => line.includes('"msg":"contextd stopped"'))).toBe(true);
    client.close();
  });

  it("a unary call that outlives the grace period is cut and the process still exits 0", async () => {
    const sidecar = await startSidecar(["--shutdown-grace-ms", "300"]);
    const unary = slowUnary(sidecar.port, JSON.stringify({ conversationId: "shutdown/too-slow" }));
    const outcome = unary.response.then(() => "answered", (error: Error) => error.message);
    await expect.poll(async () => (await (await fetch(`${sidecar.url}/metrics`)).text()).match(/contextd_requests_in_flight (\d+)/)?.[1]).toBe("1");
    expect(await sidecar.stop("SIGINT")).toBe(0);
    expect(await outcome).toMatch(/socket hang up|ECONNRESET/);
    expect(sidecar.logs.some((line) => line.includes("shutdown grace period over"))).toBe(true);
  });
});
