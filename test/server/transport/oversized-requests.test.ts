import { createClient, ConnectError } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { ServiceError } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { Health } from "#gen/grpc/health/v1/health_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

// Issue 29, "also seen": 17-40 MB gRPC requests got INTERNAL "Stream closed with error code
// NGHTTP2_ENHANCE_YOUR_CALM" at the client instead of the documented RESOURCE_EXHAUSTED. The server
// refused on the envelope's length and answered at once; a node client still holding more than its
// session memory (10 MB) of unsent body cannot take response headers, and reset the stream. Now an
// oversized body (up to 4x --max-request-bytes, at least 64 MiB) is read to its end and discarded
// before the refusal is sent (transport/grpc-unary.ts).

const compileOf = (megabytes: number) => ({
  history: { messages: [{ id: "u", role: Role.USER, parts: [{ kind: { case: "text" as const, value: { text: "x".repeat(megabytes * 1024 * 1024) } } }] }] },
});

describe("oversized gRPC requests", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await startSidecar();
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("are RESOURCE_EXHAUSTED naming --max-request-bytes for connect-node's gRPC transport (node's HTTP/2 client, 10 MB session memory)", async () => {
    for (const megabytes of [17, 20, 30, 40]) {
      const client = createClient(ContextService, createGrpcTransport({ baseUrl: sidecar.url }));
      const error = await client.compile(compileOf(megabytes)).then(() => undefined, (thrown: unknown) => ConnectError.from(thrown));
      expect({ megabytes, code: error?.code, message: error?.rawMessage }).toEqual({
        megabytes,
        code: 8,
        message: expect.stringMatching(/^request message of \d+ bytes is over the limit of 16777216 bytes \(--max-request-bytes\)$/),
      });
    }
  }, 120_000);

  it("are RESOURCE_EXHAUSTED for grpc-js, and the connection serves on", async () => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    try {
      for (const megabytes of [17, 40]) {
        const error = (await client.unary(ContextService.method.compile, compileOf(megabytes)).then(() => undefined, (thrown: ServiceError) => thrown))!;
        expect({ code: error.code, details: error.details }).toEqual({ code: 8, details: expect.stringContaining("--max-request-bytes") });
      }
      expect((await client.unary(Health.method.check, {})).status).toBe(1);
    } finally {
      client.close();
    }
  }, 120_000);
});
