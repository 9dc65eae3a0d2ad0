import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConversationService, type WatchResponse } from "#gen/contextd/v1/conversation_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { grpcJsClient, rpcFailure } from "../../support/grpc-js.js";
import { sidecarForSuite, sidecarStores, startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, delta, textMessage } from "../../store/fixtures.js";

// Fork, GetState at a past version and Rewind through a real sidecar, grpc-js, every store
// (docs/history.md): what the store contract shows, as a caller of the RPCs sees it.

describe.each(sidecarStores)("Fork, version history and Rewind (real sidecar, %s)", (_name, backend) => {
  const running = sidecarForSuite(backend);
  let run = 0;
  const newId = (label: string) => `${label}-${Date.now()}-${++run}`;
  const commit = (conversationId: string, expectedVersion: bigint, text: string, id = "") =>
    running.client.unary(ConversationService.method.commit, { conversationId, expectedVersion, deltas: [appendHistory(textMessage(id, Role.USER, text))] });
  const historyIds = async (conversationId: string, atVersion?: bigint) =>
    (await running.client.unary(ConversationService.method.getState, { conversationId, atVersion })).state!.history.map((message) => message.id);

  it("reads a past version with GetState at_version, rewinds to it as a new version Watch delivers, and refuses what is out of range", async () => {
    const conversationId = newId("rpc-history");
    await commit(conversationId, 0n, "one", "m1");
    const second = await commit(conversationId, 1n, "two (its id assigned)");
    await commit(conversationId, 2n, "three", "m3");
    const atTwo = await historyIds(conversationId, 2n);
    expect(atTwo).toHaveLength(2);
    expect(await historyIds(conversationId, 1n)).toEqual(["m1"]);
    expect(await historyIds(conversationId, 0n)).toEqual([]);
    expect(second.version).toBe(2n);

    const beyond = await rpcFailure(running.client.unary(ConversationService.method.getState, { conversationId, atVersion: 4n }));
    expect(beyond.code).toBe(grpc.status.OUT_OF_RANGE);
    expect(beyond.details).toContain("past its current version 3");

    const watch = running.client.serverStream(ConversationService.method.watch, { conversationId, fromVersion: 3n });
    const seen: WatchResponse[] = [];
    const delivered = new Promise<void>((resolve, reject) => {
      watch.on("data", (response: WatchResponse) => {
        if (response.kind.case === "change") seen.push(response);
        if (seen.length === 1) resolve();
      });
      watch.on("error", (error: grpc.ServiceError) => (error.code === grpc.status.CANCELLED ? undefined : reject(error)));
    });
    const stale = await rpcFailure(running.client.unary(ConversationService.method.rewind, { conversationId, toVersion: 2n, expectedVersion: 2n }));
    expect(stale.code).toBe(grpc.status.ABORTED);
    const rewound = await running.client.unary(ConversationService.method.rewind, { conversationId, toVersion: 2n, expectedVersion: 3n, idempotencyKey: "undo-1" });
    expect(rewound).toMatchObject({ version: 4n, replayed: false });
    expect(await running.client.unary(ConversationService.method.rewind, { conversationId, toVersion: 2n, expectedVersion: 3n, idempotencyKey: "undo-1" })).toMatchObject({ version: 4n, replayed: true });
    expect(await historyIds(conversationId)).toEqual(atTwo);
    await delivered;
    watch.cancel();
    expect(seen[0]!.kind.value).toMatchObject({ version: 4n, deltas: [], rewoundToVersion: 2n });
    // The store logs the rewind with its undo (what reads version 3 back); Watch leaves it out.
    expect(seen[0]!.kind.case === "change" && seen[0]!.kind.value.undo).toBe(undefined);
    expect(await historyIds(conversationId, 3n)).toEqual([...atTwo, "m3"]);

    const negative = await rpcFailure(running.client.unary(ConversationService.method.rewind, { conversationId, toVersion: -1n }));
    expect(negative.code).toBe(grpc.status.INVALID_ARGUMENT);
  });

  it("forks at a version into a new conversation with ids, title and labels kept and forked_from on its state; ALREADY_EXISTS for an id in use", async () => {
    const source = newId("rpc-fork-source");
    await running.client.unary(ConversationService.method.commit, {
      conversationId: source,
      deltas: [appendHistory(textMessage("", Role.USER, "plan a trip")), delta({ case: "setMetadata", value: { title: "trip", labels: { team: "x" } } })],
    });
    await commit(source, 1n, "go on", "m2");
    const target = newId("rpc-fork-target");
    const forked = await running.client.unary(ConversationService.method.fork, { conversationId: source, atVersion: 1n, newConversationId: target });
    expect(forked).toMatchObject({ version: 1n, forkedFrom: { conversationId: source, version: 1n } });
    const state = (await running.client.unary(ConversationService.method.getState, { conversationId: target })).state!;
    expect(state).toMatchObject({ version: 1n, title: "trip", labels: { team: "x" }, forkedFrom: { conversationId: source, version: 1n } });
    expect(state.history.map((message) => message.id)).toEqual((await historyIds(source, 1n)));
    expect((await running.client.unary(ConversationService.method.getState, { conversationId: source })).state!.version).toBe(2n);

    const again = await rpcFailure(running.client.unary(ConversationService.method.fork, { conversationId: source, newConversationId: target }));
    expect(again.code).toBe(grpc.status.ALREADY_EXISTS);
    expect(again.details).toContain(`"${target}" already exists`);
    const missing = await rpcFailure(running.client.unary(ConversationService.method.fork, { conversationId: source, newConversationId: "" }));
    expect([missing.code, missing.details]).toEqual([grpc.status.INVALID_ARGUMENT, "new_conversation_id is required"]);
  });
});

describe("the history window and the read and undo bounds are the sidecar's flags (real sidecar, memory store)", () => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  beforeAll(async () => {
    sidecar = await startSidecar(["--history-retention-versions", "3", "--history-read-messages", "3", "--history-undo-bytes", "1000"]);
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
  });

  it("reads the versions --history-retention-versions changes reach back to, and answers RESOURCE_EXHAUSTED past --history-read-messages and OUT_OF_RANGE before a change past --history-undo-bytes", async () => {
    const append = (conversationId: string, count: number, text = "m") =>
      client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(...Array.from({ length: count }, (_, index) => textMessage("", Role.USER, `${text}${index}`)))] });
    const replace = (conversationId: string) =>
      client.unary(ConversationService.method.commit, { conversationId, deltas: [delta({ case: "replaceSegment", value: { segment: Segment.HISTORY, messages: [textMessage("", Role.USER, "only")] } })] });
    const short = `window-short-${Date.now()}`;
    await append(short, 2);
    await append(short, 2);
    await append(short, 2);
    // An append's undo brings nothing back: version 2 is one undo away.
    expect((await client.unary(ConversationService.method.getState, { conversationId: short, atVersion: 2n })).state!.history).toHaveLength(4);
    await replace(short);
    const tooMany = await rpcFailure(client.unary(ConversationService.method.getState, { conversationId: short, atVersion: 3n }));
    expect([tooMany.code, tooMany.details]).toEqual([grpc.status.RESOURCE_EXHAUSTED, expect.stringContaining("bring back more than 3 messages (the history read limit, --history-read-messages)")]);

    const long = `window-long-${Date.now()}`;
    for (let commit = 0; commit < 5; commit++) await append(long, 1);
    // The log holds versions 3 to 5: version 2 is the oldest the undos reach (3 changes, each weighing 1 against the read bound).
    expect((await client.unary(ConversationService.method.getState, { conversationId: long, atVersion: 2n })).state!.history).toHaveLength(2);
    const trimmed = await rpcFailure(client.unary(ConversationService.method.getState, { conversationId: long, atVersion: 1n }));
    expect([trimmed.code, trimmed.details]).toEqual([grpc.status.OUT_OF_RANGE, expect.stringContaining("the oldest readable version is 2")]);

    const cleared = `window-undo-${Date.now()}`;
    await append(cleared, 3, "x".repeat(400));
    await append(cleared, 1);
    await append(cleared, 1);
    await replace(cleared);
    const notUndoable = await rpcFailure(client.unary(ConversationService.method.getState, { conversationId: cleared, atVersion: 3n }));
    expect([notUndoable.code, notUndoable.details]).toEqual([grpc.status.OUT_OF_RANGE, expect.stringContaining("version 4 cannot be undone: its undo (the history messages the change removed or replaced) would hold more than 1000 bytes, the bound of one change's undo (--history-undo-bytes)")]);
    expect(notUndoable.details).toContain("the oldest readable version is 4");
  });
});
