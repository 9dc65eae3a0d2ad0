import { create } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TransformationReason } from "#gen/contextd/v1/compile_pb";
import { ObserverEventSchema, type ObserverEvent } from "#gen/contextd/v1/telemetry_pb";
import { TelemetryService, type WatchEventsResponse } from "#gen/contextd/v1/telemetry_service_pb";
import { startServer, type RunningServer } from "../../../src/server/server.js";
import { TelemetryHub } from "../../../src/application/telemetry-hub.js";
import { createLogger } from "../../../src/server/operations/logger.js";
import { MemoryConversationStore } from "../../../src/store/memory-conversation-store.js";
import { grpcJsClient } from "../../support/grpc-js.js";

function compiled(conversationId: string, totalCost: bigint): ObserverEvent {
  return create(ObserverEventSchema, {
    conversationId,
    compileId: "c1",
    event: { case: "pipelineCompiled", value: { totalCost, durationNs: 1000n } },
  });
}

describe("telemetry hub", () => {
  it("fans out to every subscriber, filtered by conversation", async () => {
    const hub = new TelemetryHub(10);
    const controller = new AbortController();
    const all = hub.subscribe({ conversationId: "", conversationPrefix: "" }, controller.signal);
    const onlyB = hub.subscribe({ conversationId: "b", conversationPrefix: "" }, controller.signal);
    const firstAll = all.next();
    const firstB = onlyB.next();
    await expect.poll(() => hub.subscriberCount).toBe(2);
    hub.publish(compiled("a", 1n));
    hub.publish(compiled("b", 2n));
    expect((await firstAll).value?.event.conversationId).toBe("a");
    expect((await all.next()).value?.event.conversationId).toBe("b");
    expect((await firstB).value?.event.conversationId).toBe("b");
    controller.abort();
    expect((await all.next()).done).toBe(true);
    await onlyB.return(undefined);
    expect(hub.subscriberCount).toBe(0);
  });

  it("a slow subscriber loses the newest events and is told how many; others get everything", async () => {
    const hub = new TelemetryHub(3);
    const controller = new AbortController();
    const slow = hub.subscribe({ conversationId: "", conversationPrefix: "" }, controller.signal);
    const fast = hub.subscribe({ conversationId: "", conversationPrefix: "" }, controller.signal);
    const fastSeen: bigint[] = [];
    const fastReader = (async () => {
      for await (const { event } of fast) {
        if (event.event.case === "pipelineCompiled") fastSeen.push(event.event.value.totalCost);
        if (fastSeen.length === 10) return;
      }
    })();
    const slowFirst = slow.next();
    await expect.poll(() => hub.subscriberCount).toBe(2);
    for (let i = 1n; i <= 10n; i++) {
      hub.publish(compiled("a", i));
      // Let the fast reader keep up while the slow one reads nothing.
      await new Promise((resolve) => setImmediate(resolve));
    }
    await fastReader;
    expect(fastSeen).toEqual([1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n, 10n]);
    // The slow subscriber took event 1 into its pending read, queued 2..4, and dropped 5..10.
    const received: { cost: bigint; dropped: bigint }[] = [];
    const first = (await slowFirst).value!;
    received.push({ cost: (first.event.event.value as { totalCost: bigint }).totalCost, dropped: first.dropped });
    for (let i = 0; i < 3; i++) {
      const next = (await slow.next()).value!;
      received.push({ cost: (next.event.event.value as { totalCost: bigint }).totalCost, dropped: next.dropped });
    }
    hub.publish(compiled("a", 11n));
    const after = (await slow.next()).value!;
    received.push({ cost: (after.event.event.value as { totalCost: bigint }).totalCost, dropped: after.dropped });
    expect(received).toEqual([
      { cost: 1n, dropped: 0n },
      { cost: 2n, dropped: 0n },
      { cost: 3n, dropped: 0n },
      { cost: 4n, dropped: 0n },
      { cost: 11n, dropped: 6n },
    ]);
    controller.abort();
  });
});

describe("TelemetryService.WatchEvents over gRPC", () => {
  let server: RunningServer;
  let client: ReturnType<typeof grpcJsClient>;
  beforeAll(async () => {
    server = await startServer({ host: "127.0.0.1", port: 0, store: new MemoryConversationStore(), logger: createLogger("error", () => undefined) });
    client = grpcJsClient(`127.0.0.1:${server.address.port}`);
  });
  afterAll(async () => {
    client?.close();
    await server?.shutdown(1000);
  });

  it("streams the published events of one conversation and counts tokens and dropped messages in metrics", async () => {
    const stream = client.serverStream(TelemetryService.method.watchEvents, { conversationId: "t/one" });
    const received: WatchEventsResponse[] = [];
    stream.on("data", (message: WatchEventsResponse) => received.push(message));
    const ended = new Promise<grpc.ServiceError>((resolve) => stream.on("error", resolve));
    await expect.poll(() => server.telemetry.subscriberCount).toBe(1);
    server.telemetry.publish(compiled("t/other", 5n));
    server.telemetry.publish(compiled("t/one", 42n));
    server.telemetry.publish(
      create(ObserverEventSchema, { conversationId: "t/one", event: { case: "messageDropped", value: { messageId: "m1", reason: TransformationReason.TOKEN_BUDGET_EXCEEDED } } }),
    );
    await expect.poll(() => received.length).toBe(2);
    expect(received.map((message) => message.event?.event.case)).toEqual(["pipelineCompiled", "messageDropped"]);
    expect(received[0]!.event?.conversationId).toBe("t/one");
    const metrics = await (await fetch(`http://127.0.0.1:${server.address.port}/metrics`)).text();
    expect(metrics).toContain("contextd_compile_tokens_total 47\n");
    expect(metrics).toContain('contextd_messages_dropped_total{reason="token_budget_exceeded"} 1\n');
    stream.cancel();
    expect((await ended).code).toBe(grpc.status.CANCELLED);
    await expect.poll(() => server.telemetry.subscriberCount).toBe(0);
  });
});
