import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { sidecarStores, startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";

// Issue 29 #8: every ReadToolResult compacted the stored JSON and encoded the whole text again,
// on the event loop: a 16-byte read of a 12 MB result took 190-234 ms, 8 readers at once held
// health 1.1-1.4 s. The text is now encoded once and sliced (application/tool-result-texts.ts).
// Here: 8 readers paging a 12 MB pretty-printed result while health is asked; every health check
// is answered SERVING and every slice is the compact JSON's, on every store. Latencies: bench/hardening-door.ts.
describe.each(sidecarStores)("ReadToolResult of a 12 MB result under concurrent readers (%s, real sidecar, 512 MB heap)", (_name, startStore) => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  let stopStore: (() => Promise<void>) | undefined;
  const rows = Array.from({ length: 135_000 }, (_, index) => ({ id: index, name: `row ${index}`, tags: ["a", "é"] }));
  const pretty = JSON.stringify(rows, null, 2);
  const compact = Buffer.from(JSON.stringify(rows), "utf8");
  beforeAll(async () => {
    const store = await startStore();
    stopStore = store.stop;
    sidecar = await startSidecar(store.args, { NODE_OPTIONS: "--max-old-space-size=512" });
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`, undefined);
    expect(Buffer.byteLength(pretty)).toBeGreaterThan(12_000_000);
    await client.unary(ConversationService.method.commit, {
      conversationId: "reads/big",
      deltas: [
        appendHistory(
          textMessage("u0", Role.USER, "dump the table"),
          create(MessageSchema, { id: "a0", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "call-1", name: "dump", arguments: { data: "{}" } } } }] }),
          create(MessageSchema, { id: "t0", role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: "call-1", name: "dump", payload: { data: pretty } } } }] }),
        ),
      ],
    }, undefined, { deadline: Date.now() + 60_000 });
  }, 90_000);
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
    await stopStore?.();
  });

  it("serves 8 readers' 16-byte slices and answers every health check meanwhile", async () => {
    let reading = true;
    const health: ServingStatus[] = [];
    const checks = (async () => {
      while (reading) {
        health.push((await client.unary(Health.method.check, { service: "" })).status);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    const reader = async (start: number) => {
      for (let index = 0; index < 25; index++) {
        const offset = start + index * 480_000;
        const slice = await client.unary(ConversationService.method.readToolResult, { conversationId: "reads/big", toolCallId: "call-1", offset: BigInt(offset), maxBytes: 16 });
        expect(slice.totalBytes).toBe(BigInt(compact.length));
        expect(Buffer.from(slice.text, "utf8").equals(compact.subarray(Number(slice.offset), Number(slice.nextOffset)))).toBe(true);
      }
    };
    await Promise.all(Array.from({ length: 8 }, (_, index) => reader(index * 7)));
    reading = false;
    await checks;
    expect(health.length).toBeGreaterThan(0);
    expect(health.every((status) => status === ServingStatus.SERVING)).toBe(true);
    expect(sidecar.process.exitCode).toBeNull();
  });
});
