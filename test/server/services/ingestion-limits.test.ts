import * as grpc from "@grpc/grpc-js";
import { create, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CommitRequestSchema, ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { maxRepeatedElements } from "../../../src/core/model/decode-limits.js";
import { maxStreamEvents } from "../../../src/core/providers/stream-events.js";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, delta, textMessage } from "../../store/fixtures.js";

// Issue 29 #9: the 100,000-event limit of stream ingestion was per delta and checked after the
// whole request was decoded: 9 deltas × 100,000 chunks held health 1.06-1.49 s, and decoding 5M
// tiny repeated strings held the loop 1.6 s on any RPC. Now the events of a commit count together,
// and the binary decoder counts events and repeated elements while it reads. On a 512 MB heap,
// every refusal is RESOURCE_EXHAUSTED and health is answered meanwhile (latencies:
// bench/hardening-door.ts).
describe("stream ingestion and repeated-field limits per request (real sidecar, 512 MB heap)", () => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  beforeAll(async () => {
    sidecar = await startSidecar([], { NODE_OPTIONS: "--max-old-space-size=512" });
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
  });

  const event = new TextEncoder().encode('{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}');
  const streamDeltas = (deltas: number, events: number) =>
    Array.from({ length: deltas }, () => delta({ case: "appendProviderStream", value: { provider: Provider.OPENAI_CHAT, events: Array.from({ length: events }, () => event), interrupted: true } }));

  const health = async () => (await client.unary(Health.method.check, { service: "" })).status;

  it("counts the events of all a commit's streams together, while decoding on the binary path", async () => {
    const conversationId = "ingest/9x";
    await client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage("u1", Role.USER, "go"))] });
    // 9 deltas of 12,000 events: each under the limit, 108,000 together over it.
    const request = { conversationId, deltas: streamDeltas(9, 12_000) };
    const checks = Promise.all(Array.from({ length: 5 }, () => health()));
    await expect(client.unary(ConversationService.method.commit, request)).rejects.toMatchObject({
      code: grpc.status.RESOURCE_EXHAUSTED,
      details: `deltas: the append_provider_stream deltas carry ${maxStreamEvents + 1} events, more than the limit of ${maxStreamEvents} per commit`,
    });
    expect((await checks).every((status) => status === ServingStatus.SERVING)).toBe(true);
    // JSON is decoded by connect, then counted before any event is merged: the total is named.
    const json = await fetch(`${sidecar.url}/contextd.v1.ConversationService/Commit`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        conversationId,
        deltas: Array.from({ length: 9 }, () => ({ appendProviderStream: { provider: "PROVIDER_OPENAI_CHAT", events: Array.from({ length: 12_000 }, () => Buffer.from(event).toString("base64")), interrupted: true } })),
      }),
    });
    expect(json.status).toBe(429);
    expect(((await json.json()) as { message: string }).message).toBe(`deltas: the append_provider_stream deltas carry 108000 events, more than the limit of ${maxStreamEvents} per commit`);
    // Nothing was applied; a commit within the limit is.
    expect((await client.unary(ConversationService.method.getState, { conversationId })).state!.version).toBe(1n);
    expect((await client.unary(ConversationService.method.commit, { conversationId, deltas: streamDeltas(2, 1_000) })).version).toBe(2n);
  });

  it("refuses a request of millions of tiny repeated strings while decoding it, and stays up", async () => {
    const ids = Array.from({ length: 5_000_000 }, () => "a");
    const bytes = toBinary(CommitRequestSchema, create(CommitRequestSchema, { conversationId: "ingest/tiny", deltas: [{ operation: { case: "removeMessages", value: { ids } } }] }));
    expect(bytes.length).toBeLessThan(16 * 1024 * 1024);
    const checks = Promise.all(Array.from({ length: 5 }, () => health()));
    await expect(client.unary(ConversationService.method.commit, { conversationId: "ingest/tiny", deltas: [{ operation: { case: "removeMessages", value: { ids } } }] })).rejects.toMatchObject({
      code: grpc.status.RESOURCE_EXHAUSTED,
      details: `the request holds more than ${maxRepeatedElements} elements of repeated fields, the most one request may hold`,
    });
    expect((await checks).every((status) => status === ServingStatus.SERVING)).toBe(true);
    expect(await health()).toBe(ServingStatus.SERVING);
    expect(sidecar.process.exitCode).toBeNull();
  });
});
