import { execFile } from "node:child_process";
import { promisify } from "node:util";
import * as grpc from "@grpc/grpc-js";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, equals, fromBinary, fromJson, toBinary, toJsonString, type JsonValue } from "@bufbuild/protobuf";
import { CompiledPayloadSchema, CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { CompileResponseSchema, ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

const run = promisify(execFile);

describe("one port, every protocol", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await startSidecar(["--log-level", "debug"]);
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("prints the configuration once at start, with secrets hidden", () => {
    const starts = sidecar.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg === "contextd listening");
    expect(starts).toHaveLength(1);
    expect(starts[0].config).toMatchObject({ host: "127.0.0.1", port: 0, maxMessages: 10000, authTokens: 0, metricsPath: "/metrics" });
  });

  it("serves gRPC to grpc-js: a commit, then the state", async () => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    try {
      const committed = await client.unary(ConversationService.method.commit, {
        conversationId: "protocols/grpc-js",
        deltas: [{ operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: [{ id: "m1", role: 3, parts: [{ kind: { case: "text", value: { text: "hi" } } }] }] } } }],
      });
      expect(committed.version).toBe(1n);
      const state = await client.unary(ConversationService.method.getState, { conversationId: "protocols/grpc-js" });
      expect(state.state?.history.map((message) => message.id)).toEqual(["m1"]);
    } finally {
      client.close();
    }
  });

  it("echoes x-request-id in gRPC response metadata", async () => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    try {
      const metadata = new grpc.Metadata();
      metadata.set("x-request-id", "grpc-caller-id-7");
      const headers = await new Promise<grpc.Metadata>((resolve, reject) => {
        const call = client.raw.makeUnaryRequest(
          "/grpc.health.v1.Health/Check",
          () => Buffer.alloc(0),
          (bytes: Buffer) => bytes,
          {},
          metadata,
          (error) => error && reject(error),
        );
        call.on("metadata", resolve);
      });
      expect(headers.get("x-request-id")).toEqual(["grpc-caller-id-7"]);
    } finally {
      client.close();
    }
  });

  it("serves buf curl over the Connect protocol and over gRPC, using reflection", async () => {
    const connect = await run("npx", ["buf", "curl", "--protocol", "connect", "--data", '{"service":""}', `${sidecar.url}/grpc.health.v1.Health/Check`]);
    expect(JSON.parse(connect.stdout)).toEqual({ status: "SERVING" });
    const viaGrpc = await run("npx", [
      "buf", "curl", "--protocol", "grpc", "--http2-prior-knowledge",
      "--data", '{"conversation_id":"protocols/buf"}', `${sidecar.url}/contextd.v1.ConversationService/GetState`,
    ]);
    expect(JSON.parse(viaGrpc.stdout)).toMatchObject({ state: { conversationId: "protocols/buf" } });
  });

  it("serves Connect JSON to plain fetch over HTTP/1.1, echoing x-request-id", async () => {
    const response = await fetch(`${sidecar.url}/contextd.v1.ConversationService/GetState`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-request-id": "caller-chosen-id-1" },
      body: JSON.stringify({ conversationId: "protocols/fetch" }),
    });
    expect(response.status).toBe(200);
    expect(response.headers.get("x-request-id")).toBe("caller-chosen-id-1");
    expect(await response.json()).toMatchObject({ state: { conversationId: "protocols/fetch" } });
    const generated = await fetch(`${sidecar.url}/grpc.health.v1.Health/Check`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    expect(generated.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
  });

  it("serves gRPC-Web over HTTP/1.1 and HTTP/2, Connect binary over HTTP/2 and gRPC with connect-node", async () => {
    const transports = {
      "grpc-web h1": createGrpcWebTransport({ baseUrl: sidecar.url, httpVersion: "1.1" }),
      "grpc-web h2": createGrpcWebTransport({ baseUrl: sidecar.url, httpVersion: "2" }),
      "connect h2": createConnectTransport({ baseUrl: sidecar.url, httpVersion: "2" }),
      "connect h1": createConnectTransport({ baseUrl: sidecar.url, httpVersion: "1.1" }),
      "grpc h2": createGrpcTransport({ baseUrl: sidecar.url }),
    };
    for (const [name, transport] of Object.entries(transports)) {
      const health = createClient(Health, transport);
      expect((await health.check({ service: "contextd.v1.ContextService" })).status, name).toBe(ServingStatus.SERVING);
      const conversations = createClient(ConversationService, transport);
      const state = await conversations.getState({ conversationId: `protocols/${name}` });
      expect(state.state?.conversationId, name).toBe(`protocols/${name}`);
      // A server stream over the same protocol: health Watch sends the current status first.
      for await (const update of health.watch({ service: "" })) {
        expect(update.status, name).toBe(ServingStatus.SERVING);
        break;
      }
    }
  });

  it("answers a Compile with canonical protobuf bytes over gRPC and the same result as Connect JSON", async () => {
    const request = create(CompileRequestSchema, {
      history: {
        messages: Array.from({ length: 50 }, (_, i) => ({ id: `h${i}`, role: i % 2 ? Role.ASSISTANT : Role.USER, parts: [{ kind: { case: "text" as const, value: { text: `turn ${i} ✓` } } }] })),
      },
    });
    const raw = new grpc.Client(`127.0.0.1:${sidecar.port}`, grpc.credentials.createInsecure());
    const bytes = await new Promise<Buffer>((resolve, reject) =>
      raw.makeUnaryRequest(
        "/contextd.v1.ContextService/Compile",
        () => Buffer.from(toBinary(CompileRequestSchema, request)),
        (response: Buffer) => response,
        request,
        (error, response) => (error ? reject(error) : resolve(response!)),
      ),
    );
    raw.close();
    const overGrpc = fromBinary(CompileResponseSchema, bytes);
    expect(Buffer.from(toBinary(CompileResponseSchema, overGrpc)).equals(bytes)).toBe(true);
    const overJson = await fetch(`${sidecar.url}/contextd.v1.ContextService/Compile`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: toJsonString(CompileRequestSchema, request),
    });
    const viaJson = fromJson(CompileResponseSchema, (await overJson.json()) as JsonValue);
    expect(overGrpc.result?.payload?.history.map((message) => message.id)).toEqual(request.history!.messages.map((message) => message.id));
    expect(equals(CompiledPayloadSchema, overGrpc.result!.payload!, viaJson.result!.payload!)).toBe(true);
  });

  it("logs one JSON line per RPC at debug, with method, code and request id", async () => {
    await fetch(`${sidecar.url}/grpc.health.v1.Health/Check`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-request-id": "log-line-check" },
      body: "{}",
    });
    await expect.poll(() => sidecar.logs.some((line) => line.includes('"requestId":"log-line-check"'))).toBe(true);
    const entry = JSON.parse(sidecar.logs.find((line) => line.includes('"requestId":"log-line-check"'))!);
    expect(entry).toMatchObject({ level: "debug", msg: "rpc", method: "grpc.health.v1.Health/Check", code: "ok" });
  });

  it("serves Prometheus metrics on GET /metrics of the same port", async () => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    await expect(client.unary(ConversationService.method.getState, { conversationId: "" })).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT });
    const history = { messages: [{ id: "metrics-1", role: Role.USER, parts: [{ kind: { case: "text" as const, value: { text: "count me" } } }] }] };
    await client.unary(ContextService.method.compile, { history });
    client.close();
    const response = await fetch(`${sidecar.url}/metrics`);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toContain("text/plain");
    const text = await response.text();
    expect(text).toMatch(/contextd_rpc_requests_total\{method="grpc.health.v1.Health\/Check",code="ok"\} \d+/);
    expect(text).toMatch(/contextd_rpc_requests_total\{method="contextd.v1.ConversationService\/GetState",code="invalid_argument"\} 1\n/);
    expect(text).toMatch(/contextd_rpc_duration_seconds_bucket\{method="contextd.v1.ConversationService\/Commit",le="\+Inf"\} 1\n/);
    expect(text).toContain("contextd_serving 1\n");
    expect(text).toContain("# TYPE contextd_compile_tokens_total counter");
    // The compile's request message is kept for reuse; the gauges show the caches' sizes.
    expect(Number(/contextd_recent_messages_bytes (\d+)/.exec(text)?.[1])).toBeGreaterThan(0);
    expect(text).toMatch(/contextd_retained_encoding_bytes \d+\n/);
  });

  it("refuses Connect JSON with unknown fields or enum names, naming them, instead of dropping them", async () => {
    const commit = (body: string) =>
      fetch(`${sidecar.url}/contextd.v1.ConversationService/Commit`, { method: "POST", headers: { "content-type": "application/json" }, body });
    const cases: [string, string][] = [
      ['{"conversationId":"protocols/json","deltas":[{"appendUsr":{}}]}', 'cannot decode message contextd.v1.Delta from JSON: key "appendUsr" is unknown'],
      ['{"conversationId":"protocols/json","deltas":[{"appendMessages":{"segment":"history","messages":[]}}]}', 'cannot decode enum contextd.v1.Segment from JSON: "history"'],
      ['{"conversationId":"protocols/json","history":{"messages":[]}}', 'cannot decode message contextd.v1.CommitRequest from JSON: key "history" is unknown'],
    ];
    for (const [body, message] of cases) {
      const response = await commit(body);
      expect(response.status, body).toBe(400);
      expect(await response.json()).toEqual({ code: "invalid_argument", message });
    }
    const valid = await commit('{"conversationId":"protocols/json","deltas":[{"appendMessages":{"segment":"SEGMENT_HISTORY","messages":[{"id":"u1","role":"ROLE_USER","parts":[{"text":{"text":"hi"}}]}]}}]}');
    expect(valid.status).toBe(200);
  });
});
