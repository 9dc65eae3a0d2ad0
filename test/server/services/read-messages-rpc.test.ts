import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { fromBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConversationService, type ReadMessagesResponse } from "#gen/contextd/v1/conversation_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { ErrorInfoSchema } from "#gen/google/rpc/error_details_pb";
import { StatusSchema } from "#gen/google/rpc/status_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startPostgres, type PostgresProcess } from "../../support/postgres.js";
import { startRedis, type RedisProcess } from "../../support/redis.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";

const messageLimit = 1024 * 1024;

async function serviceError(promise: Promise<unknown>): Promise<grpc.ServiceError> {
  const error = await promise.then(() => undefined, (reason: unknown) => reason);
  expect(error, "expected the RPC to fail").toBeDefined();
  return error as grpc.ServiceError;
}

// A sidecar with a 1 MiB message limit stands for the default 16 MiB one at a sixteenth of the cost.
describe.each([
  ["memory", "memory"],
  ["redis", "redis"],
  ["postgres", "postgres"],
] as const)("ReadMessages and a GetState over the message limit, against a real sidecar (%s store)", (_name, storeKind) => {
  let redis: RedisProcess | undefined;
  let postgres: PostgresProcess | undefined;
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  const conversationId = `big-${storeKind}`;
  beforeAll(async () => {
    if (storeKind === "redis") redis = await startRedis();
    if (storeKind === "postgres") postgres = await startPostgres();
    const storeArgs = redis ? ["--redis-url", redis.url] : postgres ? ["--postgres-url", postgres.url] : [];
    sidecar = await startSidecar(["--max-request-bytes", String(messageLimit), ...storeArgs]);
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    // Six commits of 300 KB each: every request fits the limit, the state (1.8 MB) does not.
    for (let index = 0; index < 6; index++) {
      await client.unary(ConversationService.method.commit, {
        conversationId,
        deltas: [appendHistory(textMessage(`m${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, String(index).repeat(300_000)))],
      });
    }
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
    await redis?.stop();
    await postgres?.stop();
  });

  it("refuses GetState with RESOURCE_EXHAUSTED STATE_TOO_LARGE naming ReadMessages, instead of a response no client can receive", async () => {
    const error = await serviceError(client.unary(ConversationService.method.getState, { conversationId }));
    expect(error.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(error.details).toBe(
      `conversation "${conversationId}" (version 6, 6 messages) is larger than the message limit of ${messageLimit} bytes (--max-request-bytes): read its messages in pages with ConversationService.ReadMessages`,
    );
    const status = fromBinary(StatusSchema, error.metadata.get("grpc-status-details-bin")[0] as Buffer);
    expect(status.code).toBe(Code.ResourceExhausted);
    const info = status.details.map((any) => anyUnpack(any, ErrorInfoSchema)).find((detail) => detail !== undefined);
    expect(info).toMatchObject({ reason: "STATE_TOO_LARGE", metadata: { limit_bytes: String(messageLimit), flag: "--max-request-bytes" } });
    // Without its messages it reads: the version and the rest of the state.
    const rest = await client.unary(ConversationService.method.getState, { conversationId, withoutMessages: true });
    expect([rest.state!.version, rest.state!.history.length, rest.state!.conversationId]).toEqual([6n, 0, conversationId]);
    // A conversation under the limit still reads whole.
    await client.unary(ConversationService.method.commit, { conversationId: `small-${storeKind}`, deltas: [appendHistory(textMessage("u", Role.USER, "hi"))] });
    expect((await client.unary(ConversationService.method.getState, { conversationId: `small-${storeKind}` })).state!.history).toHaveLength(1);
  });

  it("reads the same conversation whole in pages under the limit, and its last message alone", async () => {
    const pages: ReadMessagesResponse[] = [];
    let pageToken = "";
    do {
      const page = await client.unary(ConversationService.method.readMessages, { conversationId, pageToken });
      pages.push(page);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    // The default 4 MiB page is capped at 15/16 of the 1 MiB limit: three 300 KB messages a page.
    expect(pages.map((page) => page.messages.length)).toEqual([3, 3]);
    expect(pages.flatMap((page) => page.messages.map((message) => message.id))).toEqual(["m0", "m1", "m2", "m3", "m4", "m5"]);
    expect(pages.every((page) => page.version === 6n && page.segmentSizes!.history === 6n)).toBe(true);

    const last = await client.unary(ConversationService.method.readMessages, { conversationId, last: 1 });
    expect(last.messages.map((message) => message.id)).toEqual(["m5"]);
    expect([last.position, last.windowEnd, last.nextPageToken]).toEqual([5n, 6n, ""]);

    const tooLarge = await serviceError(client.unary(ConversationService.method.readMessages, { conversationId, maxBytes: messageLimit }));
    expect(tooLarge.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(tooLarge.details).toBe(`max_bytes: at most ${(messageLimit / 16) * 15} (15/16 of the message limit, --max-request-bytes), got ${messageLimit}`);
  });

  it("reads windows through the store's readWindow, never loading the state: on Redis and Postgres from a sidecar that never loaded the conversation", async () => {
    const storeArgs = redis ? ["--redis-url", redis.url] : postgres ? ["--postgres-url", postgres.url] : undefined;
    const fresh = storeArgs ? await startSidecar(["--max-request-bytes", String(messageLimit), ...storeArgs]) : sidecar;
    const freshClient = storeArgs ? grpcJsClient(`127.0.0.1:${fresh.port}`) : client;
    const count = async (operation: string) => {
      const metrics = await (await fetch(`${fresh.url}/metrics`)).text();
      const line = metrics.split("\n").find((line) => line.startsWith(`contextd_store_operation_duration_seconds_count{operation="${operation}",outcome="ok"} `));
      return line === undefined ? 0 : Number(line.split(" ")[1]);
    };
    try {
      const before = { load: await count("load"), readWindow: await count("read_window") };
      const last = await freshClient.unary(ConversationService.method.readMessages, { conversationId, last: 1 });
      expect([last.messages.map((message) => message.id), last.segmentSizes!.history]).toEqual([["m5"], 6n]);
      const middle = await freshClient.unary(ConversationService.method.readMessages, { conversationId, start: 2n, end: 3n });
      expect(middle.messages.map((message) => message.id)).toEqual(["m2"]);
      expect([(await count("read_window")) - before.readWindow, (await count("load")) - before.load]).toEqual([2, 0]);
    } finally {
      if (storeArgs) {
        freshClient.close();
        await fresh.stop();
      }
    }
  });

  it("answers a page token whose version moved on and is not kept with ABORTED and the current version", async () => {
    const first = await client.unary(ConversationService.method.readMessages, { conversationId, maxBytes: 1 });
    await client.unary(ConversationService.method.commit, { conversationId: `other-${storeKind}`, deltas: [appendHistory(textMessage("x", Role.USER, "x"))] });
    // Kept in the sidecar for a minute: the next page still comes from version 6 after a commit.
    await client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage("late", Role.USER, "late"))] });
    const second = await client.unary(ConversationService.method.readMessages, { conversationId, pageToken: first.nextPageToken });
    expect([second.version, second.messages[0]!.id]).toEqual([6n, "m1"]);
    // A version no page token named is not kept.
    const stale = await serviceError(client.unary(ConversationService.method.readMessages, { conversationId, version: 5n }));
    expect(stale.code).toBe(grpc.status.ABORTED);
    expect(stale.metadata.get("contextd-current-version")).toEqual(["7"]);
  });
});
