import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { stringLimits } from "../../../src/core/model/string-limits.js";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";

const tokenA = "tenant-a-token-0123456789";
const tokenB = "tenant-b-token-0123456789";

function bearer(token: string): grpc.Metadata {
  const metadata = new grpc.Metadata();
  metadata.set("authorization", `Bearer ${token}`);
  return metadata;
}

// Issue 29 #5: the in-memory store's idempotency records (32 MiB) were one pool for every tenant,
// so tenant a's keyed commits pushed tenant b's record out and b's retry of an applied commit was
// applied again ("charge the card once" stored twice). Records are now forgotten from the tenant
// using the largest share (src/store/idempotency-records.ts). On a 512 MB heap.
describe("idempotency records per tenant (memory store, real sidecar, 512 MB heap)", () => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  beforeAll(async () => {
    sidecar = await startSidecar([], { CONTEXTD_AUTH_TOKENS: `${tokenA}=a,${tokenB}=b`, NODE_OPTIONS: "--max-old-space-size=512" });
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
  });

  it("replays tenant b's retry exactly once after tenant a wrote past the store's bound", async () => {
    const charge = { conversationId: "b/orders", idempotencyKey: "b-charge-1", deltas: [appendHistory(textMessage("u1", Role.USER, "charge the card once"))] };
    expect(await client.unary(ConversationService.method.commit, charge, bearer(tokenB))).toMatchObject({ version: 1n, replayed: false });

    // Records of ~4.3 KB as counted (ids and keys at their limit): 8,000 are past the 32 MiB bound.
    const conversation = (index: number) => `a/${index % 64}-${"c".repeat(stringLimits.id - 8)}`;
    const key = (index: number) => `${index}-${"k".repeat(stringLimits.idempotencyKey - 8)}`;
    const total = 8_000;
    let next = 0;
    const writer = async () => {
      while (next < total) {
        const index = next++;
        await client.unary(
          ConversationService.method.commit,
          { conversationId: conversation(index), idempotencyKey: key(index), deltas: [appendHistory(textMessage("", Role.USER, "x"))] },
          bearer(tokenA),
        );
      }
    };
    await Promise.all(Array.from({ length: 16 }, writer));
    expect((await client.unary(Health.method.check, { service: "" })).status).toBe(ServingStatus.SERVING);

    const retry = await client.unary(ConversationService.method.commit, charge, bearer(tokenB));
    expect(retry).toMatchObject({ version: 1n, replayed: true });
    const state = (await client.unary(ConversationService.method.getState, { conversationId: "b/orders" }, bearer(tokenB))).state!;
    expect(state.history.map((message) => message.id)).toEqual(["u1"]);
    // Tenant a lost its own oldest record: its retry is applied again (as after the TTL).
    const first = await client.unary(
      ConversationService.method.commit,
      { conversationId: conversation(0), idempotencyKey: key(0), deltas: [appendHistory(textMessage("", Role.USER, "x"))] },
      bearer(tokenA),
    );
    expect(first.replayed).toBe(false);
    const newest = await client.unary(
      ConversationService.method.commit,
      { conversationId: conversation(total - 1), idempotencyKey: key(total - 1), deltas: [appendHistory(textMessage("", Role.USER, "x"))] },
      bearer(tokenA),
    );
    expect(newest.replayed).toBe(true);
  });
});
