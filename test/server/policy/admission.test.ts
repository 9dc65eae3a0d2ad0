import * as http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { ErrorInfoSchema } from "#gen/google/rpc/error_details_pb";
import { StatusSchema } from "#gen/google/rpc/status_pb";
import { HealthCheckRequestSchema } from "#gen/grpc/health/v1/health_pb";
import { grpcEnvelope, grpcStatus, rawHttp2Request } from "../../support/raw-http2.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

// Admission (src/server/policy/admission.ts): what a call must pass before its body is read.
// Issue 15's lock-out: calls that announce 16 MiB and send nothing more must not hold the shared
// request-memory budget, must not need no token to do so, and must not last forever.

const compilePath = "/contextd.v1.ContextService/Compile";
const healthPath = "/grpc.health.v1.Health/Check";
const token = "admission-test-token-0123456789";
const healthRequest = grpcEnvelope(toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, {})));
const compileRequest = (text: string) =>
  grpcEnvelope(toBinary(CompileRequestSchema, create(CompileRequestSchema, { history: { messages: [{ id: "u1", role: Role.USER, parts: [{ kind: { case: "text", value: { text } } }] }] } })));

async function metric(sidecar: Sidecar, name: string): Promise<number> {
  const text = await (await fetch(`${sidecar.url}/metrics`)).text();
  return Number(new RegExp(`^${name} (\\d+)$`, "m").exec(text)![1]);
}

/** A call that sends `bytes` of its body and then stalls; resolves with its status once the server ends it. */
function stalledCall(session: http2.ClientHttp2Session, headers: http2.OutgoingHttpHeaders, bytes: Uint8Array) {
  const stream = session.request({ ":method": "POST", ":path": compilePath, "content-type": "application/grpc", te: "trailers", ...headers });
  stream.on("error", () => undefined);
  stream.write(bytes);
  const ended = new Promise<{ code: number; message: string; reason?: string }>((resolve) => {
    let trailers: http2.IncomingHttpHeaders = {};
    let responseHeaders: http2.IncomingHttpHeaders = {};
    const status = () => {
      const source = trailers["grpc-status"] !== undefined ? trailers : responseHeaders;
      const reason = errorReason(source["grpc-status-details-bin"]);
      resolve({ code: Number(source["grpc-status"] ?? -1), message: decodeURIComponent(String(source["grpc-message"] ?? "")), ...(reason ? { reason } : {}) });
    };
    stream.on("response", (received) => (responseHeaders = received));
    stream.on("trailers", (received) => {
      trailers = received;
      status();
    });
    stream.on("close", status);
    stream.resume();
  });
  return { stream, ended };
}

/** The google.rpc.ErrorInfo reason in a grpc-status-details-bin trailer. */
function errorReason(header: string | string[] | undefined): string | undefined {
  if (typeof header !== "string") return undefined;
  const status = fromBinary(StatusSchema, Buffer.from(header, "base64"));
  for (const detail of status.details) {
    const info = anyUnpack(detail, ErrorInfoSchema);
    if (info) return info.reason;
  }
  return undefined;
}

// Five bytes: an envelope header announcing a 16 MiB message, the largest --max-request-bytes allows.
const announces16MiB = Buffer.from([0, 0x01, 0x00, 0x00, 0x00]);

describe("admission", () => {
  let sidecar: Sidecar;
  let session: http2.ClientHttp2Session;
  beforeAll(async () => {
    sidecar = await startSidecar(["--request-body-timeout-ms", "1500", "--max-buffered-request-bytes", "1000000"], { CONTEXTD_AUTH_TOKENS: token });
    session = http2.connect(sidecar.url);
  });
  afterAll(async () => {
    session?.close();
    await sidecar?.stop();
  });

  it("refuses a call without a token on its headers, before holding any of its body", async () => {
    const { stream, ended } = stalledCall(session, {}, announces16MiB);
    const status = await ended;
    expect(status).toEqual({ code: 16, message: 'contextd.v1.ContextService/Compile: missing "authorization: Bearer <token>" header', reason: "UNAUTHENTICATED" });
    // The server resets the stream after the status: the caller's unfinished body holds nothing.
    await new Promise((resolve) => (stream.closed ? resolve(undefined) : stream.once("close", resolve)));
    expect(stream.rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
    expect(await metric(sidecar, "contextd_buffered_request_bytes")).toBe(0);
  });

  it("holds what 16 stalled calls sent (80 bytes), not what they announced; others and health are served; the body timeout ends them", async () => {
    const stalled = Array.from({ length: 16 }, () => stalledCall(session, { authorization: `Bearer ${token}` }, announces16MiB));
    for (let attempt = 0; attempt < 200 && (await metric(sidecar, "contextd_buffered_request_bytes")) !== 80; attempt++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(await metric(sidecar, "contextd_buffered_request_bytes")).toBe(80);
    // Another caller's compile and a health probe go through meanwhile.
    const other = await rawHttp2Request(session, compilePath, { "content-type": "application/grpc", te: "trailers", authorization: `Bearer ${token}` }, compileRequest("hello"));
    expect(grpcStatus(other).code).toBe(0);
    const health = await rawHttp2Request(session, healthPath, { "content-type": "application/grpc", te: "trailers" }, healthRequest);
    expect(grpcStatus(health).code).toBe(0);
    // Within --request-body-timeout-ms (1.5 s here) each stalled call ends, and lets go of its bytes.
    for (const call of stalled) {
      expect(await call.ended).toEqual({
        code: 4,
        message: "request body not received within 1500 ms of its headers (5 bytes arrived; --request-body-timeout-ms)",
        reason: "REQUEST_BODY_TIMEOUT",
      });
    }
    expect(await metric(sidecar, "contextd_buffered_request_bytes")).toBe(0);
  });

  it("never refuses a health check for memory, while a stalled caller holds the whole budget", async () => {
    // 999,000 of the budget's 1,000,000 bytes arrive and the caller stalls.
    const big = compileRequest("x".repeat(1_100_000));
    const { stream, ended } = stalledCall(session, { authorization: `Bearer ${token}` }, big.subarray(0, 999_000));
    for (let attempt = 0; attempt < 300 && (await metric(sidecar, "contextd_buffered_request_bytes")) < 999_000; attempt++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(await metric(sidecar, "contextd_buffered_request_bytes")).toBe(999_000);
    // A compile that does not fit beside it is refused; health, on the direct path and through
    // connect (gRPC-Web with a content-length), is served.
    const refused = await rawHttp2Request(session, compilePath, { "content-type": "application/grpc", te: "trailers", authorization: `Bearer ${token}` }, compileRequest("y".repeat(5_000)));
    expect(grpcStatus(refused).code).toBe(8);
    expect(errorReason(refused.trailers["grpc-status-details-bin"])).toBe("REQUEST_MEMORY_EXHAUSTED");
    const direct = await rawHttp2Request(session, healthPath, { "content-type": "application/grpc", te: "trailers" }, healthRequest);
    expect(grpcStatus(direct).code).toBe(0);
    const viaConnect = await fetch(`${sidecar.url}${healthPath}`, { method: "POST", headers: { "content-type": "application/grpc-web+proto" }, body: healthRequest });
    expect(viaConnect.status).toBe(200);
    expect(Buffer.from(await viaConnect.arrayBuffer()).toString("latin1")).toContain("grpc-status: 0");
    stream.close(http2.constants.NGHTTP2_CANCEL);
    await ended;
    for (let attempt = 0; attempt < 200 && (await metric(sidecar, "contextd_buffered_request_bytes")) !== 0; attempt++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(await metric(sidecar, "contextd_buffered_request_bytes")).toBe(0);
  });

  it("resets a request connect serves whose body stalls past the timeout, and releases what it held", async () => {
    const body = Buffer.from(JSON.stringify({ history: { messages: [{ id: "u1", role: "ROLE_USER", parts: [{ text: { text: "z".repeat(10_000) } }] }] } }));
    const stream = session.request({ ":method": "POST", ":path": compilePath, "content-type": "application/json", "content-length": String(body.length), authorization: `Bearer ${token}` });
    stream.on("error", () => undefined);
    stream.write(body.subarray(0, 100));
    for (let attempt = 0; attempt < 200 && (await metric(sidecar, "contextd_buffered_request_bytes")) !== body.length; attempt++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(await metric(sidecar, "contextd_buffered_request_bytes")).toBe(body.length);
    const closed = await new Promise<number>((resolve) => stream.once("close", () => resolve(stream.rstCode ?? -1)));
    expect(closed).not.toBe(-1);
    for (let attempt = 0; attempt < 200 && (await metric(sidecar, "contextd_buffered_request_bytes")) !== 0; attempt++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(await metric(sidecar, "contextd_buffered_request_bytes")).toBe(0);
  });
});
