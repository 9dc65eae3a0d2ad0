import * as grpc from "@grpc/grpc-js";
import { toBinary, create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CommitRequestSchema, ConversationService, GetStateRequestSchema } from "#gen/contextd/v1/conversation_service_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { grpcEnvelope, grpcStatus, rawHttp2 } from "../../support/raw-http2.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

describe("bad input gets the right code and the server keeps serving", () => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  beforeAll(async () => {
    sidecar = await startSidecar(["--max-request-bytes", "65536", "--max-messages", "5", "--max-deadline-ms", "60000", "--max-streams", "2"]);
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
  });
  const stillServing = async () => {
    expect((await client.unary(Health.method.check, { service: "" })).status).toBe(ServingStatus.SERVING);
  };
  const grpcHeaders = { "content-type": "application/grpc", te: "trailers" };
  const getState = "/contextd.v1.ConversationService/GetState";

  it("malformed protobuf bytes: INTERNAL from the protobuf decoder (connect's and grpc-go's choice)", async () => {
    const response = await rawHttp2(sidecar.url, getState, grpcHeaders, grpcEnvelope(Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f])));
    const status = grpcStatus(response);
    expect(status.code).toBe(grpc.status.INTERNAL);
    expect(status.message).toContain("parse binary");
    await stillServing();
  });

  it("wrong content-type: HTTP 415, no handler runs", async () => {
    const response = await rawHttp2(sidecar.url, getState, { "content-type": "text/plain" }, Buffer.from("hello"));
    expect(response.status).toBe(415);
    const viaFetch = await fetch(`${sidecar.url}${getState}`, { method: "POST", headers: { "content-type": "application/xml" }, body: "<a/>" });
    expect(viaFetch.status).toBe(415);
    await stillServing();
  });

  it("truncated frame: the declared length is longer than the body", async () => {
    const payload = toBinary(GetStateRequestSchema, create(GetStateRequestSchema, { conversationId: "bad/truncated" }));
    const response = await rawHttp2(sidecar.url, getState, grpcHeaders, grpcEnvelope(payload, { declaredLength: payload.length + 100 }));
    expect(grpcStatus(response).code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(grpcStatus(response).message).toContain("incomplete envelope");
    const cutHeader = await rawHttp2(sidecar.url, getState, grpcHeaders, Buffer.from([0, 0, 0]));
    expect(grpcStatus(cutHeader).code).toBe(grpc.status.INVALID_ARGUMENT);
    await stillServing();
  });

  it("oversized message: RESOURCE_EXHAUSTED naming the limit", async () => {
    const big = { conversationId: "bad/" + "x".repeat(70_000) };
    // Both name the flag, not the library's option: the direct gRPC path by the envelope's length,
    // a Connect unary request by its content-length, before any of it is read.
    await expect(client.unary(ConversationService.method.getState, big)).rejects.toMatchObject({
      code: grpc.status.RESOURCE_EXHAUSTED,
      details: expect.stringMatching(/^request message of \d+ bytes is over the limit of 65536 bytes \(--max-request-bytes\)$/),
    });
    const body = JSON.stringify(big);
    const viaConnect = await fetch(`${sidecar.url}${getState}`, { method: "POST", headers: { "content-type": "application/json" }, body });
    expect(viaConnect.status).toBe(429);
    expect(await viaConnect.json()).toMatchObject({
      code: "resource_exhausted",
      message: `request message of ${Buffer.byteLength(body)} bytes is over the limit of 65536 bytes (--max-request-bytes)`,
      details: [expect.objectContaining({ type: "google.rpc.ErrorInfo" })],
    });
    await stillServing();
  });

  it("too many messages in one request: RESOURCE_EXHAUSTED naming the field", async () => {
    const messages = Array.from({ length: 6 }, (_, i) => ({ id: `m${i}`, role: 3, parts: [{ kind: { case: "text" as const, value: { text: "x" } } }] }));
    const request = create(CommitRequestSchema, {
      conversationId: "bad/many",
      deltas: [{ operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages } } }],
    });
    const error = await client.unary(ConversationService.method.commit, request).catch((caught: grpc.ServiceError) => caught);
    expect(error).toMatchObject({ code: grpc.status.RESOURCE_EXHAUSTED });
    expect((error as grpc.ServiceError).details).toContain("deltas.append_messages.messages: 6");
    expect((error as grpc.ServiceError).details).toContain("limit of 5");
    await stillServing();
  });

  it("unknown enum values: a JSON name is INVALID_ARGUMENT; a binary number reaches the service, which rejects it", async () => {
    const viaJson = await fetch(`${sidecar.url}/contextd.v1.ConversationService/Commit`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ conversationId: "bad/enum", deltas: [{ clearSegment: { segment: "SEGMENT_NO_SUCH" } }] }),
    });
    expect(viaJson.status).toBe(400);
    expect(await viaJson.json()).toMatchObject({ code: "invalid_argument" });
    const viaBinary = client.unary(ConversationService.method.commit, {
      conversationId: "bad/enum",
      deltas: [{ operation: { case: "clearSegment", value: { segment: 99 as Segment } } }],
    });
    await expect(viaBinary).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT });
    await stillServing();
  });

  it("deadline 0 is DEADLINE_EXCEEDED; a deadline above --max-deadline-ms is INVALID_ARGUMENT", async () => {
    const expired = await rawHttp2(sidecar.url, getState, { ...grpcHeaders, "grpc-timeout": "0m" }, grpcEnvelope(new Uint8Array()));
    expect(grpcStatus(expired).code).toBe(grpc.status.DEADLINE_EXCEEDED);
    const tooLong = await rawHttp2(sidecar.url, getState, { ...grpcHeaders, "grpc-timeout": "2M" }, grpcEnvelope(new Uint8Array()));
    expect(grpcStatus(tooLong)).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, message: expect.stringContaining("60000") });
    await stillServing();
  });

  it("more open streams than --max-streams: RESOURCE_EXHAUSTED, and a slot frees when one ends", async () => {
    const first = client.serverStream(Health.method.watch, { service: "" }).on("error", () => undefined);
    const second = client.serverStream(Health.method.watch, { service: "" }).on("error", () => undefined);
    await Promise.all([first, second].map((stream) => new Promise((resolve) => stream.once("data", resolve))));
    const third = client.serverStream(Health.method.watch, { service: "" });
    const error = await new Promise<grpc.ServiceError>((resolve) => third.on("error", resolve));
    expect(error.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(error.details).toContain("the limit is 2");
    first.cancel();
    second.cancel();
    await expect
      .poll(async () => {
        const retry = client.serverStream(Health.method.watch, { service: "" }).on("error", () => undefined);
        const outcome = await new Promise<string>((resolve) => {
          retry.once("data", () => resolve("data"));
          retry.once("error", () => resolve("error"));
        });
        retry.cancel();
        return outcome;
      })
      .toBe("data");
    await stillServing();
  });
});
