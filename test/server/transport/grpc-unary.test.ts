import * as http2 from "node:http2";
import { gzipSync } from "node:zlib";
import { create, fromBinary, toBinary, toJsonString, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { trailerParse } from "@connectrpc/connect/protocol-grpc-web";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { CompileResponseSchema } from "#gen/contextd/v1/context_service_pb";
import {
  CommitRequestSchema,
  CommitResponseSchema,
  GetStateRequestSchema,
  GetStateResponseSchema,
} from "#gen/contextd/v1/conversation_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { takesStream } from "../../../src/server/transport/grpc-unary.js";
import { grpcEnvelope, grpcStatus, rawHttp2Request, type RawResponse } from "../../support/raw-http2.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

// Unary binary gRPC is served by src/server/transport/grpc-unary.ts, everything else by connect. These tests
// speak raw HTTP/2 so that every header, trailer and byte the direct path produces is checked.

function payloadOf<Desc extends DescMessage>(schema: Desc, response: RawResponse): MessageShape<Desc> {
  expect(response.body[0]).toBe(0);
  const length = response.body.readUInt32BE(1);
  expect(response.body.length).toBe(5 + length);
  return fromBinary(schema, response.body.subarray(5));
}

describe("unary gRPC served from the HTTP/2 stream", () => {
  let sidecar: Sidecar;
  let session: http2.ClientHttp2Session;
  const call = (path: string, body: Uint8Array | Uint8Array[], headers: http2.OutgoingHttpHeaders = {}): Promise<RawResponse> =>
    rawHttp2Request(session, path, { "content-type": "application/grpc", te: "trailers", ...headers }, body);
  const getState = "/contextd.v1.ConversationService/GetState";
  const commit = "/contextd.v1.ConversationService/Commit";
  const compile = "/contextd.v1.ContextService/Compile";
  const getStateRequest = (conversationId: string) => grpcEnvelope(toBinary(GetStateRequestSchema, create(GetStateRequestSchema, { conversationId })));

  beforeAll(async () => {
    sidecar = await startSidecar(["--max-deadline-ms", "60000"]);
    session = http2.connect(sidecar.url);
  });
  afterAll(async () => {
    session?.close();
    await sidecar?.stop();
  });

  it("answers with headers, one enveloped message and grpc-status 0, echoing the caller's request id", async () => {
    const request = create(CompileRequestSchema, {
      history: { messages: [{ id: "u1", role: Role.USER, parts: [{ kind: { case: "text", value: { text: "hello <|endoftext|>" } } }] }] },
    });
    const response = await call(compile, grpcEnvelope(toBinary(CompileRequestSchema, request)), { "x-request-id": "trace-42" });
    expect(response.headers[":status"]).toBe(200);
    expect(response.headers["content-type"]).toBe("application/grpc+proto");
    expect(response.headers["x-request-id"]).toBe("trace-42");
    expect(response.trailers["grpc-status"]).toBe("0");
    const result = payloadOf(CompileResponseSchema, response).result!;
    expect(result.payload!.history.map((message) => message.id)).toEqual(["u1"]);

    // The same call through connect (Connect protocol, JSON) gives the same result.
    const viaConnect = await fetch(`${sidecar.url}${compile}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ history: { messages: [{ id: "u1", role: "ROLE_USER", parts: [{ text: { text: "hello <|endoftext|>" } }] }] } }),
    });
    const json = ((await viaConnect.json()) as { result: { payload: { history: { id: string }[] }; usage: { total: string } } }).result;
    expect(json.payload.history.map((message) => message.id)).toEqual(["u1"]);
    expect(json.usage.total).toBe(String(result.usage!.total));
  });

  it("carries error metadata in the trailers and encodes grpc-message as the gRPC spec does", async () => {
    const id = `unary/conflict-${Date.now()}`;
    const append = (expectedVersion: bigint) =>
      grpcEnvelope(
        toBinary(
          CommitRequestSchema,
          create(CommitRequestSchema, {
            conversationId: id,
            expectedVersion,
            deltas: [{ operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: [{ id: `m${expectedVersion}`, role: Role.USER, parts: [{ kind: { case: "text", value: { text: "hi" } } }] }] } } }],
          }),
        ),
      );
    const first = await call(commit, append(0n));
    expect(payloadOf(CommitResponseSchema, first).version).toBe(1n);
    const stale = await call(commit, append(0n));
    expect(stale.headers[":status"]).toBe(200);
    expect(stale.body.length).toBe(0);
    expect(grpcStatus(stale).code).toBe(10); // ABORTED
    expect(stale.trailers["contextd-current-version"]).toBe("1");
    // "/" and ":" stay as they are; only bytes outside printable ASCII and "%" are escaped.
    expect(grpcStatus(stale).rawMessage).toContain(id);
    expect(grpcStatus(stale).rawMessage).not.toContain("%2F");
  });

  it("rejects malformed envelopes with connect's codes and keeps serving", async () => {
    const payload = toBinary(GetStateRequestSchema, create(GetStateRequestSchema, { conversationId: "unary/bad" }));
    expect(grpcStatus(await call(getState, Buffer.alloc(0)))).toMatchObject({ code: 12, message: expect.stringContaining("missing input message") });
    expect(grpcStatus(await call(getState, Buffer.concat([grpcEnvelope(payload), grpcEnvelope(payload)])))).toMatchObject({
      code: 12,
      message: expect.stringContaining("extra input message"),
    });
    // The compressed flag without a grpc-encoding header.
    expect(grpcStatus(await call(getState, grpcEnvelope(payload, { flags: 1 })))).toMatchObject({ code: 13, message: expect.stringContaining("compressed") });
    expect(grpcStatus(await call(getState, grpcEnvelope(Buffer.from([0x0a, 0xff]))))).toMatchObject({ code: 13, message: expect.stringContaining("parse binary") });
    expect(grpcStatus(await call(getState, getStateRequest("unary/fine"))).code).toBe(0);
  });

  it("parses grpc-timeout: past deadlines are DEADLINE_EXCEEDED, malformed or too long ones INVALID_ARGUMENT", async () => {
    expect(grpcStatus(await call(getState, getStateRequest("unary/deadline"), { "grpc-timeout": "0m" })).code).toBe(4);
    expect(grpcStatus(await call(getState, getStateRequest("unary/deadline"), { "grpc-timeout": "soon" }))).toMatchObject({
      code: 3,
      message: expect.stringContaining("invalid grpc timeout"),
    });
    expect(grpcStatus(await call(getState, getStateRequest("unary/deadline"), { "grpc-timeout": "2M" }))).toMatchObject({
      code: 3,
      message: expect.stringContaining("60000"),
    });
    const inTime = await call(getState, getStateRequest("unary/deadline"), { "grpc-timeout": "5S" });
    expect(grpcStatus(inTime).code).toBe(0);
    expect(payloadOf(GetStateResponseSchema, inTime).state!.conversationId).toBe("unary/deadline");
  });

  it("leaves compressed requests, the JSON codec and unknown methods to connect", async () => {
    const payload = toBinary(GetStateRequestSchema, create(GetStateRequestSchema, { conversationId: "unary/gzip" }));
    const gzipped = await call(getState, grpcEnvelope(gzipSync(payload), { flags: 1 }), { "grpc-encoding": "gzip" });
    expect(grpcStatus(gzipped).code).toBe(0);
    const json = await call(getState, grpcEnvelope(Buffer.from(JSON.stringify({ conversationId: "unary/json" }))), { "content-type": "application/grpc+json" });
    expect(grpcStatus(json).code).toBe(0);
    expect(JSON.parse(json.body.subarray(5).toString())).toMatchObject({ state: { conversationId: "unary/json" } });
    // connect's router answers paths it does not know with HTTP 404, which gRPC clients read as UNIMPLEMENTED.
    expect((await call("/contextd.v1.ConversationService/NoSuchMethod", getStateRequest("x"))).headers[":status"]).toBe(404);
  });

  it("assembles a request that arrives in many small writes, and never buffers past one envelope", async () => {
    const history = Array.from({ length: 2_000 }, (_, index) => ({
      id: `big${index}`,
      role: Role.USER,
      parts: [{ kind: { case: "text" as const, value: { text: `message ${index} `.repeat(20) } } }],
    }));
    const body = grpcEnvelope(toBinary(CompileRequestSchema, create(CompileRequestSchema, { history: { messages: history } })));
    expect(body.length).toBeGreaterThan(400_000);
    const pieces: Buffer[] = [];
    for (let offset = 0; offset < body.length; offset += 1_000) pieces.push(body.subarray(offset, offset + 1_000));
    const response = await call(compile, pieces);
    expect(grpcStatus(response).code).toBe(0);
    expect(payloadOf(CompileResponseSchema, response).result!.payload!.history.length).toBe(2_000);

    // Declares 10 bytes, then keeps sending: refused at once, not read to the end.
    const liar = Buffer.alloc(5 + 10 + 200_000);
    liar.writeUInt32BE(10, 1);
    const refused = await call(getState, liar);
    expect(grpcStatus(refused)).toMatchObject({ code: 12, message: expect.stringContaining("extra input message") });
    expect(grpcStatus(await call(getState, getStateRequest("unary/after-liar"))).code).toBe(0);
  });

  it("survives callers resetting their streams with any error code, before or after the request ends", async () => {
    const codes = [http2.constants.NGHTTP2_CANCEL, http2.constants.NGHTTP2_INTERNAL_ERROR, http2.constants.NGHTTP2_PROTOCOL_ERROR];
    for (const code of codes) {
      for (const requestEnded of [false, true]) {
        const stream = session.request({ ":method": "POST", ":path": getState, "content-type": "application/grpc", te: "trailers" });
        stream.on("error", () => undefined);
        const closed = new Promise((resolve) => stream.once("close", resolve));
        if (requestEnded) stream.end(getStateRequest("unary/reset"));
        else stream.write(getStateRequest("unary/reset").subarray(0, 3));
        stream.close(code);
        await closed;
      }
    }
    expect(grpcStatus(await call(getState, getStateRequest("unary/after-resets"))).code).toBe(0);
  });

  it("takes only POSTed binary gRPC requests for unary methods without compression", () => {
    const methods = new Map([["/contextd.v1.ConversationService/GetState", { kind: "unary" } as never]]);
    const base = { ":method": "POST", ":path": getState, "content-type": "application/grpc" };
    expect(takesStream(methods, base)).toBeDefined();
    expect(takesStream(methods, { ...base, "content-type": "application/grpc+proto" })).toBeDefined();
    expect(takesStream(methods, { ...base, "grpc-encoding": "identity" })).toBeDefined();
    expect(takesStream(methods, { ...base, "grpc-encoding": "gzip" })).toBeUndefined();
    expect(takesStream(methods, { ...base, "content-type": "application/grpc+json" })).toBeUndefined();
    expect(takesStream(methods, { ...base, "content-type": "application/grpc-web+proto" })).toBeUndefined();
    expect(takesStream(methods, { ...base, "content-type": "application/proto" })).toBeUndefined();
    expect(takesStream(methods, { ...base, ":method": "GET" })).toBeUndefined();
    expect(takesStream(methods, { ...base, ":path": "/contextd.v1.ConversationService/Watch" })).toBeUndefined();
  });
});

describe("request bytes held by calls in progress", () => {
  let sidecar: Sidecar;
  let session: http2.ClientHttp2Session;
  const compile = "/contextd.v1.ContextService/Compile";
  // A compile of one message carrying about `length` characters: valid at any size.
  const compileOfSize = (length: number) =>
    grpcEnvelope(
      toBinary(
        CompileRequestSchema,
        create(CompileRequestSchema, { history: { messages: [{ id: "big", role: Role.USER, parts: [{ kind: { case: "text", value: { text: "x".repeat(length) } } }] }] } }),
      ),
    );
  const call = (body: Uint8Array) => rawHttp2Request(session, compile, { "content-type": "application/grpc", te: "trailers" }, body);
  const heldBytes = async () => {
    const text = await (await fetch(`${sidecar.url}/metrics`)).text();
    return Number(/^contextd_buffered_request_bytes (\d+)$/m.exec(text)![1]);
  };

  beforeAll(async () => {
    sidecar = await startSidecar(["--max-buffered-request-bytes", "300000", "--max-request-bytes", "1000000"]);
    session = http2.connect(sidecar.url);
  });
  afterAll(async () => {
    session?.close();
    await sidecar?.stop();
  });

  /**
   * A caller that sends a 200,000-character compile but its last 10 bytes, and waits: it holds what
   * arrived (a caller that only announces a size holds nothing; see "admission" below).
   */
  const stallCaller = async () => {
    const stalled = session.request({ ":method": "POST", ":path": compile, "content-type": "application/grpc", te: "trailers" });
    stalled.on("error", () => undefined);
    const request = compileOfSize(200_000);
    const sent = request.length - 10;
    stalled.write(request.subarray(0, sent));
    for (let attempt = 0; attempt < 200 && (await heldBytes()) !== sent; attempt++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(await heldBytes()).toBe(sent);
    return {
      heldBytes: sent,
      goAway: async () => {
        const closed = new Promise((resolve) => stalled.once("close", resolve));
        stalled.close(http2.constants.NGHTTP2_CANCEL);
        await closed;
        for (let attempt = 0; attempt < 200 && (await heldBytes()) !== 0; attempt++) await new Promise((resolve) => setTimeout(resolve, 10));
        expect(await heldBytes()).toBe(0);
      },
    };
  };

  it("refuses a call that would take them past --max-buffered-request-bytes before reading it, and admits it once they are released", async () => {
    const stalled = await stallCaller();
    // Small calls still fit beside it; one that does not is refused without being read.
    expect(grpcStatus(await call(compileOfSize(10))).code).toBe(0);
    const tooMuch = compileOfSize(150_000);
    const refused = await call(tooMuch);
    expect(grpcStatus(refused)).toMatchObject({
      code: 8,
      message: `request of ${tooMuch.length} bytes refused: calls in progress already hold ${stalled.heldBytes} bytes of requests (limit 300000, --max-buffered-request-bytes); retry later`,
    });
    // The stalled caller goes away: its bytes are released and the same call is admitted.
    await stalled.goAway();
    expect(grpcStatus(await call(tooMuch)).code).toBe(0);
    // Alone, a call larger than the whole budget (but within --max-request-bytes) is admitted too.
    expect(grpcStatus(await call(compileOfSize(500_000))).code).toBe(0);
    expect(await heldBytes()).toBe(0);
  });

  it("refuses Connect, Connect streaming and gRPC-Web requests by their content-length, each in its own protocol", async () => {
    const stalled = await stallCaller();
    const post = (path: string, contentType: string, body: Uint8Array | string) =>
      fetch(`${sidecar.url}${path}`, { method: "POST", headers: { "content-type": contentType }, body });
    const compileJson = (length: number) =>
      toJsonString(
        CompileRequestSchema,
        create(CompileRequestSchema, { history: { messages: [{ id: "json", role: Role.USER, parts: [{ kind: { case: "text", value: { text: "x".repeat(length) } } }] }] } }),
      );
    const refusal = expect.stringMatching(/^request of \d+ bytes refused: calls in progress already hold \d+ bytes of requests \(limit 300000, --max-buffered-request-bytes\); retry later$/);

    const connectUnary = await post(compile, "application/json", compileJson(150_000));
    expect(connectUnary.status).toBe(429);
    expect(await connectUnary.json()).toEqual({ code: "resource_exhausted", message: refusal, details: [expect.objectContaining({ type: "google.rpc.ErrorInfo" })] });

    const grpcWeb = await post(compile, "application/grpc-web+proto", compileOfSize(150_000));
    expect(grpcWeb.status).toBe(200);
    const trailerFrame = Buffer.from(await grpcWeb.arrayBuffer());
    expect(trailerFrame[0]).toBe(0x80);
    const trailer = trailerParse(trailerFrame.subarray(5));
    expect(trailer.get("grpc-status")).toBe("8");
    expect(decodeURIComponent(trailer.get("grpc-message")!)).toEqual(refusal);

    const watchRequest = Buffer.from(JSON.stringify({ conversationId: "x".repeat(150_000) }));
    const connectStream = await post("/contextd.v1.ConversationService/Watch", "application/connect+json", grpcEnvelope(watchRequest));
    expect(connectStream.status).toBe(200);
    const endStream = Buffer.from(await connectStream.arrayBuffer());
    expect(endStream[0]).toBe(2);
    expect(JSON.parse(endStream.subarray(5).toString())).toEqual({
      error: { code: "resource_exhausted", message: refusal, details: [expect.objectContaining({ type: "google.rpc.ErrorInfo" })] },
    });

    // gRPC with the JSON codec is served by connect too; with a content-length it is held like the others.
    const grpcJsonRequest = grpcEnvelope(Buffer.from(compileJson(150_000)));
    const grpcJson = await rawHttp2Request(
      session,
      compile,
      { "content-type": "application/grpc+json", te: "trailers", "content-length": String(grpcJsonRequest.length) },
      grpcJsonRequest,
    );
    expect(grpcStatus(grpcJson)).toEqual({ code: 8, message: refusal, rawMessage: expect.any(String) });

    // Small requests fit beside the stalled one; the large ones fit once it is gone.
    expect((await post(compile, "application/json", compileJson(10))).status).toBe(200);
    await stalled.goAway();
    expect((await post(compile, "application/json", compileJson(150_000))).status).toBe(200);
    expect((await post(compile, "application/grpc-web+proto", compileOfSize(150_000))).status).toBe(200);
    expect(await heldBytes()).toBe(0);
  });
});
