import * as http2 from "node:http2";
import { create, toBinary, toJsonString, type DescMethod } from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { TelemetryService } from "#gen/contextd/v1/telemetry_service_pb";
import { Health } from "#gen/grpc/health/v1/health_pb";
import { grpcEnvelope, grpcStatus, rawHttp2Request } from "../support/raw-http2.js";
import { stringLimitOf } from "../../src/core/model/string-limits.js";
import { fill, randomSource } from "../support/random-messages.js";
import { startSidecar, type Sidecar } from "../support/sidecar.js";

// A seeded, bounded fuzz run over every RPC, in gRPC (binary, served from the stream) and Connect
// (binary and JSON): random requests of each method's type, half of them with their bytes or
// JSON text mutated. Every request must get a proper answer — a gRPC status in 0..16, a Connect
// error with a known code — and a well-formed request never INTERNAL or UNKNOWN (those would be
// bugs: malformed bytes are INTERNAL "parse binary", as in grpc-go and connect). The sidecar must
// still be serving at the end. Seed and count are fixed, so a failure reproduces.

const seed = 20261201;
const requestsPerMethod = 24;
const methods: DescMethod[] = [ContextService, ConversationService, TelemetryService, Health].flatMap((service) => service.methods);
const connectCodes = new Set([
  "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists", "permission_denied", "resource_exhausted",
  "failed_precondition", "aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss", "unauthenticated",
]);

function mutateBytes(bytes: Uint8Array, random: () => number): Uint8Array {
  const copy = Uint8Array.from(bytes);
  switch (Math.floor(random() * 3)) {
    case 0: // flip a few bytes
      for (let count = 0; count < 1 + Math.floor(random() * 4) && copy.length > 0; count++) copy[Math.floor(random() * copy.length)] = Math.floor(random() * 256);
      return copy;
    case 1: // cut it short
      return copy.subarray(0, Math.floor(random() * copy.length));
    default: // garbage in the middle
      return Buffer.concat([copy.subarray(0, copy.length >> 1), Buffer.from(Array.from({ length: 1 + Math.floor(random() * 16) }, () => Math.floor(random() * 256))), copy.subarray(copy.length >> 1)]);
  }
}

function mutateText(text: string, random: () => number): string {
  const at = Math.floor(random() * (text.length + 1));
  const pieces = ["{", "}", '"', "[", "]", ":", ",", "null", "1e999", '"\\u0000"', '{"unknownField":1}'];
  return text.slice(0, at) + pieces[Math.floor(random() * pieces.length)] + text.slice(at + Math.floor(random() * 3));
}

function randomRequest(method: DescMethod, random: () => number) {
  const message = reflect(method.input);
  fill(message, random, 0);
  return message.message;
}

describe("fuzz: random and mutated requests over every RPC", () => {
  let sidecar: Sidecar;
  let session: http2.ClientHttp2Session;
  beforeAll(async () => {
    sidecar = await startSidecar(["--max-deadline-ms", "60000"]);
    session = http2.connect(sidecar.url);
  });
  afterAll(async () => {
    session?.close();
    await sidecar?.stop();
  });

  it("implements every method the protos declare: an empty request to each is never UNIMPLEMENTED (the generated Go servers' default)", async () => {
    // gen/go's Unimplemented*Handler / Unimplemented*Server are what protoc-gen-connect-go and
    // protoc-gen-go-grpc emit for Go servers to embed; the sidecar is TypeScript, and a method it
    // left out would answer the same UNIMPLEMENTED. Every method, default flags.
    const unimplemented: string[] = [];
    for (const method of methods) {
      const path = `/${method.parent.typeName}/${method.name}`;
      const response = await rawHttp2Request(session, path, { "content-type": "application/grpc", te: "trailers", "grpc-timeout": "150m" }, grpcEnvelope(toBinary(method.input, create(method.input))));
      if (grpcStatus(response).code === 12) unimplemented.push(path);
    }
    expect(unimplemented).toEqual([]);
    expect(methods.map((method) => method.name)).toEqual(expect.arrayContaining(["GetUsage", "ListTenantUsage", "DeleteConversation", "DeleteConversations", "ExportConversations", "Recall", "Fork", "Rewind"]));
  });

  it("gRPC: every request gets a status in 0..16; well-formed ones never INTERNAL or UNKNOWN", async () => {
    const random = randomSource(seed);
    const unexpected: string[] = [];
    let answered = 0;
    for (const method of methods) {
      const path = `/${method.parent.typeName}/${method.name}`;
      for (let index = 0; index < requestsPerMethod; index++) {
        const bytes = toBinary(method.input, randomRequest(method, random));
        const mutated = random() < 0.5;
        const body = grpcEnvelope(mutated ? mutateBytes(bytes, random) : bytes);
        // Streams (Watch, WatchEvents, a CompileSession waiting for more) end by their deadline.
        const response = await rawHttp2Request(session, path, { "content-type": "application/grpc", te: "trailers", "grpc-timeout": "150m" }, body);
        const { code, message } = grpcStatus(response);
        answered++;
        if (!(Number.isInteger(code) && code >= 0 && code <= 16)) unexpected.push(`${path} #${index}: status ${code}`);
        if (!mutated && (code === 13 || code === 2)) unexpected.push(`${path} #${index}: well-formed request got ${code} "${message}"`);
      }
    }
    expect(unexpected).toEqual([]);
    expect(answered).toBe(methods.length * requestsPerMethod);
  });

  it("Connect binary and JSON: every request gets a known error code or a success", async () => {
    const random = randomSource(seed + 1);
    const unexpected: string[] = [];
    for (const method of methods) {
      const path = `${sidecar.url}/${method.parent.typeName}/${method.name}`;
      const streaming = method.methodKind !== "unary";
      for (let index = 0; index < requestsPerMethod; index++) {
        const request = randomRequest(method, random);
        const json = random() < 0.5;
        const mutated = random() < 0.5;
        let body: Uint8Array;
        if (json) {
          let text: string;
          try {
            text = toJsonString(method.input, request);
          } catch {
            continue; // e.g. NaN in a float: not representable as JSON by protobuf-es
          }
          body = Buffer.from(mutated ? mutateText(text, random) : text);
        } else {
          const bytes = toBinary(method.input, request);
          body = mutated ? mutateBytes(bytes, random) : bytes;
        }
        const contentType = `application/${streaming ? "connect+" : ""}${json ? "json" : "proto"}`;
        const response = await fetch(path, {
          method: "POST",
          headers: { "content-type": contentType, "connect-timeout-ms": "150", "connect-protocol-version": "1" },
          body: streaming ? grpcEnvelope(body) : body,
        });
        const answer = Buffer.from(await response.arrayBuffer());
        // fetch speaks HTTP/1.1, which cannot carry a bidirectional stream: connect says so.
        if (method.methodKind === "bidi_streaming") {
          if (response.status !== 505) unexpected.push(`${path} #${index}: bidi over HTTP/1.1 answered ${response.status}`);
          continue;
        }
        let code: string;
        if (!streaming) {
          code = response.status === 200 ? "ok" : (JSON.parse(answer.toString()) as { code: string }).code;
        } else {
          // The last envelope (flag 2) is the end of the stream, with an error or none.
          let offset = 0;
          let end: { error?: { code: string } } | undefined;
          while (offset + 5 <= answer.length) {
            const length = answer.readUInt32BE(offset + 1);
            if (answer[offset] === 2) end = JSON.parse(answer.subarray(offset + 5, offset + 5 + length).toString());
            offset += 5 + length;
          }
          code = end === undefined ? "missing end of stream" : (end.error?.code ?? "ok");
        }
        if (code !== "ok" && !connectCodes.has(code)) unexpected.push(`${path} #${index}: ${code}`);
        if (!mutated && (code === "internal" || code === "unknown")) unexpected.push(`${path} #${index} (${contentType}): well-formed request got ${code}`);
      }
    }
    expect(unexpected).toEqual([]);
  });

  it("refuses every request field with a length limit one byte over it, on gRPC and Connect JSON, naming the field", async () => {
    const unexpected: string[] = [];
    let checked = 0;
    for (const method of methods) {
      for (const field of method.input.fields) {
        const limit = stringLimitOf(method.input.typeName, field.name);
        if (limit === undefined || field.fieldKind !== "scalar") continue;
        const request = create(method.input, { [field.localName]: "z".repeat(limit.bytes + 1) } as never);
        const expected = `${field.name} has ${limit.bytes + 1} bytes, over the limit of ${limit.bytes} bytes`;
        const path = `/${method.parent.typeName}/${method.name}`;
        const response = await rawHttp2Request(session, path, { "content-type": "application/grpc", te: "trailers", "grpc-timeout": "2S" }, grpcEnvelope(toBinary(method.input, request)));
        const status = grpcStatus(response);
        if (status.code !== 3 || !status.message.startsWith(expected)) unexpected.push(`gRPC ${path} ${field.name}: ${status.code} "${status.message}"`);
        if (method.methodKind === "bidi_streaming") continue;
        const streaming = method.methodKind !== "unary";
        const json = Buffer.from(toJsonString(method.input, request));
        const connect = await fetch(`${sidecar.url}${path}`, {
          method: "POST",
          headers: { "content-type": `application/${streaming ? "connect+" : ""}json`, "connect-timeout-ms": "2000", "connect-protocol-version": "1" },
          body: streaming ? grpcEnvelope(json) : json,
        });
        const answer = Buffer.from(await connect.arrayBuffer());
        const error = (streaming ? JSON.parse(answer.subarray(5).toString()).error : JSON.parse(answer.toString())) as { code: string; message: string };
        if (error.code !== "invalid_argument" || !error.message.startsWith(expected)) unexpected.push(`Connect ${path} ${field.name}: ${error.code} "${error.message}"`);
        checked++;
      }
    }
    expect(unexpected).toEqual([]);
    // GetState, Commit (id and key), Clear, Watch, ListConversations, ReadToolResult (id and call), ReportUsage, Render (id and view), WatchEvents, ...
    expect(checked).toBeGreaterThanOrEqual(12);
  });

  it("is still serving afterwards", async () => {
    expect(sidecar.process.exitCode).toBeNull();
    const health = await rawHttp2Request(session, "/grpc.health.v1.Health/Check", { "content-type": "application/grpc", te: "trailers" }, grpcEnvelope(new Uint8Array(0)));
    expect(grpcStatus(health).code).toBe(0);
    expect(response(health.body)).toBe(1); // SERVING
  });
});

// HealthCheckResponse.status (field 1, varint) of an enveloped response.
function response(body: Buffer): number {
  expect(body[5]).toBe(0x08);
  return body[6]!;
}
