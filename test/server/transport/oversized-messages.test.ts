import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { ErrorInfoSchema } from "#gen/google/rpc/error_details_pb";
import { Health } from "#gen/grpc/health/v1/health_pb";
import { EnvelopeSizes } from "../../../src/server/transport/oversized-messages.js";
import { rawHttp2 } from "../../support/raw-http2.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

// Issue 29's open end: a request message over --max-request-bytes sent over gRPC-Web or Connect on
// HTTP/2 was answered INTERNAL, because connect-node refused it as soon as it read the envelope's
// length and reset the stream while a node client (10 MB of HTTP/2 session memory) still held the
// unsent rest of the body. Every protocol, HTTP version and call shape must now answer
// RESOURCE_EXHAUSTED naming the flag and the size (transport/oversized-messages.ts), and the
// connection must serve the next call. The limit is lowered to 1 MiB so a 12 MiB message is past
// the node client's session memory without a 40 MB request per case.

const limit = 1024 * 1024;
const request = (megabytes: number) => ({
  history: { messages: [{ id: "u", role: Role.USER, parts: [{ kind: { case: "text" as const, value: { text: "x".repeat(megabytes * 1024 * 1024) } } }] }] },
});
const refusal = /^request message of (\d+) bytes is over the limit of 1048576 bytes \(--max-request-bytes\)$/;

type Shape = "unary" | "server stream" | "bidi stream";
const cases: { protocol: "grpc" | "grpc-web" | "connect"; httpVersion: "1.1" | "2"; shape: Shape }[] = [];
for (const protocol of ["grpc", "grpc-web", "connect"] as const) {
  for (const httpVersion of ["1.1", "2"] as const) {
    // gRPC is HTTP/2 only; a bidirectional stream needs HTTP/2 (connect-node's HTTP/1.1 transports
    // send a request body whole).
    if (protocol === "grpc" && httpVersion === "1.1") continue;
    for (const shape of ["unary", "server stream", "bidi stream"] as const) {
      if (shape === "bidi stream" && httpVersion === "1.1") continue;
      cases.push({ protocol, httpVersion, shape });
    }
  }
}

function transportFor(protocol: "grpc" | "grpc-web" | "connect", httpVersion: "1.1" | "2", baseUrl: string): Transport {
  if (protocol === "grpc") return createGrpcTransport({ baseUrl });
  if (protocol === "grpc-web") return createGrpcWebTransport({ baseUrl, httpVersion });
  return createConnectTransport({ baseUrl, httpVersion });
}

async function call(transport: Transport, shape: Shape, megabytes: number): Promise<ConnectError | undefined> {
  const client = createClient(ContextService, transport);
  try {
    if (shape === "unary") {
      await client.compile(request(megabytes));
    } else if (shape === "server stream") {
      for await (const _ of client.compileStream({ request: request(megabytes) }));
    } else {
      async function* messages() {
        yield { kind: { case: "compile" as const, value: request(megabytes) } };
      }
      for await (const _ of client.compileSession(messages()));
    }
    return undefined;
  } catch (thrown) {
    return ConnectError.from(thrown);
  }
}

describe("a request message over --max-request-bytes", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await startSidecar(["--max-request-bytes", String(limit)]);
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  it.each(cases)("is RESOURCE_EXHAUSTED naming the flag and the size: $protocol, HTTP/$httpVersion, $shape", async ({ protocol, httpVersion, shape }) => {
    const transport = transportFor(protocol, httpVersion, sidecar.url);
    const error = await call(transport, shape, 12);
    expect({ code: error === undefined ? "answered" : Code[error.code], message: error?.rawMessage }).toEqual({
      code: "ResourceExhausted",
      message: expect.stringMatching(refusal),
    });
    // The size is the message's own: the text and a few bytes of framing around it.
    const bytes = Number(refusal.exec(error!.rawMessage)![1]);
    expect(bytes).toBeGreaterThan(12 * 1024 * 1024);
    expect(bytes).toBeLessThan(12 * 1024 * 1024 + 64);
    expect(error!.findDetails(ErrorInfoSchema).map((info) => ({ reason: info.reason, metadata: info.metadata }))).toEqual([
      { reason: "REQUEST_TOO_LARGE", metadata: { limit_bytes: String(limit), flag: "--max-request-bytes" } },
    ]);
    // The same transport (its connection) serves on, and a message within the limit is compiled.
    expect((await createClient(Health, transport).check({})).status).toBe(1);
    expect(await call(transport, shape, 0)).toBeUndefined();
  }, 60_000);
});

describe("a Connect unary request announcing its size over the limit", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await startSidecar(["--max-request-bytes", String(limit)]);
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("is answered once its 12 MiB body has arrived, over HTTP/2, with the size it announced", async () => {
    const body = new Uint8Array(12 * 1024 * 1024);
    const answer = await rawHttp2(sidecar.url, "/contextd.v1.ContextService/Compile", { "content-type": "application/proto", "content-length": String(body.length) }, body);
    expect({ status: answer.status, error: JSON.parse(answer.body.toString()) as { code: string; message: string } }).toEqual({
      status: 429,
      error: expect.objectContaining({ code: "resource_exhausted", message: `request message of ${body.length} bytes is over the limit of 1048576 bytes (--max-request-bytes)` }),
    });
  }, 60_000);
});

describe("EnvelopeSizes", () => {
  // Envelopes of 10, 0 and 1,000 bytes within a limit of 1,000, then one of 1,001.
  const envelope = (length: number) => {
    const bytes = new Uint8Array(5 + Math.min(length, 1_000));
    new DataView(bytes.buffer).setUint32(1, length);
    return bytes;
  };
  const body = Buffer.concat([envelope(10), envelope(0), envelope(1_000), envelope(1_001)]);
  // The oversized message's header ends here: the chunk holding its last byte is where it shows.
  const headerEnd = 15 + 5 + 1_005 + 5;

  it("finds the first message over the limit at whatever chunk boundaries the body arrives", () => {
    for (const step of [1, 2, 3, 4, 5, 6, 7, 999, 1_024, body.length]) {
      const sizes = new EnvelopeSizes(1_000);
      let shownAt: number | undefined;
      for (let at = 0; at < body.length && shownAt === undefined; at += step) {
        if (sizes.over(body.subarray(at, at + step))) shownAt = at;
      }
      const expectedAt = Math.floor((headerEnd - 1) / step) * step;
      expect({ step, shownAt, size: sizes.size() }).toEqual({ step, shownAt: expectedAt, size: 1_001 });
    }
  });
});
