import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConversationOrder, ConversationService, type WatchResponse } from "#gen/contextd/v1/conversation_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { conversationService } from "../../../src/server/services/conversation-service.js";
import { MemoryConversationStore } from "../../../src/store/memory-conversation-store.js";
import { commitThroughOutage } from "../../support/commits-through-outage.js";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startRedis, type RedisProcess } from "../../support/redis.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";

type GrpcClient = ReturnType<typeof grpcJsClient>;

async function grpcError(promise: Promise<unknown>): Promise<grpc.ServiceError> {
  const error = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error, "expected the RPC to fail").toBeDefined();
  return error as grpc.ServiceError;
}

/** Appends one user message, comparing and retrying on ABORTED like a real agent; returns the acknowledged version. */
async function appendWithRetry(client: GrpcClient, conversationId: string, messageId: string): Promise<bigint> {
  let expected = (await client.unary(ConversationService.method.getState, { conversationId })).state!.version;
  for (;;) {
    try {
      const response = await client.unary(ConversationService.method.commit, {
        conversationId,
        expectedVersion: expected,
        deltas: [appendHistory(textMessage(messageId, Role.USER, messageId))],
        idempotencyKey: messageId,
      });
      return response.version;
    } catch (error) {
      const serviceError = error as grpc.ServiceError;
      if (serviceError.code !== grpc.status.ABORTED) throw error;
      expected = BigInt(String(serviceError.metadata.get("contextd-current-version")[0]));
    }
  }
}

describe.each([
  ["memory", false],
  ["redis", true],
])("ConversationService over grpc-js against a real sidecar (%s store)", (_name, useRedis) => {
  let redis: RedisProcess | undefined;
  let sidecar: Sidecar;
  let client: GrpcClient;
  beforeAll(async () => {
    if (useRedis) redis = await startRedis();
    sidecar = await startSidecar(redis ? ["--redis-url", redis.url] : []);
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
    await redis?.stop();
  });

  it("rejects an empty batch and a missing conversation id with INVALID_ARGUMENT", async () => {
    const empty = await grpcError(client.unary(ConversationService.method.commit, { conversationId: "c-empty", deltas: [] }));
    expect(empty.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(empty.details).toContain("deltas");
    const noId = await grpcError(client.unary(ConversationService.method.getState, { conversationId: "" }));
    expect(noId.code).toBe(grpc.status.INVALID_ARGUMENT);
  });

  it("commits, reads back, and answers a stale commit with ABORTED carrying the current version in message and trailer", async () => {
    const conversationId = `c-stale-${useRedis}`;
    const first = await client.unary(ConversationService.method.commit, { conversationId, expectedVersion: 0n, deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] });
    expect(first.version).toBe(1n);
    // The version only, unless the state is asked for.
    expect(first.state).toBeUndefined();
    const withState = await client.unary(ConversationService.method.commit, { conversationId: `with-state-${useRedis}`, deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))], includeState: true });
    expect(withState.state!.history[0]!.id).toBe("u1");

    const stale = await grpcError(client.unary(ConversationService.method.commit, { conversationId, expectedVersion: 0n, deltas: [appendHistory(textMessage("u2", Role.USER, "late"))] }));
    expect(stale.code).toBe(grpc.status.ABORTED);
    expect(stale.details).toContain("current version is 1");
    expect(stale.metadata.get("contextd-current-version")).toEqual(["1"]);
    const state = (await client.unary(ConversationService.method.getState, { conversationId })).state!;
    expect(state.version).toBe(1n);
    expect(state.history.map((message) => message.id)).toEqual(["u1"]);
    const retry = await client.unary(ConversationService.method.clear, { conversationId, expectedVersion: 1n });
    expect(retry.version).toBe(2n);
    const listed = await client.unary(ConversationService.method.listConversations, { prefix: conversationId });
    expect(listed.conversations.map((summary) => [summary.conversationId, summary.version])).toEqual([[conversationId, 2n]]);
  });

  it("lists by newest update with title, labels and times, filtered by label; bad filters are INVALID_ARGUMENT naming the limit", async () => {
    const prefix = `c-listed-${useRedis}/`;
    const before = BigInt(Date.now());
    const setMetadata = (title: string, labels: Record<string, string>) => ({ operation: { case: "setMetadata" as const, value: { title, labels } } });
    await client.unary(ConversationService.method.commit, { conversationId: prefix + "old", deltas: [setMetadata("Old", { kind: "chat" })] });
    await client.unary(ConversationService.method.commit, { conversationId: prefix + "other", deltas: [setMetadata("Other", { kind: "batch" })] });
    await client.unary(ConversationService.method.commit, { conversationId: prefix + "new", deltas: [setMetadata("New", { kind: "chat" })] });
    // A second commit makes "old" the newest.
    await client.unary(ConversationService.method.commit, { conversationId: prefix + "old", deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] });
    const listed = await client.unary(ConversationService.method.listConversations, { prefix, labels: { kind: "chat" }, order: ConversationOrder.UPDATED_DESC, updatedSinceUnixMs: before });
    expect(listed.conversations.map((summary) => [summary.conversationId.slice(prefix.length), summary.title, summary.version])).toEqual([
      ["old", "Old", 2n],
      ["new", "New", 1n],
    ]);
    const [old] = listed.conversations;
    expect(old!.labels).toEqual({ kind: "chat" });
    expect(old!.updatedAtUnixMs).toBeGreaterThanOrEqual(old!.createdAtUnixMs);
    expect(old!.createdAtUnixMs).toBeGreaterThanOrEqual(before);
    expect(listed.nextPageToken).toBe("");
    const tooLong = await grpcError(client.unary(ConversationService.method.listConversations, { labels: { ["k".repeat(65)]: "v" } }));
    expect(tooLong.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(tooLong.details).toMatch(/^labels\["k+"\] key is 65 UTF-8 bytes, more than the limit of 64/);
    const negative = await grpcError(client.unary(ConversationService.method.listConversations, { updatedSinceUnixMs: -1n }));
    expect(negative.details).toMatch(/^updated_since_unix_ms: must not be negative/);
    const byId = await client.unary(ConversationService.method.listConversations, { prefix, pageSize: 1 });
    const mixed = await grpcError(client.unary(ConversationService.method.listConversations, { prefix, pageToken: byId.nextPageToken, order: ConversationOrder.UPDATED_DESC }));
    expect(mixed.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(mixed.details).toMatch(/token of the id order/);
  });

  it("streams committed batches over Watch in version order and resumes from a version", async () => {
    const conversationId = `c-watch-${useRedis}`;
    await client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage("w1", Role.USER, "1"))] });
    const received: bigint[] = [];
    const stream = client.serverStream(ConversationService.method.watch, { conversationId, fromVersion: 0n });
    const three = new Promise<void>((resolve, reject) => {
      stream.on("data", (response: WatchResponse) => {
        if (response.kind.case === "change") received.push(response.kind.value.version);
        if (received.length === 3) resolve();
      });
      stream.on("error", (error: grpc.ServiceError) => (error.code === grpc.status.CANCELLED ? undefined : reject(error)));
    });
    await client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage("w2", Role.USER, "2"))] });
    await client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage("w3", Role.USER, "3"))] });
    await three;
    stream.cancel();
    expect(received).toEqual([1n, 2n, 3n]);

    const resumed = client.serverStream(ConversationService.method.watch, { conversationId, fromVersion: 2n });
    const first = await new Promise<WatchResponse>((resolve, reject) => {
      resumed.once("data", resolve);
      resumed.once("error", reject);
    });
    resumed.cancel();
    expect(first.kind.case === "change" && first.kind.value.version).toBe(3n);
  });
});

describe("two sidecars on one Redis", () => {
  let redis: RedisProcess;
  let sidecars: Sidecar[] = [];
  beforeAll(async () => {
    redis = await startRedis();
    sidecars = await Promise.all([startSidecar(["--redis-url", redis.url]), startSidecar(["--redis-url", redis.url])]);
  });
  afterAll(async () => {
    await Promise.all(sidecars.map((sidecar) => sidecar.stop()));
    await redis?.stop();
  });

  it("keeps every acknowledged commit of interleaved writers on both sidecars", async () => {
    const conversationId = "shared";
    const clients = sidecars.map((sidecar) => grpcJsClient(`127.0.0.1:${sidecar.port}`));
    try {
      const writers = Array.from({ length: 8 }, async (_, writer) => {
        const client = clients[writer % 2]!;
        const acknowledged: string[] = [];
        for (let turn = 0; turn < 10; turn++) {
          const messageId = `w${writer}-t${turn}`;
          await appendWithRetry(client, conversationId, messageId);
          acknowledged.push(messageId);
        }
        return acknowledged;
      });
      const acknowledged = (await Promise.all(writers)).flat();
      for (const client of clients) {
        const state = (await client.unary(ConversationService.method.getState, { conversationId })).state!;
        expect(state.version).toBe(80n);
        expect(state.history.map((message) => message.id).sort()).toEqual([...acknowledged].sort());
      }
    } finally {
      for (const client of clients) client.close();
    }
  });
});

describe("Redis outage", () => {
  let redis: RedisProcess;
  let sidecar: Sidecar;
  beforeAll(async () => {
    redis = await startRedis({ appendOnly: true });
    sidecar = await startSidecar(["--redis-url", redis.url]);
  });
  afterAll(async () => {
    await sidecar?.stop();
    await redis?.stop();
  });

  it("answers UNAVAILABLE while Redis is down and recovers without a restart, losing no acknowledged commit", async () => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    const conversationId = "outage";
    try {
      for (let turn = 0; turn < 5; turn++) await appendWithRetry(client, conversationId, `before-${turn}`);
      await redis.stop();
      const down = await grpcError(client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage("during", Role.USER, "x"))] }));
      expect(down.code).toBe(grpc.status.UNAVAILABLE);
      expect(down.details).toContain("redis store unavailable");
      expect((await grpcError(client.unary(ConversationService.method.getState, { conversationId }))).code).toBe(grpc.status.UNAVAILABLE);

      await redis.restart();
      let state;
      for (let attempt = 0; attempt < 100 && !state; attempt++) {
        state = await client.unary(ConversationService.method.getState, { conversationId }).then(
          (response) => response.state,
          () => new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 50)),
        );
      }
      expect(state, "the sidecar reconnected to Redis by itself").toBeDefined();
      expect(state!.history.map((message) => message.id)).toEqual(["before-0", "before-1", "before-2", "before-3", "before-4"]);
      expect(await appendWithRetry(client, conversationId, "after")).toBe(6n);
    } finally {
      client.close();
    }
  });

  it.each([
    ["stops", "stop"],
    ["is killed", "kill"],
  ] as const)("keeps every acknowledged commit, once, when Redis %s and returns while writers are committing", async (_how, end) => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    const conversationId = `outage-under-load-${end}`;
    try {
      const { acknowledged, unavailable, state } = await commitThroughOutage(client, conversationId, () => redis[end](), () => redis.restart());
      expect(unavailable, "the outage hit commits in flight").toBeGreaterThan(0);
      expect(state.version).toBe(90n);
      expect(state.history.map((message) => message.id).sort()).toEqual([...acknowledged].sort());
    } finally {
      client.close();
    }
  });
});

describe("Watch heartbeats and shutdown", () => {
  it("sends heartbeats with the current version while idle and ends with UNAVAILABLE on shutdown", async () => {
    const store = new MemoryConversationStore();
    const shutdown = new AbortController();
    const transport = createRouterTransport(({ service }) => service(ConversationService, conversationService({ store, shutdown: shutdown.signal, watchHeartbeatMs: 20 })));
    const client = createClient(ConversationService, transport);
    await client.commit({ conversationId: "hb", deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] });
    const kinds: string[] = [];
    let failure: unknown;
    try {
      for await (const response of client.watch({ conversationId: "hb", fromVersion: 0n })) {
        kinds.push(response.kind.case === "heartbeat" ? `heartbeat@${response.kind.value.version}` : `change@${response.kind.value!.version}`);
        if (kinds.length === 3) shutdown.abort();
      }
    } catch (error) {
      failure = error;
    }
    expect(kinds).toEqual(["change@1", "heartbeat@1", "heartbeat@1"]);
    expect(failure).toBeInstanceOf(ConnectError);
    expect((failure as ConnectError).code).toBe(Code.Unavailable);
  });

  it("ends an open Watch with UNAVAILABLE when the sidecar process gets SIGTERM", async () => {
    const sidecar = await startSidecar();
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    try {
      await client.unary(ConversationService.method.commit, { conversationId: "bye", deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] });
      const stream = client.serverStream(ConversationService.method.watch, { conversationId: "bye" });
      const ended = new Promise<grpc.ServiceError>((resolve) => stream.on("error", resolve));
      await new Promise<void>((resolve) => stream.once("data", () => resolve()));
      const exit = sidecar.stop();
      const error = await ended;
      expect(error.code).toBe(grpc.status.UNAVAILABLE);
      // The server's own status, not a dropped connection (which grpc-js also reports as UNAVAILABLE).
      expect(error.details).toContain("shutting down");
      expect(await exit).toBe(0);
    } finally {
      client.close();
    }
  });
});
