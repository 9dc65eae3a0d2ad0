import { create, equals, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { Cluster, Redis } from "ioredis";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MessageSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import type { Change } from "#gen/contextd/v1/conversation_service_pb";
import { ConversationStateSchema, DeltaSchema, Segment, ToolDefinitionSchema, type ConversationState, type Delta } from "#gen/contextd/v1/state_pb";
import type { ConversationStore } from "../../src/store/conversation-store.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { PostgresConversationStore } from "../../src/store/postgres-conversation-store.js";
import { RedisConversationStore, type RedisStoreOptions } from "../../src/store/redis-conversation-store.js";
import { currentVersionTrailer } from "../../src/store/store-errors.js";
import { conversationKeys } from "../../src/store/redis-scripts.js";
import { EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { learnCorrection, maxCorrectionStep, uncorrected } from "../../src/core/compile/token-calibration.js";
import { applyDeltas } from "../../src/core/deltas/apply-deltas.js";
import { startPostgres, type PostgresProcess } from "../support/postgres.js";
import { startRedis, type RedisProcess } from "../support/redis.js";
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";
import { appendHistory, artifactDelta, delta, everyFieldMessage, everyFieldToolRound, randomEdits, textMessage } from "./fixtures.js";
import { randomSource } from "../support/random-messages.js";
import { stringLimits } from "../../src/core/model/string-limits.js";
import { listById, type ListQuery } from "../../src/store/conversation-listing.js";
import { AtRestCipher } from "../../src/store/at-rest-encryption.js";
import { usageLedgerContract } from "./usage-ledger.contract.js";
import { conversationRemovalContract } from "./conversation-removal.contract.js";
import { defaultHistoryLimits, replayedState, type HistoryLimits } from "../../src/store/version-history.js";

/** The keys of the encrypted runs (encryption at rest): one store of each kind runs the whole contract again with them. */
const encrypted = new AtRestCipher([
  { id: "contract-2", key: Buffer.alloc(32, 2), tenant: "" },
  { id: "contract-1", key: Buffer.alloc(32, 1), tenant: "" },
  { id: "tenant-a-1", key: Buffer.alloc(32, 3), tenant: "tenant-a" },
]);
import { ConversationExpiry } from "../../src/store/conversation-expiry.js";
import type { StoreRetention } from "../../src/store/create-conversation-store.js";

let redis: RedisProcess;
let redisCluster: RedisCluster;
let postgres: PostgresProcess;
/** The encrypted runs keep their conversations apart (a database, a key prefix), as a deployment does: listings never meet the plain runs' conversations. */
let encryptedPostgresUrl: string;
const encryptedKeyPrefix = "contextd-encrypted";
beforeAll(async () => {
  [redis, redisCluster, postgres] = await Promise.all([startRedis(), startRedisCluster(), startPostgres()]);
  encryptedPostgresUrl = await postgres.createDatabase("contract_encrypted");
}, 30_000);
afterAll(async () => {
  await Promise.all([redis?.stop(), redisCluster?.stop(), postgres?.destroy()]);
});

let conversationCounter = 0;
/** A fresh conversation id per test, so tests share one Redis without seeing each other. */
const freshId = (label: string) => `${label}-${process.pid}-${++conversationCounter}`;

async function rejection(promise: Promise<unknown>): Promise<ConnectError> {
  const error = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error, "expected a rejection").toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

/** `now`: the store's clock (the commit times it records), the system's when absent; `retention`: the idle TTLs and the sweep's interval. */
const stores: [string, (now?: () => number, retention?: StoreRetention) => Promise<ConversationStore>][] = [
  ["memory", async (now, retention) => new MemoryConversationStore({ now, ...retention })],
  [
    "redis",
    async (now, retention) => {
      const store = new RedisConversationStore(redis.url, { watchBlockMs: 200, now, ...retention });
      expect(await store.connected()).toBe(true);
      return store;
    },
  ],
  [
    // Three masters with a replica each: a conversation's keys on one master, the listing index on
    // whichever master its slot is.
    "redis cluster",
    async (now, retention) => {
      const store = new RedisConversationStore({ clusterNodes: redisCluster.addresses.slice(0, 1) }, { watchBlockMs: 200, now, ...retention });
      expect(await store.connected()).toBe(true);
      return store;
    },
  ],
  [
    "postgres",
    async (now, retention) => {
      const store = new PostgresConversationStore(postgres.url, { watchPollMs: 200, now, ...retention });
      expect(await store.connected()).toBe(true);
      return store;
    },
  ],
  // The same contract with contents encrypted at rest (docs/encryption-at-rest.md).
  [
    "redis, encrypted",
    async (now, retention) => {
      const store = new RedisConversationStore(redis.url, { watchBlockMs: 200, now, values: encrypted, keyPrefix: encryptedKeyPrefix, ...retention });
      expect(await store.connected()).toBe(true);
      return store;
    },
  ],
  [
    "redis cluster, encrypted",
    async (now, retention) => {
      const store = new RedisConversationStore({ clusterNodes: redisCluster.addresses.slice(0, 1) }, { watchBlockMs: 200, now, values: encrypted, keyPrefix: encryptedKeyPrefix, ...retention });
      expect(await store.connected()).toBe(true);
      return store;
    },
  ],
  [
    "postgres, encrypted",
    async (now, retention) => {
      const store = new PostgresConversationStore(encryptedPostgresUrl, { watchPollMs: 200, now, values: encrypted, ...retention });
      expect(await store.connected()).toBe(true);
      return store;
    },
  ],
];

describe.each(stores)("ConversationStore contract: %s", (_name, open) => {
  let store: ConversationStore;
  beforeAll(async () => {
    store = await open();
  });
  afterAll(async () => {
    await store?.close();
  });

  it("loads a conversation never written as an empty state with version 0", async () => {
    const id = freshId("empty");
    const state = await store.load(id);
    expect(state.version).toBe(0n);
    expect(state.conversationId).toBe(id);
    expect(equals(ConversationStateSchema, state, create(ConversationStateSchema, { conversationId: id }))).toBe(true);
    expect(await store.currentVersion(id)).toBe(0n);
  });

  it("advances the version by one per batch for append, replace, remove and clear_segment", async () => {
    const id = freshId("ops");
    const first = await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "hi"), textMessage("a1", Role.ASSISTANT, "hello"))], "");
    expect(first.version).toBe(1n);
    expect(first.state!.history.map((message) => message.id)).toEqual(["u1", "a1"]);
    const second = await store.commit(id, 1n, [delta({ case: "replaceSegment", value: { segment: Segment.SYSTEM, messages: [textMessage("s1", Role.SYSTEM, "be brief")] } })], "");
    expect(second.version).toBe(2n);
    const third = await store.commit(id, 2n, [delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: ["a1"] } })], "");
    expect(third.version).toBe(3n);
    expect(third.state!.history.map((message) => message.id)).toEqual(["u1"]);
    const fourth = await store.commit(id, 3n, [delta({ case: "clearSegment", value: { segment: Segment.SYSTEM } })], "");
    expect(fourth.version).toBe(4n);
    const loaded = await store.load(id);
    expect(loaded.version).toBe(4n);
    expect(loaded.system).toEqual([]);
    expect(loaded.history.map((message) => message.id)).toEqual(["u1"]);
  });

  it("gives messages without an id a unique id", async () => {
    const id = freshId("ids");
    const outcome = await store.commit(id, undefined, [appendHistory(textMessage("", Role.USER, "a"), textMessage("", Role.ASSISTANT, "b"))], "");
    const ids = outcome.state!.history.map((message) => message.id);
    expect(ids.every((messageId) => messageId !== "")).toBe(true);
    expect(new Set(ids).size).toBe(2);
    expect((await store.load(id)).history.map((message) => message.id)).toEqual(ids);
  });

  it("gives messages without an id the ids it is handed, in order, then random ones", async () => {
    const id = freshId("preset-ids");
    const batch = [appendHistory(textMessage("", Role.USER, "a"), textMessage("kept", Role.ASSISTANT, "b"), textMessage("", Role.USER, "c")), appendHistory(textMessage("", Role.ASSISTANT, "d"))];
    const outcome = await store.commit(id, 0n, batch, "", undefined, ["first", "second"]);
    const ids = outcome.state!.history.map((message) => message.id);
    expect(ids.slice(0, 3)).toEqual(["first", "kept", "second"]);
    expect(ids[3]).not.toBe("");
    expect(new Set(ids).size).toBe(4);
    expect((await store.load(id)).history.map((message) => message.id)).toEqual(ids);
  });

  it("rejects a stale commit and a stale clear with ABORTED carrying the current version, changing nothing", async () => {
    const id = freshId("stale");
    await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "");
    await store.commit(id, 1n, [appendHistory(textMessage("u2", Role.USER, "again"))], "");
    const before = toBinary(ConversationStateSchema, await store.load(id));

    const stale = await rejection(store.commit(id, 1n, [appendHistory(textMessage("u3", Role.USER, "late"))], ""));
    expect(stale.code).toBe(Code.Aborted);
    expect(stale.rawMessage).toContain("current version is 2");
    expect(stale.metadata.get(currentVersionTrailer)).toBe("2");

    const staleClear = await rejection(store.clear(id, 0n));
    expect(staleClear.code).toBe(Code.Aborted);
    expect(staleClear.metadata.get(currentVersionTrailer)).toBe("2");

    expect(toBinary(ConversationStateSchema, await store.load(id))).toEqual(before);
  });

  it("clears a missing conversation to version 1 and leaves a tombstone that never returns to version 0", async () => {
    const missing = freshId("clear-missing");
    expect(await store.clear(missing, undefined)).toBe(1n);
    expect((await store.load(missing)).version).toBe(1n);

    const id = freshId("tombstone");
    await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "hi")), delta({ case: "remember", value: { text: "likes tea" } })], "");
    expect(await store.clear(id, 1n)).toBe(2n);
    const cleared = await store.load(id);
    expect(cleared.version).toBe(2n);
    expect(cleared.history).toEqual([]);
    expect(cleared.experiences).toEqual([]);
    // A writer that last saw the empty conversation must not become valid again.
    expect((await rejection(store.commit(id, 0n, [appendHistory(textMessage("u9", Role.USER, "stale"))], ""))).code).toBe(Code.Aborted);
    // Experience ids are never reused, also across a clear.
    const after = await store.commit(id, 2n, [delta({ case: "remember", value: { text: "likes coffee" } })], "");
    expect(after.state!.experiences.map((experience) => experience.id)).toEqual(["exp_2"]);
    expect(await store.list(listById(id, 10, ""))).toMatchObject({ conversations: [{ conversationId: id, version: 3n }] });
  });

  it("round-trips every part kind, actor, source refs, origin, cache hint, provenance, extensions and artifacts byte-identically", async () => {
    const id = freshId("roundtrip");
    const deltas = [
      appendHistory(everyFieldMessage("m1")),
      everyFieldToolRound("round1"),
      artifactDelta("doc-1"),
      delta({ case: "setToolDefinitions", value: { toolDefinitions: [create(ToolDefinitionSchema, { name: "lookup", description: "find", parameters: '{"type":"object"}' })] } }),
      delta({ case: "remember", value: { text: "  likes\n tea " } }),
      delta({ case: "appendMessages", value: { segment: Segment.MEMORY, messages: [everyFieldMessage("m2")] } }),
    ];
    const outcome = await store.commit(id, 0n, deltas, "");
    const loaded = await store.load(id);
    expect(toBinary(ConversationStateSchema, loaded)).toEqual(toBinary(ConversationStateSchema, outcome.state!));
    expect(toBinary(MessageSchema, loaded.history[0]!)).toEqual(toBinary(MessageSchema, everyFieldMessage("m1")));
    expect(equals(MessageSchema, loaded.memory[0]!, everyFieldMessage("m2"))).toBe(true);
    expect(loaded.history.map((message) => message.id)).toEqual(["m1", "round1-a", "round1-r"]);
    expect(loaded.experiences).toMatchObject([{ id: "exp_1", text: "likes tea" }]);
    expect(loaded.artifacts[0]!.budget!.tokenLimit).toBe(100n);
  });

  it("applies nothing from a batch with one invalid delta, naming its index and rule", async () => {
    const id = freshId("atomic");
    await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "");
    const before = toBinary(ConversationStateSchema, await store.load(id));
    const error = await rejection(
      store.commit(
        id,
        1n,
        [
          delta({ case: "remember", value: { text: "fact" } }),
          delta({ case: "appendAssistant", value: { toolCalls: [{ id: "call_1", name: "search" }, { id: "call_2", name: "fetch" }] } }),
          delta({ case: "appendToolResult", value: { toolCallId: "" } }),
        ],
        "",
      ),
    );
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toMatch(/^deltas\[2\]\.append_tool_result: tool_call_id is required/);
    expect(toBinary(ConversationStateSchema, await store.load(id))).toEqual(before);
    expect(await store.currentVersion(id)).toBe(1n);
  });

  it("stores the sequences frameworks produce: reused call ids, calls without ids, a result without its call, a user message while a round is open, a detached resume", async () => {
    const id = freshId("wild");
    const assistantCalls = (messageId: string, ...calls: [string, string][]) =>
      create(MessageSchema, { id: messageId, role: Role.ASSISTANT, parts: calls.map(([callId, name]) => ({ kind: { case: "toolCall" as const, value: { id: callId, name, arguments: { data: "{}" } } } })) });
    const toolMessage = (messageId: string, callId: string, text: string) =>
      create(MessageSchema, { id: messageId, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, payload: { text } } } }] });
    const batches: Delta[][] = [
      // `call_0` on every turn, as some OpenAI-compatible servers answer.
      [appendHistory(textMessage("u1", Role.USER, "one"), assistantCalls("r1-a", ["call_0", "f"]), toolMessage("r1-t", "call_0", "A"))],
      [appendHistory(textMessage("u2", Role.USER, "two"), assistantCalls("r2-a", ["call_0", "f"]), toolMessage("r2-t", "call_0", "B"))],
      // A LangChain AIMessage whose tool call has no id, and its ToolMessage without one.
      [appendHistory(assistantCalls("lc-a", ["", "search"], ["", "fetch"]), toolMessage("lc-t1", "", "found"), toolMessage("lc-t2", "", "fetched"))],
      // A result whose call is not in this conversation.
      [appendHistory(toolMessage("orphan-t", "call_elsewhere", "late"))],
      // An approval pending while the user speaks; the result arrives after.
      [delta({ case: "appendAssistant", value: { messageId: "ap-a", toolCalls: [{ id: "approve_1", name: "refund", arguments: { data: "{}" } }] } })],
      [delta({ case: "appendUser", value: { message: textMessage("ap-u", Role.USER, "and email me") } })],
      [delta({ case: "appendToolResult", value: { toolCallId: "approve_1", messageId: "ap-t", payload: { text: "refunded" } } })],
      // A detached resume: the call's result went elsewhere, the model's answer comes here.
      [delta({ case: "appendAssistant", value: { messageId: "dr-a", toolCalls: [{ id: "detached_1", name: "run", arguments: { data: "{}" } }] } })],
      [delta({ case: "appendAssistant", value: { messageId: "dr-answer", text: "Done." } })],
    ];
    let last: ConversationState | undefined;
    for (const batch of batches) last = (await store.commit(id, undefined, batch, "")).state;
    const loaded = await store.load(id);
    expect(toBinary(ConversationStateSchema, loaded)).toEqual(toBinary(ConversationStateSchema, last!));
    expect(loaded.history.map((message) => message.id)).toEqual(["u1", "r1-a", "r1-t", "u2", "r2-a", "r2-t", "lc-a", "lc-t1", "lc-t2", "orphan-t", "ap-a", "ap-u", "ap-t", "dr-a", "dr-answer"]);
    const part = (messageId: string, index = 0) => loaded.history.find((message) => message.id === messageId)!.parts[index]!.kind.value as { id?: string; toolCallId?: string; name: string };
    // Calls without ids get `call_<message id>_<n>`; the results without ids answer them in order.
    expect([part("lc-a", 0).id, part("lc-a", 1).id]).toEqual(["call_lc-a_0", "call_lc-a_1"]);
    expect([part("lc-t1").toolCallId, part("lc-t2").toolCallId]).toEqual(["call_lc-a_0", "call_lc-a_1"]);
    // The late result is named after its call.
    expect(part("ap-t")).toMatchObject({ toolCallId: "approve_1", name: "refund" });

    // Watch carries the batch as committed (the call without id as it came); applied to the
    // version before, it gives the stored messages, the given ids included.
    const controller = new AbortController();
    const changes: Change[] = [];
    for await (const change of store.watch(id, 2n, controller.signal)) {
      changes.push(change);
      controller.abort();
    }
    expect((changes[0]!.deltas[0]!.operation.value as { messages: Message[] }).messages[0]!.parts[0]!.kind.value).toMatchObject({ id: "" });
    const before = create(ConversationStateSchema, { conversationId: id, history: loaded.history.slice(0, 6) });
    const replayed = applyDeltas(before, changes[0]!.deltas, { newMessageId: () => "unused" });
    expect(replayed.history.slice(6)).toEqual(loaded.history.slice(6, 9));
  });

  it("answers a retried commit with the same idempotency key from the record: its version always, its state while current", async () => {
    const id = freshId("idempotent");
    const batch = [appendHistory(textMessage("", Role.USER, "once"))];
    const original = await store.commit(id, 0n, batch, "key-1");
    expect(original.replayed).toBe(false);
    const atOnce = await store.commit(id, 0n, batch, "key-1");
    expect(atOnce).toMatchObject({ replayed: true, version: 1n });
    expect(toBinary(ConversationStateSchema, atOnce.state!)).toEqual(toBinary(ConversationStateSchema, original.state!));

    await store.commit(id, 1n, [appendHistory(textMessage("u2", Role.USER, "later"))], "");
    // The record keeps the version, not a copy of the state; the state has moved on.
    const retry = await store.commit(id, 0n, batch, "key-1");
    expect(retry).toMatchObject({ replayed: true, version: 1n, state: undefined });
    expect((await store.load(id)).history).toHaveLength(2);

    const misuse = await rejection(store.commit(id, 2n, [appendHistory(textMessage("", Role.USER, "other"))], "key-1"));
    expect(misuse.code).toBe(Code.InvalidArgument);
    expect(misuse.rawMessage).toContain('"key-1"');
    expect(await store.currentVersion(id)).toBe(2n);
  });

  it("keeps conversations whose ids differ only in {, }, : or % apart, and their idempotency keys", async () => {
    const base = freshId("escape");
    // Look-alikes of each other's key names: unescaped, "a}:idempotency:x"'s version key was the
    // record of "a"'s idempotency key "x}:version", so one conversation's commit wrote the other's.
    const ids = ["a", "a}:idempotency:x", "a}", "{a}", "a:b", "a%7D", "a%", "t/a}b", "t/a"].map((suffix) => `${base}/${suffix}`);
    for (const [index, id] of ids.entries()) {
      const outcome = await store.commit(id, 0n, [appendHistory(textMessage(`m${index}`, Role.USER, id))], "k}:");
      expect(outcome).toMatchObject({ version: 1n, replayed: false });
    }
    const id = ids[0]!;
    for (const key of ["x}:version", "x}:state", "x}:changes", "k", "k}", "k:", ":k", "k%3A"]) {
      expect((await store.commit(id, undefined, [appendHistory(textMessage("", Role.USER, key))], key)).replayed).toBe(false);
    }
    expect(await store.currentVersion(id)).toBe(9n);
    for (const [index, other] of ids.slice(1).entries()) {
      const state = await store.load(other);
      expect(state.version).toBe(1n);
      expect(state.history.map((message) => message.id)).toEqual([`m${index + 1}`]);
      expect((await store.commit(other, 1n, [appendHistory(textMessage("", Role.USER, "second"))], "x}:version")).version).toBe(2n);
    }
    const listed = await store.list(listById(`${base}/`, 100, ""));
    expect(listed.conversations.map((summary) => [summary.conversationId, summary.version])).toEqual(
      [...ids].sort().map((listedId) => [listedId, listedId === id ? 9n : 2n]),
    );
  });

  it("refuses ids, keys and prefixes with a lone surrogate as INVALID_ARGUMENT (their UTF-8 would be another id's)", async () => {
    const id = freshId("surrogate");
    const lone = await rejection(store.commit(`${id}\ud800`, undefined, [appendHistory(textMessage("", Role.USER, "x"))], ""));
    expect(lone.code).toBe(Code.InvalidArgument);
    expect(lone.rawMessage).toBe(`conversation_id has a lone UTF-16 surrogate at index ${id.length}: it is not valid Unicode and cannot be stored (it would encode like other ids)`);
    expect((await rejection(store.load(`${id}\udfff`))).code).toBe(Code.InvalidArgument);
    const key = await rejection(store.commit(id, undefined, [appendHistory(textMessage("", Role.USER, "x"))], "k\udc00"));
    expect(key.rawMessage).toMatch(/^idempotency_key has a lone UTF-16 surrogate at index 1/);
    expect((await rejection(store.list(listById("\ud800", 10, "")))).rawMessage).toMatch(/^prefix /);
    // A well-formed pair is an ordinary character.
    expect((await store.commit(`${id}😀`, undefined, [appendHistory(textMessage("", Role.USER, "x"))], "k😀")).version).toBe(1n);
    expect(await store.currentVersion(id)).toBe(0n);
  });

  it("stores ids and keys up to the limit and refuses longer ones as INVALID_ARGUMENT, alike (Postgres' btree said INTERNAL past 2,704 bytes)", async () => {
    const id = freshId("long");
    const atLimit = id + "x".repeat(stringLimits.id - id.length);
    const key = "k".repeat(stringLimits.idempotencyKey);
    expect((await store.commit(atLimit, undefined, [appendHistory(textMessage("", Role.USER, "x"))], key)).version).toBe(1n);
    expect((await store.commit(atLimit, undefined, [appendHistory(textMessage("", Role.USER, "x"))], key)).replayed).toBe(true);
    const longId = await rejection(store.commit(id + "x".repeat(3_000), undefined, [appendHistory(textMessage("", Role.USER, "x"))], ""));
    expect(longId.code).toBe(Code.InvalidArgument);
    expect(longId.rawMessage).toBe(`conversation_id has ${id.length + 3_000} bytes, over the limit of 1024 bytes the store keeps (docs/limits.md)`);
    const longKey = await rejection(store.commit(id, undefined, [appendHistory(textMessage("", Role.USER, "x"))], "k".repeat(3_000)));
    expect(longKey.rawMessage).toBe("idempotency_key has 3000 bytes, over the limit of 1024 bytes the store keeps (docs/limits.md)");
    expect((await rejection(store.load(id + "x".repeat(3_000)))).code).toBe(Code.InvalidArgument);
    expect(await store.currentVersion(id)).toBe(0n);
  });

  it("lets exactly one of 32 concurrent writers with the same expected version win", async () => {
    const id = freshId("race");
    await store.commit(id, 0n, [appendHistory(textMessage("u0", Role.USER, "start"))], "");
    const results = await Promise.allSettled(
      Array.from({ length: 32 }, (_, writer) => store.commit(id, 1n, [appendHistory(textMessage(`w${writer}`, Role.USER, `writer ${writer}`))], "")),
    );
    const won = results.filter((result) => result.status === "fulfilled");
    const lost = results.filter((result): result is PromiseRejectedResult => result.status === "rejected");
    expect(won).toHaveLength(1);
    expect(lost.every((result) => (result.reason as ConnectError).code === Code.Aborted)).toBe(true);
    const state = await store.load(id);
    expect(state.version).toBe(2n);
    expect(state.history).toHaveLength(2);
  });

  it("lets exactly one of two concurrent first commits of a conversation win; the other is ABORTED", async () => {
    const id = freshId("first-insert");
    const results = await Promise.allSettled(
      ["a", "b"].map((writer) => store.commit(id, 0n, [appendHistory(textMessage(writer, Role.USER, writer))], "")),
    );
    const won = results.filter((result) => result.status === "fulfilled");
    const lost = results.filter((result): result is PromiseRejectedResult => result.status === "rejected");
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(1);
    expect((lost[0]!.reason as ConnectError).code).toBe(Code.Aborted);
    expect((lost[0]!.reason as ConnectError).rawMessage).toContain("current version is 1");
    expect((await store.load(id)).history).toHaveLength(1);
  });

  it("applies all of 32 concurrent writers without an expected version, one version each", async () => {
    const id = freshId("no-expected");
    const outcomes = await Promise.all(
      Array.from({ length: 32 }, (_, writer) => store.commit(id, undefined, [appendHistory(textMessage(`w${writer}`, Role.USER, "x"))], "")),
    );
    expect(outcomes.map((outcome) => outcome.version).sort((a, b) => Number(a - b))).toEqual(Array.from({ length: 32 }, (_, index) => BigInt(index + 1)));
    const state = await store.load(id);
    expect(state.version).toBe(32n);
    expect(state.history.map((message) => message.id).sort()).toEqual(Array.from({ length: 32 }, (_, writer) => `w${writer}`).sort());
  });

  it("streams every change once, in version order, resumes from a version and follows live commits", async () => {
    const id = freshId("watch");
    await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "1"))], "k1");
    await store.commit(id, 1n, [appendHistory(textMessage("u2", Role.USER, "2"))], "");
    await store.clear(id, 2n);

    const controller = new AbortController();
    const seen: Change[] = [];
    const done = (async () => {
      for await (const change of store.watch(id, 0n, controller.signal)) {
        seen.push(change);
        if (seen.length === 5) controller.abort();
      }
    })();
    await waitFor(() => seen.length >= 3);
    await store.commit(id, 3n, [appendHistory(textMessage("u4", Role.USER, "4"))], "");
    await store.commit(id, 4n, [appendHistory(textMessage("u5", Role.USER, "5"))], "");
    await done;
    expect(seen.map((change) => change.version)).toEqual([1n, 2n, 3n, 4n, 5n]);
    expect(seen[0]!.idempotencyKey).toBe("k1");
    expect(seen[2]!.cleared).toBe(true);
    expect(seen[3]!.deltas[0]!.operation.case).toBe("appendMessages");

    const resumed: bigint[] = [];
    const resume = new AbortController();
    for await (const change of store.watch(id, 3n, resume.signal)) {
      resumed.push(change.version);
      if (resumed.length === 2) resume.abort();
    }
    expect(resumed).toEqual([4n, 5n]);
  });

  it("loads after every one of 200 random edits exactly the state the commit returned (append, tool rounds, cancel, remove, replace, compact, clear, artifacts, experiences)", async () => {
    const id = freshId("random-edits");
    const edits = randomEdits(randomSource(41));
    let state = await store.load(id);
    for (let step = 0; step < 200; step++) {
      const deltas = edits(state);
      if (deltas === undefined) continue;
      state = (await store.commit(id, state.version, deltas, "")).state!;
      expect(toBinary(ConversationStateSchema, await store.load(id)), `step ${step}`).toEqual(toBinary(ConversationStateSchema, state));
    }
    expect(state.version).toBeGreaterThan(100n);
  });

  it("reads a window of a segment at one version: the tail, a range before a position, clamped, with the rest whole or without it", async () => {
    const id = freshId("window");
    const never = await store.readWindow(id, { segment: "history", count: 10, withRest: true });
    expect([never.state.version, never.start, never.length, never.state.history.length]).toEqual([0n, 0, 0, 0]);
    await store.commit(id, undefined, [appendHistory(...Array.from({ length: 50 }, (_, index) => textMessage(`h${index}`, index % 2 ? Role.ASSISTANT : Role.USER, `m${index}`)))], "");
    await store.commit(id, undefined, [delta({ case: "appendMessages", value: { segment: Segment.SYSTEM, messages: [textMessage("s0", Role.SYSTEM, "be brief")] } }), artifactDelta("a1")], "");
    const loaded = await store.load(id);
    const ids = (messages: readonly Message[]) => messages.map((message) => message.id);
    for (const [query, start, stop] of [
      [{ count: 10 }, 40, 50],
      [{ end: 25, count: 10 }, 15, 25],
      [{ end: 5, count: 10 }, 0, 5],
      [{ end: 80, count: 3 }, 47, 50],
      [{ count: 500 }, 0, 50],
      [{ count: 0 }, 50, 50],
    ] as const) {
      for (const withRest of [true, false]) {
        const window = await store.readWindow(id, { segment: "history", withRest, ...query });
        const where = `${JSON.stringify(query)} withRest ${withRest}`;
        expect([window.state.version, window.start, window.length], where).toEqual([loaded.version, start, 50]);
        expect(ids(window.state.history), where).toEqual(ids(loaded.history.slice(start, stop)));
        for (const [index, message] of window.state.history.entries()) expect(equals(MessageSchema, message, loaded.history[start + index]!), where).toBe(true);
        if (withRest) expect(toBinary(ConversationStateSchema, { ...window.state, history: loaded.history }), where).toEqual(toBinary(ConversationStateSchema, loaded));
        else expect([window.state.system.length, window.state.artifacts.length], where).toEqual([0, 0]);
      }
    }
    const system = await store.readWindow(id, { segment: "system", count: 1, withRest: true });
    expect([ids(system.state.system), system.length, ids(system.state.history)]).toEqual([["s0"], 1, ids(loaded.history)]);
  });

  it("pins a window to a version: a later page at the same version reads on, a moved conversation is ABORTED naming its version", async () => {
    const id = freshId("window-pinned");
    const moved = await rejection(store.readWindow(id, { segment: "history", count: 1, withRest: false, atVersion: 3n }));
    expect([moved.code, moved.rawMessage]).toEqual([Code.Aborted, expect.stringMatching(/is at version 0, not at version 3/)]);
    await store.commit(id, undefined, [appendHistory(...Array.from({ length: 30 }, (_, index) => textMessage(`p${index}`, Role.USER, "x")))], "");
    const first = await store.readWindow(id, { segment: "history", count: 10, withRest: false });
    const second = await store.readWindow(id, { segment: "history", end: first.start, count: 10, withRest: false, atVersion: first.state.version });
    expect([second.start, second.state.history[0]!.id]).toEqual([10, "p10"]);
    await store.commit(id, undefined, [appendHistory(textMessage("later", Role.USER, "y"))], "");
    const error = await rejection(store.readWindow(id, { segment: "history", end: second.start, count: 10, withRest: false, atVersion: first.state.version }));
    expect([error.code, error.rawMessage]).toEqual([Code.Aborted, expect.stringMatching(/is at version 2, not at version 1 that this read is pinned to/)]);
  });

  it("refuses a window query no store can answer as INVALID_ARGUMENT naming the field and the bound", async () => {
    const id = freshId("window-invalid");
    for (const [query, pattern] of [
      [{ segment: "history", count: -1, withRest: false }, /count -1 must be an integer from 0 to 1000000/],
      [{ segment: "history", count: 1.5, withRest: false }, /count 1.5 must be an integer/],
      [{ segment: "history", count: 1, end: -2, withRest: false }, /end -2 must be a non-negative integer/],
      [{ segment: "pending", count: 1, withRest: false }, /segment "pending" is not one of system, history, memory, tools/],
    ] as const) {
      const error = await rejection(store.readWindow(id, query as never));
      expect([error.code, error.rawMessage]).toEqual([Code.InvalidArgument, expect.stringMatching(pattern)]);
    }
  });

  it("refuses an id already in a long conversation in every segment, after appends, removals and replaces, and takes back a removed one", async () => {
    const id = freshId("long-ids");
    const text = (messageId: string, role = Role.USER) => create(MessageSchema, { id: messageId, role, parts: [{ kind: { case: "text", value: { text: "x" } } }] });
    const append = (segment: Segment, messages: Message[]) => create(DeltaSchema, { operation: { case: "appendMessages", value: { segment, messages } } });
    await store.commit(id, undefined, [append(Segment.HISTORY, Array.from({ length: 1_500 }, (_, index) => text(`h${index}`))), append(Segment.MEMORY, [text("mem", Role.SYSTEM)])], "");
    const duplicate = async (messageId: string, segment = Segment.HISTORY) => (await rejection(store.commit(id, undefined, [append(segment, [text(messageId)])], ""))).rawMessage;
    for (let turn = 0; turn < 3; turn++) {
      expect(await duplicate("h0")).toMatch(/duplicate message id "h0"/);
      expect(await duplicate("mem")).toMatch(/duplicate message id "mem"/);
      await store.commit(id, undefined, [append(Segment.HISTORY, [text(`t${turn}`)])], "");
      expect(await duplicate(`t${turn}`, Segment.TOOLS)).toMatch(new RegExp(`duplicate message id "t${turn}"`));
    }
    await store.commit(id, undefined, [create(DeltaSchema, { operation: { case: "removeMessages", value: { segment: Segment.HISTORY, ids: ["h7"] } } })], "");
    await store.commit(id, undefined, [append(Segment.HISTORY, [text("h7")])], "");
    expect(await duplicate("h7")).toMatch(/duplicate message id "h7"/);
    const kept = (await store.load(id)).history.filter((message) => message.id !== "h8");
    await store.commit(id, undefined, [create(DeltaSchema, { operation: { case: "replaceSegment", value: { segment: Segment.HISTORY, messages: kept } } })], "");
    await store.commit(id, undefined, [append(Segment.SYSTEM, [text("h8", Role.SYSTEM)])], "");
    expect(await duplicate("h8")).toMatch(/duplicate message id "h8"/);
    expect(await duplicate("h9", Segment.SYSTEM)).toMatch(/duplicate message id "h9"/);
    const round = create(DeltaSchema, {
      operation: {
        case: "appendToolRound",
        value: {
          assistant: create(MessageSchema, { id: "round", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "call", name: "f", arguments: { data: "{}" } } } }] }),
          results: [create(MessageSchema, { id: "round", role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: "call", name: "f", payload: { text: "r" } } } }] })],
        },
      },
    });
    expect((await rejection(store.commit(id, undefined, [round], ""))).rawMessage).toMatch(/results\[0\]: duplicate message id "round"/);
  });

  it("looks ids up in its index for a batch applied outside a commit to a state it handed out (a compile-commit's preview), and commits the same batch after it", async () => {
    const id = freshId("preview-ids");
    await store.commit(id, undefined, [appendHistory(...Array.from({ length: 1_500 }, (_, index) => textMessage(`p${index}`, Role.USER, "x")))], "");
    const state = await store.load(id);
    const lookups = store.idLookupsFor!(id, state);
    // The index of the state the store handed out, not a scan.
    expect(lookups.messageIds?.(state)?.has("p1499")).toBe(true);
    expect(lookups.messageIds?.(state)?.has("q1")).toBe(false);
    const context = { newMessageId: () => "drawn", ...lookups };
    expect(() => applyDeltas(state, [appendHistory(textMessage("p7", Role.USER, "again"))], context)).toThrow(/duplicate message id "p7"/);
    const previewed = applyDeltas(state, [appendHistory(textMessage("q1", Role.USER, "new"))], context);
    expect(previewed.history.map((message) => message.id).slice(-2)).toEqual(["p1499", "q1"]);
    // The preview changed nothing stored; the store's own commit of the batch goes through.
    const committed = await store.commit(id, state.version, [appendHistory(textMessage("q1", Role.USER, "new"))], "");
    expect(committed.state!.history.map((message) => message.id).slice(-2)).toEqual(["p1499", "q1"]);
    expect((await store.load(id)).history).toHaveLength(1_501);
    await expect(store.commit(id, undefined, [appendHistory(textMessage("q1", Role.USER, "twice"))], "")).rejects.toThrow(/duplicate message id "q1"/);
  });

  it("in a 20,000-message conversation (indexed ids) refuses a duplicate message id and a tool-call id twice in one round, applies nothing of such a batch, and takes edits of old messages", async () => {
    const id = freshId("long-index");
    // Long enough for the stores' id index (from 1,024 messages); 100,000 took ~15 s per store here.
    const size = 20_000;
    const round = (prefix: string, callId: string) =>
      delta({
        case: "appendToolRound",
        value: {
          assistant: create(MessageSchema, { id: `${prefix}-a`, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: callId, name: "f", arguments: { data: "{}" } } } }] }),
          results: [create(MessageSchema, { id: `${prefix}-r`, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, name: "f", payload: { text: "r" } } } }] })],
        },
      });
    await store.commit(id, undefined, [round("first", "early-call")], "");
    for (let start = 0; start < size - 2; start += 10_000) {
      const count = Math.min(10_000, size - 2 - start);
      await store.commit(id, undefined, [appendHistory(...Array.from({ length: count }, (_, offset) => textMessage(`h${start + offset}`, Role.USER, "x")))], "");
    }
    for (let turn = 0; turn < 5; turn++) await store.commit(id, undefined, [appendHistory(textMessage(`t${turn}`, Role.USER, "turn"))], "");
    const before = await store.load(id);
    expect(before.history.length).toBe(size + 5);
    const refused = async (deltas: Delta[]) => (await rejection(store.commit(id, undefined, deltas, ""))).rawMessage;
    expect(await refused([appendHistory(textMessage("h0", Role.USER, "again"))])).toMatch(/duplicate message id "h0"/);
    expect(await refused([appendHistory(textMessage(`h${size - 3}`, Role.USER, "again"))])).toMatch(new RegExp(`duplicate message id "h${size - 3}"`));
    expect(await refused([appendHistory(textMessage("t4", Role.USER, "again"))])).toMatch(/duplicate message id "t4"/);
    // Within one batch: an id the batch appended itself, then an old one behind a new one.
    expect(await refused([appendHistory(textMessage("n1", Role.USER, "new")), appendHistory(textMessage("n1", Role.USER, "twice"))])).toMatch(/deltas\[1\].*duplicate message id "n1"/);
    expect(await refused([appendHistory(textMessage("n2", Role.USER, "new")), appendHistory(textMessage("first-a", Role.USER, "old"))])).toMatch(/deltas\[1\].*duplicate message id "first-a"/);
    // Call ids need be unique only within their round: twice in one round is refused (a result
    // could not say which call it answers), behind a good delta of the same batch.
    const twiceInOneRound = appendHistory(
      create(MessageSchema, { id: "twice-a", role: Role.ASSISTANT, parts: ["same", "same"].map((callId) => ({ kind: { case: "toolCall" as const, value: { id: callId, name: "f", arguments: { data: "{}" } } } })) }),
    );
    expect(await refused([appendHistory(textMessage("n0", Role.USER, "new")), twiceInOneRound])).toMatch(/deltas\[1\].*duplicate_tool_call_id.*"same" is used more than once in this round/);
    expect(await store.currentVersion(id)).toBe(before.version);
    // A new round and new messages go in, reusing an id of 20,000 messages ago and of the batch
    // itself (as servers that answer `call_0` every turn do); then old messages are removed and
    // replaced, and their ids come free.
    await store.commit(id, undefined, [round("late", "early-call"), round("later", "early-call"), appendHistory(textMessage("n1", Role.USER, "new"))], "");
    // A result for a call made long ago (the index says a round made it; the name is its call's),
    // and one for a call never made here (stored without its name): both stored.
    await store.commit(id, undefined, [delta({ case: "appendToolResult", value: { toolCallId: "early-call", messageId: "old-call-r" } }), delta({ case: "appendToolResult", value: { toolCallId: "never-made", messageId: "orphan-r" } })], "");
    const results = (await store.load(id)).history.slice(-2).map((message) => message.parts[0]!.kind.value as { toolCallId: string; name: string });
    expect(results.map(({ toolCallId, name }) => [toolCallId, name])).toEqual([["early-call", "f"], ["never-made", ""]]);
    await store.commit(id, undefined, [delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: ["h3", "first-a", "first-r"] } })], "");
    await store.commit(id, undefined, [appendHistory(textMessage("h3", Role.USER, "back")), round("again", "early-call")], "");
    expect(await refused([appendHistory(textMessage("h4", Role.USER, "again"))])).toMatch(/duplicate message id "h4"/);
    expect(await refused([appendHistory(textMessage("h3", Role.USER, "again"))])).toMatch(/duplicate message id "h3"/);
    const current = await store.load(id);
    const replaced = current.history.map((message) => (message.id === "h10" ? textMessage("h10", Role.USER, "edited") : message));
    const after = (await store.commit(id, undefined, [delta({ case: "replaceSegment", value: { segment: Segment.HISTORY, messages: replaced } }), appendHistory(textMessage("t5", Role.USER, "turn"))], "")).state!;
    expect(await refused([appendHistory(textMessage("h10", Role.USER, "again"))])).toMatch(/duplicate message id "h10"/);
    const loaded = await store.load(id);
    expect(loaded.history.length).toBe(size + 5 + 4 + 1 + 2 - 3 + 3 + 1);
    expect(loaded.history.find((message) => message.id === "h10")).toEqual(textMessage("h10", Role.USER, "edited"));
    // Compared as bytes in one call: toEqual walks a long byte array element by element.
    expect(Buffer.from(toBinary(ConversationStateSchema, loaded)).equals(toBinary(ConversationStateSchema, after))).toBe(true);
  }, 60_000);

  it("leaves a state it handed out unchanged by later appends, removals and replaces (a reader keeps the version it loaded)", async () => {
    const id = freshId("snapshot");
    await store.commit(id, undefined, [appendHistory(...Array.from({ length: 2_000 }, (_, index) => textMessage(`h${index}`, Role.USER, "x")))], "");
    const held = await store.load(id);
    const heldHistory = held.history;
    const heldBytes = toBinary(ConversationStateSchema, held);
    const committed = (await store.commit(id, held.version, [appendHistory(textMessage("t0", Role.USER, "next"))], "")).state!;
    for (let turn = 1; turn < 5; turn++) await store.commit(id, undefined, [appendHistory(textMessage(`t${turn}`, Role.USER, "next"))], "");
    await store.commit(id, undefined, [delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: ["h1"] } })], "");
    await store.commit(id, undefined, [delta({ case: "replaceSegment", value: { segment: Segment.SYSTEM, messages: [textMessage("s", Role.SYSTEM, "sys")] } })], "");
    const latest = await store.load(id);
    expect(latest.history.length).toBe(2_004);
    expect(held.history).toBe(heldHistory);
    expect(held.history.length).toBe(2_000);
    expect(toBinary(ConversationStateSchema, held)).toEqual(heldBytes);
    expect(committed.history.length).toBe(2_001);
    expect(committed.history.at(-1)!.id).toBe("t0");
  });

  describe("usage ledger", () => usageLedgerContract(() => store, async () => (_name === "memory" ? store : await open()), freshId));
  describe("retention: what a removed conversation leaves, and the tenants' default prune", () => conversationRemovalContract(() => store, open, freshId, _name === "memory"));

  describe("token calibration records", () => {
    const bounds = { maxKeysPerTenant: 64, ttlMs: 86_400_000 };
    const now = 1_764_600_000_000;
    const key = (tenant: string, model = "claude-x", provider = Provider.ANTHROPIC_MESSAGES, estimator = EstimatorKind.TOKENIZER) => ({ tenant, provider, model, estimator });

    it("learns each report with the core's arithmetic, bit for bit, clamped, and reads back what it learnt", async () => {
      const tenant = freshId("calibration");
      expect(await store.readCalibration(key(tenant), now, bounds)).toBeUndefined();
      // Ratios around 1, extreme ones the clamp cuts, token counts up to 2^53 - 1, past the window of 10.
      const reports: [number, number][] = [
        [1, 4_000], [1_000, 1_300], [977, 1_013], [3, 1_000], [1_000, 1], [2 ** 53 - 1, 2 ** 53 - 2], [12_345, 23_456], [7, 9], [1, 1],
        [40_000, 31_337], [100, 101], [999_999, 1_000_001], [5, 3], [123_456_789, 98_765_432], [2, 7], [65_536, 65_537],
      ];
      let expected = uncorrected;
      for (const [index, [estimated, actual]] of reports.entries()) {
        const learnt = learnCorrection(expected, estimated, actual);
        expect(await store.reportCalibration(key(tenant), estimated, actual, now + index, bounds), `report ${index}`).toEqual(learnt);
        // One report of 4000:1 moves the correction by the largest step, not to the clamp.
        if (index === 0) expect(learnt.correction.factor).toBe(maxCorrectionStep);
        expected = learnt.correction;
      }
      expect(await store.readCalibration(key(tenant), now + reports.length, bounds)).toEqual(expected);
    });

    it("keeps tenants, providers, estimators and models apart, tenants and models with {, }, : or % included", async () => {
      const tenant = freshId("calibration-keys");
      const keys = [
        key(tenant),
        key(`${tenant}}:x`),
        key(`${tenant}%7D:x`),
        key(""),
        key(tenant, "claude-x:1:claude-x"),
        key(tenant, "{claude-x}"),
        key(tenant, "claude-x", Provider.OPENAI_CHAT),
        key(tenant, "claude-x", Provider.ANTHROPIC_MESSAGES, EstimatorKind.CHAR_FALLBACK),
      ];
      const emptyTenantBefore = await store.readCalibration(key(""), now, bounds);
      for (const [index, each] of keys.entries()) await store.reportCalibration(each, 100, 100 + index, now, bounds);
      for (const [index, each] of keys.entries()) {
        const reports = each.tenant === "" ? (emptyTenantBefore?.reports ?? 0) + 1 : 1;
        expect(await store.readCalibration(each, now, bounds), JSON.stringify(each)).toMatchObject({ reports, ...(reports === 1 ? { factor: (100 + index) / 100 } : {}) });
      }
    });

    it("counts every one of 40 concurrent reports of one key from two sidecars' stores", async () => {
      const tenant = freshId("calibration-concurrent");
      const other = _name === "memory" ? store : await open();
      try {
        const answers = await Promise.all(Array.from({ length: 40 }, (_, index) => (index % 2 === 0 ? store : other).reportCalibration(key(tenant), 1_000, 1_500, now, bounds)));
        // Each report saw the one before it: the reports counts are 1 to 40, each once.
        expect(answers.map((answer) => answer.correction.reports).sort((a, b) => a - b)).toEqual(Array.from({ length: 40 }, (_, index) => index + 1));
        expect(await other.readCalibration(key(tenant), now, bounds)).toMatchObject({ factor: 1.5, reports: 40 });
      } finally {
        if (other !== store) await other.close();
      }
    });

    it("forgets a key not reported within the expiry: reads find none and the next report starts again", async () => {
      const tenant = freshId("calibration-expiry");
      await store.reportCalibration(key(tenant), 100, 200, now, bounds);
      expect(await store.readCalibration(key(tenant), now + bounds.ttlMs - 1, bounds)).toMatchObject({ factor: 2, reports: 1 });
      expect(await store.readCalibration(key(tenant), now + bounds.ttlMs, bounds)).toBeUndefined();
      expect(await store.reportCalibration(key(tenant), 100, 300, now + bounds.ttlMs, bounds)).toEqual(learnCorrection(uncorrected, 100, 300));
    });

    it("keeps at most the tenant's bound of keys, forgetting the least recently reported first, other tenants untouched", async () => {
      const tenant = freshId("calibration-bound");
      const neighbour = freshId("calibration-neighbour");
      const small = { ...bounds, maxKeysPerTenant: 3 };
      await store.reportCalibration(key(neighbour, "n"), 100, 100, now, small);
      for (const [index, model] of ["a", "b", "c"].entries()) await store.reportCalibration(key(tenant, model), 100, 100, now + index, small);
      // "a" reported again: "b" is now the least recently reported.
      await store.reportCalibration(key(tenant, "a"), 100, 100, now + 3, small);
      await store.reportCalibration(key(tenant, "d"), 100, 100, now + 4, small);
      const kept = [];
      for (const model of ["a", "b", "c", "d"]) if (await store.readCalibration(key(tenant, model), now + 5, small)) kept.push(model);
      expect(kept).toEqual(["a", "c", "d"]);
      expect(await store.readCalibration(key(neighbour, "n"), now + 5, small)).toMatchObject({ reports: 1 });
    });
  });

  it("lists conversations by id, paged and filtered by prefix", async () => {
    const prefix = freshId("list") + "/";
    for (const suffix of ["c", "a", "e", "b", "d"]) await store.commit(prefix + suffix, undefined, [delta({ case: "remember", value: { text: suffix } })], "");
    const first = await store.list(listById(prefix, 2, ""));
    expect(first.conversations.map((summary) => summary.conversationId)).toEqual([prefix + "a", prefix + "b"]);
    const second = await store.list(listById(prefix, 2, first.nextPageToken));
    const third = await store.list(listById(prefix, 2, second.nextPageToken));
    expect([...second.conversations, ...third.conversations].map((summary) => summary.conversationId)).toEqual([prefix + "c", prefix + "d", prefix + "e"]);
    expect(third.nextPageToken).toBe("");
    expect(first.conversations[0]!.version).toBe(1n);
    expect((await rejection(store.list(listById(prefix, 2, "not a token!")))).code).toBe(Code.InvalidArgument);
  });

  it("keeps a title and labels in the state: set by a versioned delta, seen by Watch, kept by Clear, refused over their limits", async () => {
    const id = freshId("metadata");
    const set = (value: { title?: string; labels?: Record<string, string>; removeLabels?: string[] }) => delta({ case: "setMetadata", value });
    const first = await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "hi")), set({ title: "Trip to Oslo", labels: { user: "u-7", team: "travel" } })], "");
    expect(first.state).toMatchObject({ version: 1n, title: "Trip to Oslo", labels: { user: "u-7", team: "travel" } });
    const second = await store.commit(id, 1n, [set({ labels: { team: "ops" }, removeLabels: ["user"] })], "meta-key");
    expect(second.version).toBe(2n);
    expect(await store.commit(id, undefined, [set({ labels: { team: "ops" }, removeLabels: ["user"] })], "meta-key")).toMatchObject({ version: 2n, replayed: true });
    expect((await store.load(id))).toMatchObject({ title: "Trip to Oslo", labels: { team: "ops" } });
    const changes: Change[] = [];
    const abort = new AbortController();
    for await (const change of store.watch(id, 1n, abort.signal)) {
      changes.push(change);
      abort.abort();
    }
    expect(changes[0]!.deltas[0]!.operation.case).toBe("setMetadata");
    await store.clear(id, 2n);
    const cleared = await store.load(id);
    expect(cleared).toMatchObject({ version: 3n, title: "Trip to Oslo", labels: { team: "ops" }, history: [] });
    const tooMany = Object.fromEntries(Array.from({ length: 32 }, (_, index) => [`k${index}`, "v"]));
    const over = await rejection(store.commit(id, 3n, [appendHistory(textMessage("u2", Role.USER, "more")), set({ labels: tooMany })], ""));
    expect(over.code).toBe(Code.InvalidArgument);
    expect(over.rawMessage).toMatch(/^deltas\[1\]\.set_metadata: the conversation would have 33 labels, more than the limit of 32/);
    expect((await rejection(store.commit(id, 3n, [set({ labels: { ["k".repeat(65)]: "v" } })], ""))).rawMessage).toMatch(/key is 65 UTF-8 bytes, more than the limit of 64/);
    expect((await rejection(store.commit(id, 3n, [set({ labels: { k: "v".repeat(257) } })], ""))).rawMessage).toMatch(/value is 257 UTF-8 bytes, more than the limit of 256/);
    expect((await rejection(store.commit(id, 3n, [set({ title: "t".repeat(513) })], ""))).rawMessage).toMatch(/title is 513 UTF-8 bytes, more than the limit of 512/);
    expect((await rejection(store.commit(id, 3n, [set({ labels: { "": "v" } })], ""))).rawMessage).toMatch(/must not be empty/);
    expect((await rejection(store.commit(id, 3n, [set({ title: "a\u0000b" })], ""))).rawMessage).toMatch(/title holds a NUL character/);
    expect((await rejection(store.commit(id, 3n, [set({ labels: { k: "\ud800" } })], ""))).rawMessage).toMatch(/value holds a lone surrogate/);
    expect(await store.load(id)).toMatchObject({ version: 3n, history: [], labels: { team: "ops" } });
  });

  it("lists newest update first with times, title and labels, filtered by labels and updated time, pages correct while commits land", async () => {
    // A clock ahead of every other test's commits, so this test's conversations are the newest.
    let clock = 4_000_000_000_000 + conversationCounter * 1_000;
    const start = clock;
    const timed = await open(() => clock);
    try {
      const prefix = freshId("by-update") + "/";
      const labelled = (labels: Record<string, string>) => delta({ case: "setMetadata", value: { title: "t", labels } });
      await timed.commit(prefix + "a", 0n, [labelled({ team: "x", tier: "1" })], "");
      clock += 10;
      await timed.commit(prefix + "b", 0n, [labelled({ team: "y" })], "");
      clock += 10;
      await timed.commit(prefix + "d", 0n, [labelled({ team: "x" })], "");
      await timed.commit(prefix + "c", 0n, [labelled({ team: "x", tier: "1" })], ""); // same millisecond as d: ties go by id
      clock += 10;
      const query = (pageToken: string, more: Partial<ListQuery> = {}): ListQuery => ({ ...listById(prefix, 2, pageToken), order: "updated", updatedSinceUnixMs: BigInt(start), ...more });
      const ids = (page: { conversations: { conversationId: string }[] }) => page.conversations.map((summary) => summary.conversationId.slice(prefix.length));
      const first = await timed.list(query(""));
      expect(ids(first)).toEqual(["c", "d"]);
      expect(first.conversations[0]).toMatchObject({ version: 1n, title: "t", labels: { team: "x", tier: "1" }, createdAtUnixMs: BigInt(start + 20), updatedAtUnixMs: BigInt(start + 20) });
      // b is committed to while the pages are read: it moves ahead of what was read and is not listed again.
      await timed.commit(prefix + "b", 1n, [delta({ case: "remember", value: { text: "later" } })], "");
      const second = await timed.list(query(first.nextPageToken));
      expect(ids(second)).toEqual(["a"]);
      expect(second.nextPageToken).toBe("");
      const again = await timed.list(query("", { pageSize: 10 }));
      expect(ids(again)).toEqual(["b", "c", "d", "a"]);
      expect(again.conversations[0]).toMatchObject({ version: 2n, createdAtUnixMs: BigInt(start + 10), updatedAtUnixMs: BigInt(start + 30) });
      expect(ids(await timed.list(query("", { pageSize: 10, updatedSinceUnixMs: BigInt(start + 20) })))).toEqual(["b", "c", "d"]);
      expect(ids(await timed.list(query("", { pageSize: 10, labels: { team: "x", tier: "1" } })))).toEqual(["c", "a"]);
      const byId = await timed.list({ ...listById(prefix, 10, ""), labels: { team: "x" } });
      expect(ids(byId)).toEqual(["a", "c", "d"]);
      expect((await rejection(timed.list(query(byId.nextPageToken || (await timed.list(listById(prefix, 1, ""))).nextPageToken)))).rawMessage).toMatch(/token of the id order/);
    } finally {
      await timed.close();
    }
  });
  describe("retention", () => {
    /** Resolves once `check` holds, polling; fails after 10 s (no speed is asserted: a TTL's end is awaited, not timed). */
    async function eventually(check: () => Promise<boolean>): Promise<void> {
      for (let attempt = 0; attempt < 200; attempt++) {
        if (await check()) return;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      throw new Error("the condition did not hold within 10 s");
    }
    const ttl = (idleTtlMs: bigint) => delta({ case: "setMetadata", value: { idleTtlMs } });
    const listed = async (where: ConversationStore, prefix: string) => (await where.list(listById(prefix, 100, ""))).conversations;

    it("deletes a conversation whole after an expected-version check: it reads as never written, leaves listings, and starts again at version 1", async () => {
      const prefix = freshId("delete") + "/";
      const id = prefix + "a";
      await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "hi")), delta({ case: "setMetadata", value: { title: "doomed", labels: { k: "v" } } })], "");
      await store.commit(id, 1n, [appendHistory(textMessage("a1", Role.ASSISTANT, "hello"))], "keyed");
      await store.commit(prefix + "b", 0n, [appendHistory(textMessage("u1", Role.USER, "stays"))], "");
      const stale = await rejection(store.delete(id, 1n));
      expect(stale.code).toBe(Code.Aborted);
      expect(stale.rawMessage).toContain("2");
      expect((await store.load(id)).version).toBe(2n);
      expect(await store.delete(id, 2n)).toBe(2n);
      expect(equals(ConversationStateSchema, await store.load(id), create(ConversationStateSchema, { conversationId: id }))).toBe(true);
      expect(await store.currentVersion(id)).toBe(0n);
      expect((await store.readWindow(id, { segment: "history", count: 10, withRest: true })).state.history).toEqual([]);
      expect((await listed(store, prefix)).map((summary) => summary.conversationId)).toEqual([prefix + "b"]);
      expect((await store.list({ ...listById(prefix, 10, ""), order: "updated" })).conversations.map((summary) => summary.conversationId)).toEqual([prefix + "b"]);
      expect(await store.delete(id, undefined)).toBe(0n);
      expect(await store.delete(id, 0n)).toBe(0n);
      // Its idempotency records went with it (conversation-removal.contract.ts).
      // A new conversation under the id: version 1, no change of the old one left to watch.
      expect((await store.commit(id, 0n, [appendHistory(textMessage("n1", Role.USER, "new"))], "")).version).toBe(1n);
      const abort = new AbortController();
      const changes: Change[] = [];
      for await (const change of store.watch(id, 0n, abort.signal)) {
        changes.push(change);
        abort.abort();
      }
      expect(changes.map((change) => [change.version, change.deltas[0]!.operation.case])).toEqual([[1n, "appendMessages"]]);
      expect((await store.load(id)).history.map((message) => message.id)).toEqual(["n1"]);
      expect((await store.load(prefix + "b")).version).toBe(1n);
    });

    it("expires a conversation idle past its own TTL (a versioned delta): reads answer as for one never written, listings leave it out, a commit starts it anew", async () => {
      const prefix = freshId("expire") + "/";
      const id = prefix + "short";
      // Long enough that the listing below still finds it on a loaded machine; the test then waits it out.
      const first = await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "hi")), ttl(1_000n)], "");
      expect(first.state!.idleTtlMs).toBe(1_000n);
      await store.commit(prefix + "long", 0n, [appendHistory(textMessage("u1", Role.USER, "hi")), ttl(600_000n)], "");
      const [long, short] = await listed(store, prefix);
      expect(short!.expiresAtUnixMs).toBe(short!.updatedAtUnixMs + 1_000n);
      expect(long!.expiresAtUnixMs).toBe(long!.updatedAtUnixMs + 600_000n);
      await eventually(async () => (await store.currentVersion(id)) === 0n);
      expect(equals(ConversationStateSchema, await store.load(id), create(ConversationStateSchema, { conversationId: id }))).toBe(true);
      expect((await store.readWindow(id, { segment: "history", count: 10, withRest: false })).state.history).toEqual([]);
      expect((await listed(store, prefix)).map((summary) => summary.conversationId)).toEqual([prefix + "long"]);
      const again = await store.commit(id, 0n, [appendHistory(textMessage("u2", Role.USER, "back"))], "");
      expect(again.version).toBe(1n);
      expect(again.state!.history.map((message) => message.id)).toEqual(["u2"]);
      expect(again.state!.idleTtlMs).toBe(0n);
      // Each commit moves the expiry; -1 (never) takes it away.
      const renewed = await store.commit(prefix + "long", 1n, [appendHistory(textMessage("u2", Role.USER, "again"))], "");
      const summaryOfLong = async () => (await listed(store, prefix)).find((summary) => summary.conversationId === prefix + "long")!;
      expect((await summaryOfLong()).expiresAtUnixMs).toBe((await summaryOfLong()).updatedAtUnixMs + 600_000n);
      await store.commit(prefix + "long", renewed.version, [ttl(-1n)], "");
      expect((await summaryOfLong()).expiresAtUnixMs).toBe(0n);
    });

    it("expires by the tenant's default or override, a conversation's own -1 keeping it", async () => {
      const tenant = freshId("tenant");
      const timed = await open(undefined, { expiry: new ConversationExpiry({ defaultMs: 600_000, perTenant: new Map([[tenant, 300]]) }) });
      try {
        await timed.commit(`${tenant}/brief`, 0n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "");
        await timed.commit(`${tenant}/kept`, 0n, [appendHistory(textMessage("u1", Role.USER, "hi")), ttl(-1n)], "");
        const other = `${freshId("other")}/x`;
        await timed.commit(other, 0n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "");
        const [otherSummary] = await listed(timed, other);
        expect(otherSummary!.expiresAtUnixMs).toBe(otherSummary!.updatedAtUnixMs + 600_000n);
        await eventually(async () => (await timed.currentVersion(`${tenant}/brief`)) === 0n);
        expect((await listed(timed, `${tenant}/`)).map((summary) => [summary.conversationId, summary.expiresAtUnixMs])).toEqual([[`${tenant}/kept`, 0n]]);
        expect((await timed.load(`${tenant}/kept`)).version).toBe(1n);
        await timed.delete(other, undefined);
      } finally {
        await timed.close();
      }
    });

    it("prunes as a commit: versioned, refused at a stale version, seen by Watch, the head replaced by a summary naming what went", async () => {
      const id = freshId("prune");
      const turns = Array.from({ length: 6 }, (_, index) => textMessage(`m${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, `turn ${index}`));
      await store.commit(id, 0n, [appendHistory(...turns)], "");
      const prune = delta({ case: "pruneHistory", value: { maxMessages: 2 } });
      expect((await rejection(store.commit(id, 0n, [prune], ""))).code).toBe(Code.Aborted);
      const pruned = await store.commit(id, 1n, [prune], "prune-key");
      expect(pruned.version).toBe(2n);
      const [summary, ...kept] = pruned.state!.history;
      expect(kept.map((message) => message.id)).toEqual(["m4", "m5"]);
      expect(summary!.provenance?.kind).toMatchObject({ case: "summary", value: { coveredMessageIds: ["m0", "m1", "m2", "m3"] } });
      expect((await store.commit(id, undefined, [prune], "prune-key")).replayed).toBe(true);
      // What another process reads (the memory store is one process: its own reads).
      const fresh = _name === "memory" ? store : await open();
      try {
        expect((await fresh.load(id)).history.map((message) => message.id)).toEqual([summary!.id, "m4", "m5"]);
      } finally {
        if (fresh !== store) await fresh.close();
      }
      const abort = new AbortController();
      for await (const change of store.watch(id, 1n, abort.signal)) {
        expect([change.version, change.deltas[0]!.operation.case]).toEqual([2n, "pruneHistory"]);
        abort.abort();
      }
      await store.commit(id, 2n, [appendHistory(textMessage("m6", Role.USER, "more"))], "");
      expect((await store.load(id)).history.map((message) => message.id)).toEqual([summary!.id, "m4", "m5", "m6"]);
    });
  });
});

describe.each([
  ["redis", () => new RedisConversationStore(redis.url)],
  ["postgres", () => new PostgresConversationStore(postgres.url)],
] as const)("%s store: the id index of a cached state", (_name, open) => {
  it("refuses an id another process appended, names a result after the call another process made, and takes back an id it removed, once the cached copy catches up", async () => {
    const [first, second] = [open(), open()];
    try {
      await Promise.all([first.connected(), second.connected()]);
      const id = freshId("index-two-processes");
      await first.commit(id, undefined, [appendHistory(...Array.from({ length: 2_000 }, (_, index) => textMessage(`h${index}`, Role.USER, "x")))], "");
      await first.commit(id, undefined, [appendHistory(textMessage("t0", Role.USER, "indexed now"))], "");
      const call = (messageId: string, callId: string) =>
        delta({
          case: "appendToolRound",
          value: {
            assistant: create(MessageSchema, { id: `${messageId}-a`, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: callId, name: "f", arguments: { data: "{}" } } } }] }),
            results: [create(MessageSchema, { id: `${messageId}-r`, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, name: "f", payload: { text: "r" } } } }] })],
          },
        });
      await second.commit(id, undefined, [appendHistory(textMessage("z", Role.USER, "from the other")), call("zr", "zc")], "");
      expect((await rejection(first.commit(id, undefined, [appendHistory(textMessage("z", Role.USER, "again"))], ""))).rawMessage).toMatch(/duplicate message id "z"/);
      // The call id set of the cached index caught up: the late result takes the call's name.
      await first.commit(id, undefined, [delta({ case: "appendToolResult", value: { toolCallId: "zc", messageId: "late-r" } })], "");
      expect((await first.load(id)).history.at(-1)!.parts[0]!.kind.value).toMatchObject({ toolCallId: "zc", name: "f" });
      await second.commit(id, undefined, [delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: ["h5"] } })], "");
      await first.commit(id, undefined, [appendHistory(textMessage("h5", Role.USER, "back"))], "");
      expect((await rejection(second.commit(id, undefined, [appendHistory(textMessage("h5", Role.USER, "again"))], ""))).rawMessage).toMatch(/duplicate message id "h5"/);
      expect(Buffer.from(toBinary(ConversationStateSchema, await first.load(id))).equals(toBinary(ConversationStateSchema, await second.load(id)))).toBe(true);
    } finally {
      await first.close();
      await second.close();
    }
  });
});

// What a fresh sidecar's first commit to a long conversation must decide without its history in
// memory (issue 30): whatever a store reads to decide it, the answers are those of a warm one. The
// memory store has no other process: its "fresh" commit is the first one to the conversation
// since it was written, before anything built its id index.
describe.each([
  ["memory", (writer: ConversationStore) => writer],
  ["redis", () => new RedisConversationStore(redis.url)],
  ["redis cluster", () => new RedisConversationStore({ clusterNodes: redisCluster.addresses.slice(0, 1) })],
  ["postgres", () => new PostgresConversationStore(postgres.url)],
  ["redis, encrypted,", () => new RedisConversationStore(redis.url, { values: encrypted, keyPrefix: encryptedKeyPrefix })],
  ["postgres, encrypted,", () => new PostgresConversationStore(encryptedPostgresUrl, { values: encrypted })],
] as const)("%s store: a commit from a process with nothing cached", (name, openFresh) => {
  const openWriter = (): ConversationStore => (name === "memory" ? new MemoryConversationStore() : (openFresh as () => ConversationStore)());
  const connected = async (store: ConversationStore) => {
    if (store instanceof RedisConversationStore || store instanceof PostgresConversationStore) expect(await store.connected()).toBe(true);
  };

  it("refuses a duplicate id naming it, takes a new one, and answers a tool result for a call far in the head, as a warm store does", async () => {
    const writer = openWriter();
    await connected(writer);
    const stores: ConversationStore[] = [writer];
    const fresh = () => {
      const store = (openFresh as (writer: ConversationStore) => ConversationStore)(writer);
      if (!stores.includes(store)) stores.push(store);
      return store;
    };
    try {
      const id = freshId("cold-commit");
      const headCall = create(MessageSchema, { id: "head-a", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "head-call", name: "lookup", arguments: { data: "{}" } } } }] });
      const head = [textMessage("h0", Role.USER, "start"), headCall];
      const body = Array.from({ length: 3_000 }, (_, index) => textMessage(`h${index + 1}`, Role.USER, `message ${index + 1}`));
      await writer.commit(id, undefined, [appendHistory(...head, ...body)], "");

      const first = fresh();
      await connected(first);
      const duplicate = await rejection(first.commit(id, 1n, [appendHistory(textMessage("h7", Role.USER, "again"))], ""));
      expect(duplicate.code).toBe(Code.InvalidArgument);
      expect(duplicate.rawMessage).toMatch(/duplicate message id "h7"/);
      expect(await writer.currentVersion(id)).toBe(1n);

      const second = fresh();
      await connected(second);
      const added = await second.commit(id, 1n, [appendHistory(textMessage("new-1", Role.USER, "new"))], "");
      expect(added.version).toBe(2n);
      expect(added.state!.history.at(-1)!.id).toBe("new-1");

      // The result answers the call 3,000 messages back: it takes the call's name from the head.
      const third = fresh();
      await connected(third);
      const answered = await third.commit(id, 2n, [delta({ case: "appendToolResult", value: { toolCallId: "head-call", messageId: "head-r", payload: { text: "found" } } })], "");
      expect(answered.version).toBe(3n);
      expect(answered.state!.history.at(-1)!.parts[0]!.kind.value).toMatchObject({ toolCallId: "head-call", name: "lookup" });

      // What every process reads back is one state, the one the last commit returned.
      const reread = fresh();
      await connected(reread);
      const stored = await reread.load(id);
      expect(stored.history.length).toBe(head.length + body.length + 2);
      expect(Buffer.from(toBinary(ConversationStateSchema, stored)).equals(toBinary(ConversationStateSchema, answered.state!))).toBe(true);
      expect(Buffer.from(toBinary(ConversationStateSchema, await writer.load(id))).equals(toBinary(ConversationStateSchema, stored))).toBe(true);
    } finally {
      await Promise.all(stores.map((store) => store.close()));
    }
  }, 60_000);

  // Without the state asked for, the Redis and Postgres stores plan an append on the stored tail and
  // their id index (store/tail-commit.ts); every answer is compared with a warm memory store's to the same
  // batches, and the states read back at the end are byte for byte the same.
  it("without the state asked for: answers duplicates, repeated and unknown call ids, results for calls in the head, and commits after another process's, as a warm store does", async () => {
    const writer = openWriter();
    await connected(writer);
    const stores: ConversationStore[] = [writer];
    const reference = new MemoryConversationStore();
    const tailPlanned = name !== "memory";
    const call = (id: string, name: string) => ({ kind: { case: "toolCall" as const, value: { id, name, arguments: { data: "{}" } } } });
    const result = (messageId: string, toolCallId: string, name = "") => delta({ case: "appendToolResult", value: { toolCallId, name, messageId, payload: { text: "done" } } });
    try {
      const id = freshId("cold-tail");
      const head = [
        textMessage("h0", Role.USER, "start"),
        create(MessageSchema, { id: "head-a", role: Role.ASSISTANT, parts: [call("c0", "lookup"), call("c1", "first-c1")] }),
        create(MessageSchema, { id: "head-r0", role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: "c0", name: "lookup", payload: { text: "x" } } } }] }),
        create(MessageSchema, { id: "head-r1", role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: "c1", name: "first-c1", payload: { text: "y" } } } }] }),
      ];
      const body = Array.from({ length: 3_000 }, (_, index) => textMessage(`h${index + 1}`, Role.USER, `message ${index + 1}`));
      for (const store of [writer, reference]) await store.commit(id, undefined, [appendHistory(...head, ...body)], "");
      let tailCommits = 0;
      /** The batch committed by a process with nothing cached and by the warm reference: the same outcome or the same error. */
      const bothCommit = async (deltas: Delta[], expectedVersion?: bigint) => {
        const fresh = (openFresh as (writer: ConversationStore) => ConversationStore)(writer);
        if (!stores.includes(fresh)) stores.push(fresh);
        await connected(fresh);
        const before = "tailCommits" in fresh ? (fresh.tailCommits as number) : 0;
        const [cold, warm] = await Promise.allSettled([
          fresh.commit(id, expectedVersion, deltas, "", undefined, undefined, { withState: false }),
          reference.commit(id, expectedVersion, deltas, ""),
        ]);
        if (warm.status === "rejected") {
          expect(cold.status, String(warm.reason)).toBe("rejected");
          const [coldError, warmError] = [cold, warm].map((settled) => (settled as PromiseRejectedResult).reason as ConnectError);
          expect([coldError!.code, coldError!.rawMessage]).toEqual([warmError!.code, warmError!.rawMessage]);
          return warmError!;
        }
        expect(cold.status, cold.status === "rejected" ? String(cold.reason) : "").toBe("fulfilled");
        expect((cold as PromiseFulfilledResult<{ version: bigint }>).value.version).toBe(warm.value.version);
        const after = "tailCommits" in fresh ? (fresh.tailCommits as number) : 0;
        tailCommits += after - before;
        return undefined;
      };
      expect((await bothCommit([appendHistory(textMessage("h7", Role.USER, "again"))]))?.rawMessage).toMatch(/duplicate message id "h7"/);
      expect((await bothCommit([appendHistory(textMessage("head-r1", Role.USER, "again"))]))?.rawMessage).toMatch(/duplicate message id "head-r1"/);
      // One round may not make a call id twice; a later round may reuse one of an earlier round.
      const repeated = create(MessageSchema, { id: "r-dup", role: Role.ASSISTANT, parts: [call("d", "one"), call("d", "two")] });
      expect((await bothCommit([delta({ case: "appendToolRound", value: { assistant: repeated, results: [] } })]))?.code).toBe(Code.InvalidArgument);
      expect(await bothCommit([appendHistory(create(MessageSchema, { id: "r1", role: Role.ASSISTANT, parts: [call("c1", "second-c1")] }))])).toBeUndefined();
      // A result for a call never made is stored nameless; for c1 it is the latest round's name, for c0 the head's.
      expect(await bothCommit([result("res-unknown", "never-made")])).toBeUndefined();
      expect(await bothCommit([result("res-c1", "c1")])).toBeUndefined();
      expect(await bothCommit([result("res-c0", "c0")])).toBeUndefined();
      // Another process commits; a cold one then sees its ids and its version.
      for (const store of [writer, reference]) await store.commit(id, undefined, [appendHistory(textMessage("w1", Role.USER, "w1"), textMessage("w2", Role.USER, "w2"))], "");
      expect((await bothCommit([appendHistory(textMessage("w2", Role.USER, "again"))]))?.rawMessage).toMatch(/duplicate message id "w2"/);
      expect((await bothCommit([appendHistory(textMessage("late", Role.USER, "late"))], 3n))?.code).toBe(Code.Aborted);
      expect(await bothCommit([appendHistory(textMessage("w3", Role.USER, "w3"))], await reference.currentVersion(id))).toBeUndefined();
      // A duplicate within the batch, and one of a message the same batch appended.
      expect((await bothCommit([appendHistory(textMessage("b1", Role.USER, "b")), appendHistory(textMessage("b1", Role.USER, "b"))]))?.code).toBe(Code.InvalidArgument);

      const stored = await reference.load(id);
      expect(stored.history.filter((message) => message.role === Role.TOOL).slice(-3).map((message) => (message.parts[0]!.kind.value as { name: string }).name)).toEqual(["", "second-c1", "lookup"]);
      const reread = (openFresh as (writer: ConversationStore) => ConversationStore)(writer);
      if (!stores.includes(reread)) stores.push(reread);
      await connected(reread);
      expect(Buffer.from(toBinary(ConversationStateSchema, await reread.load(id))).equals(toBinary(ConversationStateSchema, stored))).toBe(true);
      expect(tailCommits).toBe(tailPlanned ? 5 : 0);
      // A plan on the tail logs the undo of the whole stored history, not of the tail it planned on:
      // every version reads back through the undos as the warm reference committed it.
      const current = await reference.currentVersion(id);
      const logged: Change[] = [];
      const controller = new AbortController();
      for await (const change of reread.watch(id, 1n, controller.signal)) {
        logged.push(change);
        if (change.version === current) controller.abort();
      }
      expect(logged.map((change) => change.undo !== undefined && change.undo.notUndoable === "")).toEqual(logged.map(() => true));
      for (let version = 1n; version < current; version++) {
        expect(Buffer.from(toBinary(ConversationStateSchema, await reread.loadAt(id, version))).equals(toBinary(ConversationStateSchema, await reference.loadAt(id, version))), `version ${version}`).toBe(true);
      }
    } finally {
      await Promise.all([...stores, reference].map((store) => store.close()));
    }
  }, 60_000);
});

// A sidecar that committed on the stored tail keeps that tail at the version it wrote
// (store/kept-tails.ts), so its next commit to the conversation is the write alone; a kept tail
// another process's commit made stale costs the usual tail read. Every answer is compared with a
// warm memory store's to the same batches, and the states read back with its state byte for byte.
// The memory store holds the whole state: its commits read nothing and plan on no tail.
describe.each([
  ["memory", (writer: ConversationStore) => writer],
  ["redis", () => new RedisConversationStore(redis.url)],
  ["redis cluster", () => new RedisConversationStore({ clusterNodes: redisCluster.addresses.slice(0, 1) })],
  ["postgres", () => new PostgresConversationStore(postgres.url)],
  ["redis, encrypted,", () => new RedisConversationStore(redis.url, { values: encrypted, keyPrefix: encryptedKeyPrefix })],
  ["postgres, encrypted,", () => new PostgresConversationStore(encryptedPostgresUrl, { values: encrypted })],
] as const)("%s store: a process that committed on the stored tail", (name, openCold) => {
  const tailPlanned = name !== "memory";
  const openWriter = (): ConversationStore => (name === "memory" ? new MemoryConversationStore() : (openCold as () => ConversationStore)());
  const connected = async (store: ConversationStore) => {
    if (store instanceof RedisConversationStore || store instanceof PostgresConversationStore) expect(await store.connected()).toBe(true);
  };
  const traffic = (store: ConversationStore) => (store as MemoryConversationStore).commitTraffic;
  const call = (id: string, callName: string) => ({ kind: { case: "toolCall" as const, value: { id, name: callName, arguments: { data: "{}" } } } });
  const result = (messageId: string, toolCallId: string) => delta({ case: "appendToolResult", value: { toolCallId, messageId, payload: { text: "done" } } });

  /** A conversation of `size` messages (a call "c0" at its start) in `writer` and `reference`, and a process that holds nothing of it. */
  const setUp = async (size: number) => {
    const writer = openWriter();
    await connected(writer);
    const reference = new MemoryConversationStore();
    const id = freshId("kept-tail");
    const head = [textMessage("h0", Role.USER, "start"), create(MessageSchema, { id: "head-a", role: Role.ASSISTANT, parts: [call("c0", "lookup")] })];
    const body = Array.from({ length: size }, (_, index) => textMessage(`h${index + 1}`, Role.USER, `message ${index + 1}`));
    for (const store of [writer, reference]) await store.commit(id, undefined, [appendHistory(...head, ...body)], "");
    const cold = (openCold as (writer: ConversationStore) => ConversationStore)(writer);
    await connected(cold);
    /** `deltas` committed by the cold process and by the warm reference: the same outcome or the same error; what the cold commit read. */
    const bothCommit = async (deltas: Delta[], expectedVersion?: bigint, key = "") => {
      const before = traffic(cold);
      const [coldOutcome, warm] = await Promise.allSettled([
        cold.commit(id, expectedVersion, deltas, key, undefined, undefined, { withState: false }),
        reference.commit(id, expectedVersion, deltas, key),
      ]);
      const after = traffic(cold);
      const read = { tailReads: after.tailReads - before.tailReads, wholeReads: after.wholeReads - before.wholeReads, kept: after.keptTailCommits - before.keptTailCommits };
      if (warm.status === "rejected") {
        expect(coldOutcome.status, String(warm.reason)).toBe("rejected");
        const [coldError, warmError] = [coldOutcome, warm].map((settled) => (settled as PromiseRejectedResult).reason as ConnectError);
        expect([coldError!.code, coldError!.rawMessage]).toEqual([warmError!.code, warmError!.rawMessage]);
        return { error: warmError!, ...read };
      }
      expect(coldOutcome.status, coldOutcome.status === "rejected" ? String(coldOutcome.reason) : "").toBe("fulfilled");
      const outcome = (coldOutcome as PromiseFulfilledResult<{ version: bigint; replayed: boolean }>).value;
      expect([outcome.version, outcome.replayed]).toEqual([warm.value.version, warm.value.replayed]);
      return { error: undefined, ...read };
    };
    /** The conversation as the reference holds it, compared with what a process that holds nothing reads. */
    const sameStates = async () => {
      const reread = (openCold as (writer: ConversationStore) => ConversationStore)(writer);
      await connected(reread);
      try {
        const stored = await reference.load(id);
        expect(Buffer.from(toBinary(ConversationStateSchema, await reread.load(id))).equals(toBinary(ConversationStateSchema, stored))).toBe(true);
        return stored;
      } finally {
        if (reread !== writer) await reread.close();
      }
    };
    const close = () => Promise.all([...new Set([writer, cold, reference])].map((store) => store.close()));
    return { writer, reference, cold, id, bothCommit, sameStates, close };
  };
  /**
   * What a commit read: tail reads, whole reads, and whether it was planned on a kept tail. The
   * memory store reads its own state in process (no round trip) and plans on no tail.
   */
  const reads = (tailReads: number, wholeReads: number, kept: number) => (tailPlanned ? { tailReads, wholeReads, kept } : { tailReads: 0, kept: 0 });
  const readsOf = ({ tailReads, wholeReads, kept }: { tailReads: number; wholeReads: number; kept: number }) => (tailPlanned ? { tailReads, wholeReads, kept } : { tailReads, kept });

  it("plans its next commits on the kept tail with no read, trims it, and answers and stores what a warm store does", async () => {
    const { cold, id, reference, bothCommit, sameStates, close } = await setUp(3_000);
    try {
      // The first commit reads the tail; the next ones read nothing.
      expect(readsOf(await bothCommit([appendHistory(textMessage("k1", Role.USER, "one"))]))).toEqual(reads(1, 0, 0));
      expect(readsOf(await bothCommit([appendHistory(textMessage("k2", Role.USER, "two"))]))).toEqual(reads(0, 0, 1));
      expect(readsOf(await bothCommit([appendHistory(create(MessageSchema, { id: "k3-a", role: Role.ASSISTANT, parts: [call("k3", "search")] }))]))).toEqual(reads(0, 0, 1));
      // A result for the call the kept tail holds takes its name from it.
      expect(readsOf(await bothCommit([result("k3-r", "k3")], 4n))).toEqual(reads(0, 0, 1));
      // Another expected version: refused after a tail read, which it keeps.
      const late = await bothCommit([appendHistory(textMessage("late", Role.USER, "late"))], 2n);
      expect([late.error?.code, readsOf(late)]).toEqual([Code.Aborted, reads(1, 0, 0)]);
      // 300 messages in one batch: the kept tail is trimmed back to about what a tail read holds.
      const many = Array.from({ length: 300 }, (_, index) => textMessage(`m${index}`, Role.USER, `many ${index}`));
      expect(readsOf(await bothCommit([appendHistory(...many)]))).toEqual(reads(0, 0, 1));
      if (tailPlanned) {
        const kept = (cold as RedisConversationStore).keptTails;
        expect(kept.count).toBe(1);
        // At most twice the 64 messages a tail read asks for, each weighed at 640 bytes and more.
        expect(kept.bytes).toBeGreaterThan(64 * 640);
        expect(kept.bytes).toBeLessThan(2 * 64 * 1_000);
      }
      // A result for the call in the head: the kept tail does not know its name, so the tail is read (with the call index).
      expect(readsOf(await bothCommit([result("c0-r", "c0")]))).toEqual(reads(1, 0, 0));
      expect(readsOf(await bothCommit([appendHistory(textMessage("k4", Role.USER, "four"))]))).toEqual(reads(0, 0, 1));
      // The same key again: answered from the key's record (the plan on the kept tail refuses k5,
      // which it holds, so the tail is read with the record); another batch under it is refused.
      expect(readsOf(await bothCommit([appendHistory(textMessage("k5", Role.USER, "five"))], undefined, "key-5"))).toEqual(reads(0, 0, 1));
      const again = await bothCommit([appendHistory(textMessage("k5", Role.USER, "five"))], undefined, "key-5");
      expect([again.error, readsOf(again)]).toEqual([undefined, reads(1, 0, 0)]);
      // Under the key, a batch the kept tail can plan: the write answers from the record first.
      const reused = await bothCommit([appendHistory(textMessage("k6", Role.USER, "other"))], undefined, "key-5");
      expect([reused.error?.code, readsOf(reused)]).toEqual([Code.InvalidArgument, reads(0, 0, 0)]);
      // Errors are the warm store's: a duplicate of a kept message, of one in the head, an invalid round.
      expect((await bothCommit([appendHistory(textMessage("k2", Role.USER, "again"))])).error?.rawMessage).toMatch(/duplicate message id "k2"/);
      expect((await bothCommit([appendHistory(textMessage("h7", Role.USER, "again"))])).error?.rawMessage).toMatch(/duplicate message id "h7"/);
      const stored = await sameStates();
      expect(stored.history.length).toBe(3_002 + 1 + 1 + 2 + 300 + 1 + 1 + 1);
      expect(stored.version).toBe(await reference.currentVersion(id));
    } finally {
      await close();
    }
  }, 60_000);

  it("falls back to the usual tail read when another process committed after the kept tail: nothing lost or doubled", async () => {
    const { writer, reference, id, bothCommit, sameStates, close } = await setUp(500);
    try {
      expect(readsOf(await bothCommit([appendHistory(textMessage("k1", Role.USER, "one"))]))).toEqual(reads(1, 0, 0));
      expect(readsOf(await bothCommit([appendHistory(textMessage("k2", Role.USER, "two"))]))).toEqual(reads(0, 0, 1));
      // Another sidecar commits: the kept tail is one version behind.
      for (const store of [writer, reference]) await store.commit(id, undefined, [appendHistory(textMessage("w1", Role.USER, "w1"))], "");
      // Without an expected version: the write on the kept tail is refused, the tail read again, written.
      expect(readsOf(await bothCommit([appendHistory(textMessage("k3", Role.USER, "three"))]))).toEqual(reads(1, 0, 0));
      // Others wrote after its kept tail: the next commit reads first (as from a contended copy), finds it current ...
      expect(readsOf(await bothCommit([appendHistory(textMessage("k4", Role.USER, "four"))]))).toEqual(reads(1, 0, 0));
      // ... so the one after goes back to the kept tail unread.
      expect(readsOf(await bothCommit([appendHistory(textMessage("k5", Role.USER, "five"))]))).toEqual(reads(0, 0, 1));
      // The other sidecar's message is now in the kept tail: a duplicate of it is refused as it is warm.
      expect((await bothCommit([appendHistory(textMessage("w1", Role.USER, "again"))])).error?.rawMessage).toMatch(/duplicate message id "w1"/);
      // ... which read the whole state: a fresh start for the rest.
      for (const store of [writer, reference]) await store.commit(id, undefined, [appendHistory(textMessage("w2", Role.USER, "w2"))], "");
      const stored = await sameStates();
      const ids = stored.history.map((message) => message.id);
      expect(ids.slice(-7)).toEqual(["k1", "k2", "w1", "k3", "k4", "k5", "w2"]);
      expect(new Set(ids).size).toBe(ids.length);
    } finally {
      await close();
    }
  }, 60_000);

  it("taking turns with another such process (round-robin): after one refused write each, every commit is one tail read and one write", async () => {
    const { writer, id, cold, reference, bothCommit, sameStates, close } = await setUp(500);
    const other = (openCold as (writer: ConversationStore) => ConversationStore)(writer);
    await connected(other);
    try {
      const roundTrips = async (store: ConversationStore, messageId: string) => {
        const before = traffic(store);
        // The other process's commit, to the reference too (bothCommit commits through `cold`).
        const [outcome, warm] = await Promise.all([
          store.commit(id, undefined, [appendHistory(textMessage(messageId, Role.USER, messageId))], "", undefined, undefined, { withState: false }),
          reference.commit(id, undefined, [appendHistory(textMessage(messageId, Role.USER, messageId))], ""),
        ]);
        expect(outcome.version).toBe(warm.version);
        const after = traffic(store);
        return { tailReads: after.tailReads - before.tailReads, wholeReads: after.wholeReads - before.wholeReads, writes: after.writes - before.writes };
      };
      const turn = async (index: number) => {
        if (index % 2 === 1) return roundTrips(other, `t${index}`);
        const before = traffic(cold);
        expect((await bothCommit([appendHistory(textMessage(`t${index}`, Role.USER, `t${index}`))])).error).toBeUndefined();
        const after = traffic(cold);
        return { tailReads: after.tailReads - before.tailReads, wholeReads: after.wholeReads - before.wholeReads, writes: after.writes - before.writes };
      };
      const trips = [];
      for (let index = 0; index < 10; index++) trips.push(await turn(index));
      if (tailPlanned) {
        // Each process's first commit reads the tail; its second tries its kept tail, is refused, reads, writes.
        expect(trips.slice(0, 4)).toEqual([{ tailReads: 1, wholeReads: 0, writes: 1 }, { tailReads: 1, wholeReads: 0, writes: 1 }, { tailReads: 1, wholeReads: 0, writes: 2 }, { tailReads: 1, wholeReads: 0, writes: 2 }]);
        // From then on no refused write: a kept tail others wrote after is read first.
        expect(trips.slice(4)).toEqual(Array.from({ length: 6 }, () => ({ tailReads: 1, wholeReads: 0, writes: 1 })));
      }
      const ids = (await sameStates()).history.map((message) => message.id);
      expect(ids.slice(-10)).toEqual(Array.from({ length: 10 }, (_, index) => `t${index}`));
      expect(new Set(ids).size).toBe(ids.length);
    } finally {
      if (other !== writer) await other.close();
      await close();
    }
  }, 60_000);

  it("with the expected version of its kept tail after another process moved on, is refused as a warm store is, and commits at the current version", async () => {
    const { writer, reference, id, bothCommit, sameStates, close } = await setUp(500);
    try {
      expect(readsOf(await bothCommit([appendHistory(textMessage("k1", Role.USER, "one"))]))).toEqual(reads(1, 0, 0));
      for (const store of [writer, reference]) await store.commit(id, undefined, [appendHistory(textMessage("w1", Role.USER, "w1"))], "");
      // The kept tail is at version 2, the stored conversation at 3: the write refuses, the tail read names the current version.
      const stale = await bothCommit([appendHistory(textMessage("k2", Role.USER, "two"))], 2n);
      expect([stale.error?.code, readsOf(stale)]).toEqual([Code.Aborted, reads(1, 0, 0)]);
      // That read is kept: the commit at the current version reads nothing.
      expect(readsOf(await bothCommit([appendHistory(textMessage("k2", Role.USER, "two"))], 3n))).toEqual(reads(0, 0, 1));
      // A key the other process used: answered from its record, as the warm store does.
      for (const store of [writer, reference]) await store.commit(id, undefined, [appendHistory(textMessage("w2", Role.USER, "w2"))], "key-w");
      const replay = await bothCommit([appendHistory(textMessage("w2", Role.USER, "w2"))], undefined, "key-w");
      expect(replay.error).toBeUndefined();
      const ids = (await sameStates()).history.map((message) => message.id);
      expect(ids.slice(-4)).toEqual(["k1", "w1", "k2", "w2"]);
      expect(new Set(ids).size).toBe(ids.length);
    } finally {
      await close();
    }
  }, 60_000);
});

// A conversation stored before the id index existed (or last written by a sidecar that did not
// keep it) has none, or one behind its version: the first commit planned on its tail finds that,
// plans on the whole state and writes the whole index with it, once; the next cold commits plan
// on the tail again (docs/stores.md, "The stored id index").
describe.each([
  ["redis", (options?: RedisStoreOptions) => new RedisConversationStore(redis.url, options), () => new Redis(redis.url)],
  ["redis cluster", (options?: RedisStoreOptions) => new RedisConversationStore({ clusterNodes: redisCluster.addresses.slice(0, 1) }, options), () => new Cluster([{ host: "127.0.0.1", port: Number(redisCluster.addresses[0]!.split(":").at(-1)) }])],
] as const)("%s store: the id index of a conversation stored without one", (_name, open, openRaw) => {
  it("is built by the first cold commit, and answers the cold commits after it", async () => {
    const writer = open();
    const raw = openRaw();
    const stores: ConversationStore[] = [writer];
    const fresh = async () => {
      const store = open();
      stores.push(store);
      await store.connected();
      return store;
    };
    try {
      await writer.connected();
      const id = freshId("pre-index");
      const keys = conversationKeys("contextd", id);
      const assistant = create(MessageSchema, { id: "head-a", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "c0", name: "lookup", arguments: { data: "{}" } } } }] });
      const body = Array.from({ length: 2_000 }, (_, index) => textMessage(`h${index}`, Role.USER, `message ${index}`));
      await writer.commit(id, undefined, [appendHistory(assistant, ...body)], "");
      // The index per list (the history's: its 2,001 ids and the call c0, at position 0).
      const index = async () => [await raw.hget(keys.header, "list_ids_at"), await raw.hlen(keys.segmentIds[1]!), await raw.hget(keys.segmentCalls[1]!, "c0")];
      expect(await index()).toEqual(["1", 2_001, "0:6:lookup"]);
      // As stored before the index: no index keys, no list_ids_at.
      for (const key of [...keys.segmentIds, ...keys.segmentCalls]) await raw.del(key);
      await raw.hdel(keys.header, "list_ids_at");

      const first = await fresh();
      expect((await first.commit(id, undefined, [appendHistory(textMessage("n1", Role.USER, "new"))], "", undefined, undefined, { withState: false })).version).toBe(2n);
      expect(first.tailCommits).toBe(0);
      expect(await index()).toEqual(["2", 2_002, "0:6:lookup"]);

      // An index behind the version (a commit that did not keep it): built again the same way.
      await raw.hset(keys.header, "list_ids_at", "1");
      const second = await fresh();
      const duplicate = await rejection(second.commit(id, undefined, [appendHistory(textMessage("h5", Role.USER, "again"))], "", undefined, undefined, { withState: false }));
      expect([duplicate.code, duplicate.rawMessage]).toEqual([Code.InvalidArgument, 'deltas[0].append_messages: messages[0]: duplicate message id "h5"']);
      expect((await second.commit(id, undefined, [appendHistory(textMessage("n2", Role.USER, "new"))], "", undefined, undefined, { withState: false })).version).toBe(3n);
      expect(await raw.hget(keys.header, "list_ids_at")).toBe("3");

      const third = await fresh();
      expect((await rejection(third.commit(id, undefined, [appendHistory(textMessage("h9", Role.USER, "again"))], "", undefined, undefined, { withState: false }))).rawMessage).toMatch(/duplicate message id "h9"/);
      // The refusal read the whole state (the write found the id taken): that process now holds a copy.
      const fourth = await fresh();
      await fourth.commit(id, undefined, [delta({ case: "appendToolResult", value: { toolCallId: "c0", messageId: "r0", payload: { text: "found" } } })], "", undefined, undefined, { withState: false });
      expect([third.tailCommits, fourth.tailCommits]).toEqual([0, 1]);
      const stored = await (await fresh()).load(id);
      expect(stored.history.at(-1)!.parts[0]!.kind.value).toMatchObject({ toolCallId: "c0", name: "lookup" });
      expect(stored.history.map((message) => message.id).slice(-3)).toEqual(["n1", "n2", "r0"]);
    } finally {
      raw.disconnect();
      await Promise.all(stores.map((store) => store.close()));
    }
  }, 60_000);

  it("gives a message without an id the id a warm store gives it, also when the first id drawn is taken", async () => {
    const counter = () => {
      let next = 0;
      return { newMessageId: () => `g${next++}` };
    };
    const writer = open();
    const reference = new MemoryConversationStore({ deltaContext: counter() });
    const cold = open({ deltaContext: counter() });
    try {
      await Promise.all([writer.connected(), cold.connected()]);
      const id = freshId("drawn-ids");
      // g0 is taken: a warm store's plan from its copy is refused and planned again on a read
      // (drawing g1); the tail plan's write is refused and planned again on the whole state (g1 too).
      const history = [textMessage("g0", Role.USER, "taken"), ...Array.from({ length: 100 }, (_, index) => textMessage(`h${index}`, Role.USER, `m${index}`))];
      for (const store of [writer, reference]) await store.commit(id, undefined, [appendHistory(...history)], "");
      const batch = [appendHistory(textMessage("", Role.USER, "no id"))];
      const [warm, tail] = await Promise.all([reference.commit(id, undefined, batch, ""), cold.commit(id, undefined, batch, "", undefined, undefined, { withState: false })]);
      expect(tail.version).toBe(warm.version);
      const [warmIds, coldIds] = await Promise.all([reference.load(id), writer.load(id)]).then((states) => states.map((state) => state.history.map((message) => message.id)));
      expect(coldIds).toEqual(warmIds);
      expect(warmIds.at(-1)).toBe("g1");
      // The write refused the tail plan (g0 taken): planned on the whole state.
      expect(cold.tailCommits).toBe(0);
    } finally {
      await Promise.all([writer.close(), reference.close(), cold.close()]);
    }
  }, 60_000);
});

// The same on Postgres (migration 11): a conversation stored before the migration has ids_at 0 and
// no index rows; one last written by a sidecar of the previous release (contextd_commit_expiring)
// has ids_at behind its version. Deleting the conversation deletes its index rows.
describe("postgres store: the id index of a conversation stored without one", () => {
  it("is built by the first cold commit, answers the cold commits after it, and goes with the conversation", async () => {
    const writer = new PostgresConversationStore(postgres.url);
    const raw = new pg.Client({ connectionString: postgres.url });
    const stores: PostgresConversationStore[] = [writer];
    const fresh = async () => {
      const store = new PostgresConversationStore(postgres.url);
      stores.push(store);
      expect(await store.connected()).toBe(true);
      return store;
    };
    const indexOf = async (id: string) => {
      const key = Buffer.from(id, "utf8");
      const { rows } = await raw.query<{ ids_at: string | null; ids: string; lookup: Buffer | null }>(
        `SELECT (SELECT ids_at FROM contextd_conversations WHERE id = $1) AS ids_at,
                (SELECT count(*) FROM contextd_indexed_ids($1)) AS ids,
                (SELECT name FROM contextd_indexed_calls($1) WHERE call_id = $2) AS lookup`,
        [key, Buffer.from("c0", "utf8")],
      );
      return [rows[0]!.ids_at, Number(rows[0]!.ids), rows[0]!.lookup?.toString("utf8") ?? null];
    };
    try {
      expect(await writer.connected()).toBe(true);
      await raw.connect();
      const id = freshId("pre-index");
      const key = Buffer.from(id, "utf8");
      const assistant = create(MessageSchema, { id: "head-a", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "c0", name: "lookup", arguments: { data: "{}" } } } }] });
      const body = Array.from({ length: 2_000 }, (_, index) => textMessage(`h${index}`, Role.USER, `message ${index}`));
      await writer.commit(id, undefined, [appendHistory(assistant, ...body)], "");
      expect(await indexOf(id)).toEqual(["1", 2_001, "lookup"]);
      // As stored before migration 11: no index rows, ids_at 0.
      await raw.query("DELETE FROM contextd_stored_ids WHERE storage = $1", [key]);
      await raw.query("DELETE FROM contextd_stored_calls WHERE storage = $1", [key]);
      await raw.query("UPDATE contextd_conversations SET ids_at = 0 WHERE id = $1", [key]);

      const first = await fresh();
      expect((await first.commit(id, undefined, [appendHistory(textMessage("n1", Role.USER, "new"))], "", undefined, undefined, { withState: false })).version).toBe(2n);
      expect(first.tailCommits).toBe(0);
      expect(await indexOf(id)).toEqual(["2", 2_002, "lookup"]);

      // An index behind the version (a previous release's commit): built again the same way.
      await raw.query("UPDATE contextd_conversations SET ids_at = 1 WHERE id = $1", [key]);
      const second = await fresh();
      const duplicate = await rejection(second.commit(id, undefined, [appendHistory(textMessage("h5", Role.USER, "again"))], "", undefined, undefined, { withState: false }));
      expect([duplicate.code, duplicate.rawMessage]).toEqual([Code.InvalidArgument, 'deltas[0].append_messages: messages[0]: duplicate message id "h5"']);
      expect((await second.commit(id, undefined, [appendHistory(textMessage("n2", Role.USER, "new"))], "", undefined, undefined, { withState: false })).version).toBe(3n);
      expect(await indexOf(id)).toEqual(["3", 2_003, "lookup"]);

      const third = await fresh();
      expect((await rejection(third.commit(id, undefined, [appendHistory(textMessage("h9", Role.USER, "again"))], "", undefined, undefined, { withState: false }))).rawMessage).toMatch(/duplicate message id "h9"/);
      const fourth = await fresh();
      await fourth.commit(id, undefined, [delta({ case: "appendToolResult", value: { toolCallId: "c0", messageId: "r0", payload: { text: "found" } } })], "", undefined, undefined, { withState: false });
      expect([third.tailCommits, fourth.tailCommits]).toEqual([0, 1]);
      expect(await indexOf(id)).toEqual(["4", 2_004, "lookup"]);
      const stored = await (await fresh()).load(id);
      expect(stored.history.at(-1)!.parts[0]!.kind.value).toMatchObject({ toolCallId: "c0", name: "lookup" });
      expect(stored.history.map((message) => message.id).slice(-3)).toEqual(["n1", "n2", "r0"]);

      expect(await writer.delete(id, undefined)).toBe(4n);
      expect(await indexOf(id)).toEqual([null, 0, null]);
    } finally {
      await raw.end();
      await Promise.all(stores.map((store) => store.close()));
    }
  }, 60_000);
});

describe.each([
  ["redis", () => new RedisConversationStore(redis.url)],
  ["redis cluster", () => new RedisConversationStore({ clusterNodes: redisCluster.addresses.slice(0, 1) })],
  ["postgres", () => new PostgresConversationStore(postgres.url)],
  ["redis, encrypted,", () => new RedisConversationStore(redis.url, { values: encrypted, keyPrefix: encryptedKeyPrefix })],
  ["postgres, encrypted,", () => new PostgresConversationStore(encryptedPostgresUrl, { values: encrypted })],
] as const)("%s store: windows read by a process without a cached copy", (_name, open) => {
  it("after each of 120 random edits (compactions and replaces included) a fresh process's windows are the writer's slices", async () => {
    const [writer, reader] = [open(), open()];
    try {
      await Promise.all([writer.connected(), reader.connected()]);
      const id = freshId("window-random");
      const random = randomSource(77);
      const edits = randomEdits(random);
      let state = await writer.load(id);
      for (let step = 0; step < 120; step++) {
        const deltas = edits(state);
        if (deltas === undefined) continue;
        state = (await writer.commit(id, state.version, deltas, "")).state!;
        const segment = (["history", "history", "system", "tools"] as const)[step % 4]!;
        const length = state[segment].length;
        const end = random() < 0.5 ? undefined : Math.floor(random() * (length + 3));
        const count = Math.floor(random() * 12);
        const withRest = random() < 0.5;
        // A fresh store each time: nothing cached, every window read from the database.
        const fresh = open();
        try {
          await fresh.connected();
          const window = await fresh.readWindow(id, { segment, end, count, withRest });
          const stop = end === undefined ? length : Math.min(end, length);
          const start = Math.max(0, stop - count);
          const where = `step ${step}: ${segment} end ${end} count ${count} withRest ${withRest}`;
          expect([window.state.version, window.start, window.length], where).toEqual([state.version, start, length]);
          expect(toBinary(ConversationStateSchema, { ...state, [segment]: state[segment].slice(start, stop) }), where).toEqual(
            toBinary(ConversationStateSchema, withRest ? window.state : { ...state, ...Object.fromEntries(["system", "history", "memory", "tools"].map((name) => [name, name === segment ? window.state[segment] : state[name as "system"]])) }),
          );
          // Without the rest, nothing but the window's segment.
          if (!withRest) for (const other of ["system", "history", "memory", "tools"] as const) if (other !== segment) expect(window.state[other], where).toEqual([]);
        } finally {
          await fresh.close();
        }
        // The reader keeps a cached copy: its windows come from it once it is current.
        await reader.load(id);
        const cachedWindow = await reader.readWindow(id, { segment, end, count, withRest: true });
        expect(toBinary(ConversationStateSchema, { ...cachedWindow.state, [segment]: state[segment] })).toEqual(toBinary(ConversationStateSchema, state));
      }
      expect(state.version).toBeGreaterThan(60n);
    } finally {
      await Promise.all([writer.close(), reader.close()]);
    }
  }, 60_000);
});

describe("MemoryConversationStore specifics", () => {
  const once = (text: string) => [appendHistory(textMessage("", Role.USER, text))];

  it("forgets the oldest idempotency record past maxIdempotencyRecords; a retry of it with its expected version is then ABORTED", async () => {
    const store = new MemoryConversationStore({ maxIdempotencyRecords: 3 });
    for (const key of ["k1", "k2", "k3", "k4"]) await store.commit(`count-${key}`, 0n, once(key), key);
    const forgotten = await rejection(store.commit("count-k1", 0n, once("k1"), "k1"));
    expect(forgotten.code).toBe(Code.Aborted);
    for (const key of ["k2", "k3", "k4"]) expect(await store.commit(`count-${key}`, 0n, once(key), key)).toMatchObject({ replayed: true, version: 1n });
  });

  it("forgets the oldest idempotency records past maxIdempotencyBytes, keeping the newest even when it alone is over", async () => {
    // Keys of 1,000 characters: about 2.3 KB each as counted; 5 KB holds the newest two.
    const store = new MemoryConversationStore({ maxIdempotencyBytes: 5_000 });
    const keys = ["a", "b", "c"].map((letter) => letter.repeat(1_000));
    for (const key of keys) await store.commit("bytes", undefined, once(key[0]!), key);
    expect((await store.commit("bytes", undefined, once("a"), keys[0]!)).replayed).toBe(false);
    expect(await store.currentVersion("bytes")).toBe(4n);
    const tiny = new MemoryConversationStore({ maxIdempotencyBytes: 1 });
    await tiny.commit("tiny", undefined, once("x"), "x");
    expect(await tiny.commit("tiny", undefined, once("x"), "x")).toMatchObject({ replayed: true, version: 1n });
  });

  it("forgets a record after idempotencyTtlMs", async () => {
    let now = 1_000_000;
    const store = new MemoryConversationStore({ idempotencyTtlMs: 1_000, now: () => now });
    await store.commit("ttl", undefined, once("x"), "k");
    now += 999;
    expect((await store.commit("ttl", undefined, once("x"), "k")).replayed).toBe(true);
    now += 1;
    expect(await store.commit("ttl", undefined, once("x"), "k")).toMatchObject({ replayed: false, version: 2n });
  });

  it("refuses idempotency bounds that are not positive", () => {
    expect(() => new MemoryConversationStore({ maxIdempotencyRecords: 0 })).toThrow(/idempotency bounds must be positive/);
  });
});

describe("RedisConversationStore specifics", () => {
  it("keeps a tenant's calibration under its escaped hash tag, expiring with its last report, and answers a corrupt record as DATA_LOSS before writing", async () => {
    const store = new RedisConversationStore(redis.url);
    const raw = new Redis(redis.url);
    try {
      await store.connected();
      const tenant = `${freshId("calibration-layout")}}:{x%`;
      const escaped = tenant.replace(/%/g, "%25").replace(/\}/g, "%7D").replace(/\{/g, "%7B").replace(/:/g, "%3A");
      const key = { tenant, provider: Provider.ANTHROPIC_MESSAGES, model: "m", estimator: EstimatorKind.TOKENIZER };
      const bounds = { maxKeysPerTenant: 8, ttlMs: 3_600_000 };
      await store.reportCalibration(key, 100, 150, Date.now(), bounds);
      const records = `contextd:calibration:{${escaped}}`;
      const field = `${Provider.ANTHROPIC_MESSAGES}:${EstimatorKind.TOKENIZER}:m`;
      expect(await raw.hget(records, field)).toMatch(/^1\.5 1 0\.33333333333333331 \d+$/);
      expect(await raw.zscore(`${records}:reported`, field)).not.toBeNull();
      for (const name of [records, `${records}:reported`]) {
        const ttl = await raw.pttl(name);
        expect(ttl).toBeGreaterThan(3_500_000);
        expect(ttl).toBeLessThanOrEqual(3_600_000);
      }
      await raw.hset(records, field, "not a correction");
      const refused = await rejection(store.reportCalibration(key, 100, 150, Date.now(), bounds));
      expect(refused.code).toBe(Code.DataLoss);
      expect(refused.rawMessage).toBe(`token calibration record ${records} is corrupt in the store: field ${field} of ${records} holds "not a correction", not a correction`);
      expect(await raw.hget(records, field)).toBe("not a correction");
      expect((await rejection(store.readCalibration(key, Date.now(), bounds))).code).toBe(Code.DataLoss);
    } finally {
      raw.disconnect();
      await store.close();
    }
  });

  it("reports a version stored without its state as DATA_LOSS, never as an empty conversation", async () => {
    const store = new RedisConversationStore(redis.url);
    const raw = new Redis(redis.url);
    try {
      await store.connected();
      const id = freshId("corrupt");
      await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "");
      await raw.del(`contextd:{${id}}:header`);
      const error = await rejection(store.load(id));
      expect(error.code).toBe(Code.DataLoss);
      expect(error.rawMessage).toContain(`conversation "${id}" is corrupt in the store: version 1 is stored without its state`);
      expect((await rejection(store.commit(id, 1n, [appendHistory(textMessage("u2", Role.USER, "x"))], ""))).code).toBe(Code.DataLoss);
    } finally {
      raw.disconnect();
      await store.close();
    }
  });

  it("records an idempotency key as its fingerprint and version, not a copy of the state, under the key's TTL", async () => {
    const store = new RedisConversationStore(redis.url, { idempotencyTtlMs: 60_000 });
    const raw = new Redis(redis.url);
    try {
      await store.connected();
      const id = freshId("record");
      await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "x".repeat(10_000)))], "key:1");
      const record = `contextd:{${id}}:idempotency:key%3A1`;
      expect(Object.keys(await raw.hgetall(record)).sort()).toEqual(["fingerprint", "version"]);
      expect(await raw.hget(record, "version")).toBe("1");
      expect(await raw.memory("USAGE", record)).toBeLessThan(1_000);
      expect(await raw.ttl(record)).toBeGreaterThan(55);
    } finally {
      raw.disconnect();
      await store.close();
    }
  });

  it("commits a batch of 150,000 messages (the script's arguments are not spread into one call)", async () => {
    // The script runs 0.24-0.33 s in Redis on an idle host; with the suites beside it on CI's two
    // cores the call outlasted the default 2 s command timeout once (UNAVAILABLE, though applied).
    // This test is about the arguments, so it gives the call time.
    const store = new RedisConversationStore(redis.url, { commandTimeoutMs: 30_000 });
    try {
      expect(await store.connected()).toBe(true);
      const id = freshId("wide");
      // Spread as call arguments, this many messages overflowed the stack: UNAVAILABLE, nothing written.
      const messages = Array.from({ length: 150_000 }, (_, index) => textMessage(`m${index}`, Role.USER, ""));
      const outcome = await store.commit(id, 0n, [delta({ case: "appendMessages", value: { segment: Segment.HISTORY, messages } })], "");
      expect(outcome.version).toBe(1n);
      const fresh = new RedisConversationStore(redis.url);
      try {
        expect(await fresh.connected()).toBe(true);
        expect((await fresh.load(id)).history.length).toBe(150_000);
      } finally {
        await fresh.close();
      }
    } finally {
      await store.close();
    }
  }, 30_000);

  it("sees another process's writes through its cache (validated against the stored version)", async () => {
    const first = new RedisConversationStore(redis.url);
    const second = new RedisConversationStore(redis.url);
    try {
      await Promise.all([first.connected(), second.connected()]);
      const id = freshId("cache");
      await first.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "");
      expect((await second.load(id)).history).toHaveLength(1);
      await first.commit(id, 1n, [appendHistory(textMessage("u2", Role.USER, "again"))], "");
      expect((await second.load(id)).history.map((message) => message.id)).toEqual(["u1", "u2"]);
      await second.commit(id, undefined, [appendHistory(textMessage("u3", Role.USER, "third"))], "");
      expect((await first.load(id)).version).toBe(3n);
    } finally {
      await first.close();
      await second.close();
    }
  });

  it("writes a conversation's index entry with its first commit, and again once Redis has lost the conversation", async () => {
    const keyPrefix = freshId("index");
    const store = new RedisConversationStore(redis.url, { keyPrefix });
    const raw = new Redis(redis.url);
    try {
      await store.connected();
      const id = freshId("indexed");
      const indexKey = `${keyPrefix}:conversations`;
      await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "");
      expect(await raw.zrange(indexKey, 0, -1)).toEqual([id]);
      // Later commits of this process do not write the entry again.
      await raw.zrem(indexKey, id);
      await store.commit(id, 1n, [appendHistory(textMessage("u2", Role.USER, "again"))], "");
      expect(await raw.zrange(indexKey, 0, -1)).toEqual([]);
      // Redis loses everything (a restart without persistence): the next commit finds version 0
      // behind its cached copy, starts over and indexes the conversation again.
      await raw.del(`${keyPrefix}:{${id}}:version`, `${keyPrefix}:{${id}}:header`, `${keyPrefix}:{${id}}:segment:history`, `${keyPrefix}:{${id}}:changes`);
      expect((await store.commit(id, undefined, [appendHistory(textMessage("u3", Role.USER, "after loss"))], "")).version).toBe(1n);
      expect(await store.list(listById("", 10, ""))).toMatchObject({ conversations: [{ conversationId: id, version: 1n }] });
    } finally {
      raw.disconnect();
      await store.close();
    }
  });

  it("does not fail a commit that applied when its index write fails, and retries the entry on the next commit", async () => {
    const keyPrefix = freshId("index-failure");
    const store = new RedisConversationStore(redis.url, { keyPrefix });
    const raw = new Redis(redis.url);
    try {
      await store.connected();
      const id = freshId("unindexed");
      const indexKey = `${keyPrefix}:conversations`;
      await raw.set(indexKey, "not a sorted set"); // ZADD now fails with WRONGTYPE
      expect((await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "")).version).toBe(1n);
      expect((await store.load(id)).history.map((message) => message.id)).toEqual(["u1"]);
      await raw.del(indexKey);
      await store.commit(id, 1n, [appendHistory(textMessage("u2", Role.USER, "again"))], "");
      expect(await store.list(listById("", 10, ""))).toMatchObject({ conversations: [{ conversationId: id, version: 2n }] });
    } finally {
      raw.disconnect();
      await store.close();
    }
  });

  it("reads a state again once its cached copy was let go for the byte bound", async () => {
    // A bound of one byte keeps only the newest state.
    const store = new RedisConversationStore(redis.url, { cacheBytes: 1 });
    const raw = new Redis(redis.url);
    try {
      await store.connected();
      const [first, second] = [freshId("evicted"), freshId("kept")];
      await store.commit(first, 0n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "");
      await store.commit(second, 0n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "");
      // The same version with other contents, as only a reader of Redis would notice.
      for (const id of [first, second]) {
        await raw.lset(`contextd:{${id}}:segment:history`, 0, Buffer.from(toBinary(MessageSchema, textMessage("other", Role.USER, "other"))));
      }
      // The newest is served from the cache (its version did not move); the other is read again.
      expect((await store.load(second)).history.map((message) => message.id)).toEqual(["u1"]);
      expect((await store.load(first)).history.map((message) => message.id)).toEqual(["other"]);
    } finally {
      raw.disconnect();
      await store.close();
    }
  });

  it("answers UNAVAILABLE at once when Redis cannot be reached", async () => {
    const store = new RedisConversationStore("redis://127.0.0.1:1");
    try {
      const error = await rejection(store.load("x"));
      expect(error.code).toBe(Code.Unavailable);
      expect(error.rawMessage).toContain("redis store unavailable while loading a conversation");
      expect((await rejection(store.ping())).code).toBe(Code.Unavailable);
    } finally {
      await store.close();
    }
  });
});

async function connected<T extends { connected(): Promise<boolean> }>(store: T): Promise<T> {
  expect(await store.connected()).toBe(true);
  return store;
}

/** The stores again, with a change-log bound of `maxChanges` (the history window) and, when given, other history limits. */
const windowedStores: [string, (maxChanges: number, history?: Partial<HistoryLimits>) => Promise<ConversationStore>][] = [
  ["memory", async (maxChanges, history) => new MemoryConversationStore({ maxChangesPerConversation: maxChanges, historyLimits: { ...defaultHistoryLimits, ...history } })],
  ["redis", async (maxChanges, history) => connected(new RedisConversationStore(redis.url, { watchBlockMs: 200, maxChangesPerConversation: maxChanges, historyLimits: { ...defaultHistoryLimits, ...history } }))],
  ["redis cluster", async (maxChanges, history) => connected(new RedisConversationStore({ clusterNodes: redisCluster.addresses.slice(0, 1) }, { watchBlockMs: 200, maxChangesPerConversation: maxChanges, historyLimits: { ...defaultHistoryLimits, ...history } }))],
  ["postgres", async (maxChanges, history) => connected(new PostgresConversationStore(postgres.url, { watchPollMs: 200, maxChangesPerConversation: maxChanges, historyLimits: { ...defaultHistoryLimits, ...history } }))],
  ["redis, encrypted", async (maxChanges, history) => connected(new RedisConversationStore(redis.url, { watchBlockMs: 200, maxChangesPerConversation: maxChanges, historyLimits: { ...defaultHistoryLimits, ...history }, values: encrypted, keyPrefix: encryptedKeyPrefix }))],
  ["redis cluster, encrypted", async (maxChanges, history) => connected(new RedisConversationStore({ clusterNodes: redisCluster.addresses.slice(0, 1) }, { watchBlockMs: 200, maxChangesPerConversation: maxChanges, historyLimits: { ...defaultHistoryLimits, ...history }, values: encrypted, keyPrefix: encryptedKeyPrefix }))],
  ["postgres, encrypted", async (maxChanges, history) => connected(new PostgresConversationStore(encryptedPostgresUrl, { watchPollMs: 200, maxChangesPerConversation: maxChanges, historyLimits: { ...defaultHistoryLimits, ...history }, values: encrypted }))],
];

describe.each(stores)("ConversationStore contract, version history, rewind and fork: %s", (name, open) => {
  let store: ConversationStore;
  beforeAll(async () => {
    store = await open();
  });
  afterAll(async () => {
    await store?.close();
  });

  const bytesOf = (state: ConversationState) => Buffer.from(toBinary(ConversationStateSchema, state));

  it("reads every past version exactly as it was committed, through 120 random edits, ids it assigned, metadata and a Clear", async () => {
    const id = freshId("history");
    const edits = randomEdits(randomSource(32));
    const committed = new Map<bigint, Buffer>([[0n, bytesOf(await store.load(id))]]);
    let state = await store.load(id);
    for (let step = 0; step < 120; step++) {
      let deltas = edits(state);
      if (deltas === undefined) continue;
      // Messages without an id get one from the store: the log must give the same ones back.
      if (step % 10 === 3) deltas = [...deltas, appendHistory(textMessage("", Role.USER, `no id ${step}`))];
      if (step % 25 === 7) deltas = [...deltas, delta({ case: "setMetadata", value: { title: `t${step}`, labels: { step: String(step) }, removeLabels: [] } })];
      state = (await store.commit(id, state.version, deltas, "")).state!;
      committed.set(state.version, bytesOf(state));
      if (step === 60) {
        const version = await store.clear(id, state.version);
        state = await store.load(id);
        expect(state.version).toBe(version);
        committed.set(version, bytesOf(state));
      }
    }
    for (const [version, bytes] of committed) {
      expect(bytesOf(await store.loadAt(id, version)), `version ${version}`).toEqual(bytes);
    }
    const past = await rejection(store.loadAt(id, state.version + 1n));
    expect(past.code).toBe(Code.OutOfRange);
    expect(past.rawMessage).toContain(`past its current version ${state.version}`);
    expect((await rejection(store.loadAt(id, -1n))).code).toBe(Code.InvalidArgument);
  });

  it("rewinds: a new version whose state is version N's, checked against the expected version, keyed, delivered by Watch as one change", async () => {
    const id = freshId("rewind");
    await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "one")), delta({ case: "setMetadata", value: { title: "first", labels: { kind: "a" }, removeLabels: [] } })], "");
    await store.commit(id, 1n, [appendHistory(textMessage("a1", Role.ASSISTANT, "two")), delta({ case: "remember", value: { text: "likes tea" } })], "");
    await store.commit(id, 2n, [appendHistory(textMessage("u2", Role.USER, "three")), delta({ case: "setMetadata", value: { title: "third", labels: {}, removeLabels: ["kind"] } })], "");
    const at1 = await store.loadAt(id, 1n);

    const stale = await rejection(store.rewind(id, 2n, 1n, ""));
    expect(stale.code).toBe(Code.Aborted);
    expect(stale.rawMessage).toContain("current version is 3");
    expect(await store.currentVersion(id)).toBe(3n);

    const rewound = await store.rewind(id, 3n, 1n, "rewind-key");
    expect(rewound).toMatchObject({ version: 4n, replayed: false });
    const loaded = await store.load(id);
    expect(loaded.history.map((message) => message.id)).toEqual(["u1"]);
    expect(loaded.title).toBe("first");
    expect(loaded.labels).toEqual({ kind: "a" });
    expect(loaded.experiences).toEqual([]);
    // The experience counter never goes back: exp_1 is not given twice.
    expect(loaded.lastExperienceNumber).toBe(1n);
    expect(bytesOf({ ...loaded, version: 1n, lastExperienceNumber: 0n })).toEqual(bytesOf(at1));

    const again = await store.rewind(id, 3n, 1n, "rewind-key");
    expect(again).toMatchObject({ version: 4n, replayed: true });
    const reused = await rejection(store.rewind(id, undefined, 2n, "rewind-key"));
    expect(reused.code).toBe(Code.InvalidArgument);
    expect(await store.currentVersion(id)).toBe(4n);

    // Past a rewind the history still reads every version, the rewind's among them.
    await store.commit(id, 4n, [appendHistory(textMessage("u3", Role.USER, "after"))], "");
    expect((await store.loadAt(id, 4n)).history.map((message) => message.id)).toEqual(["u1"]);
    expect((await store.loadAt(id, 3n)).history.map((message) => message.id)).toEqual(["u1", "a1", "u2"]);
    expect((await store.loadAt(id, 5n)).history.map((message) => message.id)).toEqual(["u1", "u3"]);

    const changes: Change[] = [];
    const controller = new AbortController();
    for await (const change of store.watch(id, 3n, controller.signal)) {
      changes.push(change);
      if (changes.length === 2) controller.abort();
    }
    expect(changes[0]).toMatchObject({ version: 4n, deltas: [], rewoundToVersion: 1n, idempotencyKey: "rewind-key" });
    expect(changes[1]!.rewoundToVersion).toBeUndefined();

    const empty = await store.rewind(id, 5n, 0n, "");
    expect(empty.version).toBe(6n);
    const emptied = await store.load(id);
    expect([emptied.history.length, emptied.title, emptied.lastExperienceNumber]).toEqual([0, "", 1n]);
    expect((await rejection(store.rewind(id, undefined, 7n, ""))).code).toBe(Code.OutOfRange);
  });

  it("commits after a rewind of a long conversation: an id the rewind dropped is free again, a kept one still taken, a call the rewind dropped no longer made, every version read back", async () => {
    const id = freshId("rewind-ids");
    const call = (messageId: string, callId: string) =>
      create(MessageSchema, { id: messageId, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: callId, name: "look", arguments: { data: "{}" } } } }] });
    const result = (callId: string, messageId: string) => delta({ case: "appendToolResult", value: { toolCallId: callId, messageId, payload: { text: "found" } } });
    const lastResultName = (state: ConversationState) => (state.history.at(-1)!.parts[0]!.kind.value as { name: string }).name;
    const committed = new Map<bigint, Buffer>();
    const commit = async (deltas: Delta[]) => {
      const state = (await store.commit(id, undefined, deltas, "")).state!;
      committed.set(state.version, bytesOf(state));
      return state;
    };
    const rewind = async (back: bigint) => {
      const current = await store.currentVersion(id);
      await store.rewind(id, current, current - back, "");
      const state = await store.load(id);
      committed.set(state.version, bytesOf(state));
      return state;
    };
    const duplicate = async (messageId: string) => (await rejection(store.commit(id, undefined, [appendHistory(textMessage(messageId, Role.USER, "again"))], ""))).rawMessage;
    // Past the length from which the stores look ids up in an index (message-id-index.ts).
    await commit([appendHistory(...Array.from({ length: 1_500 }, (_, index) => textMessage(`h${index}`, Role.USER, "x")))]);
    await commit([appendHistory(call("a1", "c1"))]);
    expect(lastResultName(await commit([result("c1", "r1")]))).toBe("look");
    await commit([appendHistory(textMessage("d1", Role.USER, "one"))]);
    await commit([appendHistory(textMessage("d2", Role.USER, "two"), textMessage("d3", Role.USER, "three"))]);

    let state = await rewind(2n);
    expect(state.history.map((message) => message.id).slice(-2)).toEqual(["a1", "r1"]);
    state = await commit([appendHistory(textMessage("d3", Role.USER, "three again"))]);
    expect(state.history.map((message) => message.id).slice(-2)).toEqual(["r1", "d3"]);
    expect(await duplicate("h7")).toMatch(/duplicate message id "h7"/);
    expect(await duplicate("a1")).toMatch(/duplicate message id "a1"/);
    expect(await duplicate("d3")).toMatch(/duplicate message id "d3"/);
    state = await commit([appendHistory(textMessage("d1", Role.USER, "one again"))]);

    // Back before the call: its ids are free, and a result for it finds no call of this history
    // (stored without a name, as for a call never made here), until a new round makes it again.
    state = await rewind(7n);
    expect(state.history.length).toBe(1_500);
    state = await commit([appendHistory(textMessage("a1", Role.USER, "a1 again"), textMessage("r1", Role.USER, "r1 again"))]);
    expect(state.history.map((message) => message.id).slice(-2)).toEqual(["a1", "r1"]);
    expect(lastResultName(await commit([result("c1", "r2")]))).toBe("");
    expect(lastResultName(await commit([appendHistory(call("a2", "c1")), result("c1", "r3")]))).toBe("look");
    expect(await duplicate("h1499")).toMatch(/duplicate message id "h1499"/);
    // Rewinding the rewind brings the round back (the state it dropped, appended again): its ids taken again.
    await rewind(1n);
    expect(await store.commit(id, undefined, [appendHistory(textMessage("r3", Role.USER, "free"))], "")).toMatchObject({ replayed: false });
    state = await rewind(2n);
    expect(state.history.map((message) => message.id).slice(-2)).toEqual(["a2", "r3"]);
    expect(await duplicate("r3")).toMatch(/duplicate message id "r3"/);
    expect(await duplicate("a2")).toMatch(/duplicate message id "a2"/);
    expect(lastResultName(await commit([result("c1", "r4")]))).toBe("look");

    for (const [version, bytes] of committed) expect(bytesOf(await store.loadAt(id, version)), `version ${version}`).toEqual(bytes);
    const latest = await store.load(id);
    expect(latest.history.map((message) => message.id).slice(-3)).toEqual(["a2", "r3", "r4"]);
    expect(bytesOf(latest)).toEqual(committed.get(latest.version));
  });

  it("forks at the latest or a past version into a new conversation: ids, title and labels kept, forked_from set, the source untouched", async () => {
    const source = freshId("fork-source");
    await store.commit(source, 0n, [appendHistory(textMessage("u1", Role.USER, "plan")), delta({ case: "setMetadata", value: { title: "trip", labels: { team: "x" }, removeLabels: [] } })], "");
    await store.commit(source, 1n, [appendHistory(textMessage("", Role.ASSISTANT, "sure")), artifactDelta("notes")], "");
    const sourceBytes = bytesOf(await store.load(source));
    const before = Date.now();

    const latest = freshId("fork-latest");
    const forked = await store.fork(source, undefined, latest);
    expect(forked.version).toBe(1n);
    expect(forked.forkedFrom).toMatchObject({ conversationId: source, version: 2n });
    const copy = await store.load(latest);
    expect(copy.version).toBe(1n);
    expect(copy.conversationId).toBe(latest);
    expect(copy.forkedFrom).toMatchObject({ conversationId: source, version: 2n });
    expect(bytesOf({ ...copy, conversationId: source, version: 2n, forkedFrom: undefined })).toEqual(sourceBytes);
    expect([copy.title, copy.labels]).toEqual(["trip", { team: "x" }]);

    const past = freshId("fork-past");
    await store.fork(source, 1n, past);
    expect((await store.load(past)).history.map((message) => message.id)).toEqual(["u1"]);

    // What the fork stored reads as any conversation does: a window of its tail, a fork of it.
    const tail = await store.readWindow(latest, { segment: "history", count: 1, withRest: true });
    expect([tail.start, tail.length, tail.state.history[0]!.id, tail.state.title]).toEqual([1, 2, copy.history[1]!.id, "trip"]);
    const grandchild = freshId("fork-of-fork");
    await store.fork(latest, undefined, grandchild);
    const third = await store.load(grandchild);
    expect(third.forkedFrom).toMatchObject({ conversationId: latest, version: 1n });
    expect(bytesOf({ ...third, conversationId: latest, forkedFrom: copy.forkedFrom })).toEqual(bytesOf(copy));
    expect(bytesOf(await store.loadAt(grandchild, 1n))).toEqual(bytesOf(third));

    // Writing either side leaves the other as it was (memory shares the segments).
    await store.commit(latest, 1n, [appendHistory(textMessage("b1", Role.USER, "branch"))], "");
    await store.commit(source, 2n, [appendHistory(textMessage("s1", Role.USER, "main"))], "");
    expect((await store.load(latest)).history.length).toBe(3);
    expect((await store.load(latest)).history.at(-1)!.id).toBe("b1");
    expect((await store.load(source)).history.at(-1)!.id).toBe("s1");
    expect((await store.loadAt(source, 2n)).history.length).toBe(2);
    // The fork's history starts at its fork; a Clear keeps where it came from.
    expect(bytesOf(await store.loadAt(latest, 1n))).toEqual(bytesOf(copy));
    await store.clear(latest, 2n);
    expect((await store.load(latest)).forkedFrom).toMatchObject({ conversationId: source, version: 2n });

    const summary = (await store.list(listById(latest, 10, ""))).conversations[0]!;
    expect(summary.createdAtUnixMs).toBeGreaterThanOrEqual(BigInt(before));
    expect([summary.title, summary.labels]).toEqual(["trip", { team: "x" }]);

    const exists = await rejection(store.fork(source, undefined, past));
    expect(exists.code).toBe(Code.AlreadyExists);
    expect(exists.rawMessage).toContain(`"${past}" already exists`);
    expect((await rejection(store.fork(freshId("never"), undefined, freshId("to")))).code).toBe(Code.NotFound);
    expect((await rejection(store.fork(source, 9n, freshId("to")))).code).toBe(Code.OutOfRange);
    expect((await rejection(store.fork(source, 0n, freshId("to")))).code).toBe(Code.InvalidArgument);
    expect((await rejection(store.fork(source, undefined, source))).code).toBe(Code.InvalidArgument);
    expect((await rejection(store.fork(source, undefined, "x".repeat(stringLimits.id + 1)))).code).toBe(Code.InvalidArgument);
  });

  it(`reads any version among the logged changes, however many commits came before them: the window slides (${name})`, async () => {
    // Redis trims its streams by whole nodes (MAXLEN ~): 250 commits with a bound of 5.
    const windowed = await windowedStores.find(([storeName]) => storeName === name)![1](5);
    try {
      const id = freshId("window");
      const committed = new Map<bigint, Buffer>();
      for (let version = 0n; version < 250n; version++) {
        const deltas = [appendHistory(textMessage(`m${version}`, Role.USER, "x"))];
        if (version % 7n === 3n) deltas.push(delta({ case: "setMetadata", value: { title: `t${version}`, labels: {}, removeLabels: [] } }));
        committed.set(version + 1n, bytesOf((await windowed.commit(id, version, deltas, "")).state!));
      }
      const oldest = await oldestLoggedVersion(windowed, id);
      expect(oldest).toBeGreaterThan(2n);
      expect(oldest).toBeLessThanOrEqual(246n);
      // Every version whose later changes the log holds, down to the one before its oldest change.
      for (let version = oldest - 1n; version <= 250n; version++) expect(bytesOf(await windowed.loadAt(id, version)), `version ${version}`).toEqual(committed.get(version));
      const error = await rejection(windowed.loadAt(id, oldest - 2n));
      expect(error.code).toBe(Code.OutOfRange);
      expect(error.rawMessage).toContain("outside its history window");
      expect(error.rawMessage).toContain(`its change log starts at version ${oldest}`);
      expect(error.rawMessage).toContain(`the oldest readable version is ${oldest - 1n}`);
      expect((await rejection(windowed.fork(id, 3n, freshId("to")))).code).toBe(Code.OutOfRange);
      const forked = freshId("window-fork");
      await windowed.fork(id, 247n, forked);
      expect(bytesOf({ ...(await windowed.load(forked)), conversationId: id, version: 247n, forkedFrom: undefined })).toEqual(committed.get(247n));
      // Rewinds 1 and 3 back, read back through the log as it slides on.
      const one = await windowed.rewind(id, 250n, 249n, "");
      expect(bytesOf({ ...(await windowed.load(id)), version: 249n })).toEqual(committed.get(249n));
      const three = await windowed.rewind(id, one.version, one.version - 3n, "");
      expect(bytesOf({ ...(await windowed.load(id)), version: 248n })).toEqual(committed.get(248n));
      expect(bytesOf({ ...(await windowed.loadAt(id, three.version - 1n)), version: 249n })).toEqual(committed.get(249n));
    } finally {
      await windowed.close();
    }
  });

  it(`records an undo with every change, reads past versions with them equal to the forward replay byte for byte, and rewinds k versions back (${name})`, async () => {
    const id = freshId("undo");
    const edits = randomEdits(randomSource(58));
    const committed = new Map<bigint, Buffer>();
    let state = await store.load(id);
    for (let step = 0; step < 90; step++) {
      let deltas = edits(state);
      if (deltas === undefined) continue;
      if (step % 9 === 4) deltas = [...deltas, appendHistory(textMessage("", Role.USER, `no id ${step}`))];
      if (step % 20 === 6) deltas = [...deltas, delta({ case: "setMetadata", value: { title: `t${step}`, labels: { step: String(step) }, removeLabels: [] } })];
      state = (await store.commit(id, state.version, deltas, "")).state!;
      committed.set(state.version, bytesOf(state));
      if (step === 30) {
        await store.clear(id, state.version);
        state = await store.load(id);
        committed.set(state.version, bytesOf(state));
      }
      if (step === 45 || step === 70) {
        // A rewind is logged with its undo too: versions before it read through it.
        const back = step === 45 ? 1n : 10n;
        const target = state.version - back;
        await store.rewind(id, state.version, target, "");
        state = await store.load(id);
        // The rewound state is version `target`'s, but for the experience counter, which never goes back.
        expect(bytesOf({ ...state, version: target, lastExperienceNumber: 0n })).toEqual(bytesOf({ ...(await store.loadAt(id, target)), lastExperienceNumber: 0n }));
        committed.set(state.version, bytesOf(state));
      }
    }
    const changes: Change[] = [];
    const controller = new AbortController();
    for await (const change of store.watch(id, 1n, controller.signal)) {
      changes.push(change);
      if (change.version === state.version) controller.abort();
    }
    // Every change after the first records its undo (the first needs none: version 0 is empty).
    expect(changes.length).toBe(Number(state.version) - 1);
    expect(changes.filter((change) => change.undo === undefined || change.undo.notUndoable !== "").map((change) => change.version)).toEqual([]);
    for (const [version, bytes] of committed) {
      const read = bytesOf(await store.loadAt(id, version));
      expect(read, `version ${version}`).toEqual(bytes);
      if (version < state.version) expect(bytesOf(await replayedState(store, id, version)), `version ${version} replayed`).toEqual(read);
    }
  });

  it(`records "not undoable" for a change whose undo is past --history-undo-bytes: versions before it replay forward, or are OUT_OF_RANGE naming why once the log has slid past them (${name})`, async () => {
    const bounded = await windowedStores.find(([storeName]) => storeName === name)![1](10_000, { maxUndoBytes: 2_000 });
    const slid = await windowedStores.find(([storeName]) => storeName === name)![1](5, { maxUndoBytes: 2_000 });
    try {
      for (const windowed of [bounded, slid]) {
        const id = freshId("not-undoable");
        const committed = new Map<bigint, Buffer>();
        for (let version = 0n; version < 40n; version++) {
          committed.set(version + 1n, bytesOf((await windowed.commit(id, version, [appendHistory(textMessage(`m${version}`, Role.USER, "x".repeat(100)))], "")).state!));
        }
        // The replace removes 40 messages of ~110 bytes: an undo of ~4,400 bytes, past the bound.
        const replaced = await windowed.commit(id, 40n, [delta({ case: "replaceSegment", value: { segment: Segment.HISTORY, messages: [textMessage("only", Role.USER, "y")] } })], "");
        committed.set(41n, bytesOf(replaced.state!));
        for (let version = 41n; version < 43n; version++) committed.set(version + 1n, bytesOf((await windowed.commit(id, version, [appendHistory(textMessage(`n${version}`, Role.USER, "z"))], "")).state!));
        const logged: Change[] = [];
        const controller = new AbortController();
        for await (const change of windowed.watch(id, 40n, controller.signal)) {
          logged.push(change);
          if (change.version === 43n) controller.abort();
        }
        expect(logged[0]!.undo!.notUndoable).toContain("would hold more than 2000 bytes, the bound of one change's undo (--history-undo-bytes)");
        expect(logged[0]!.undo!.segments).toEqual([]);
        expect([logged[1]!.undo!.notUndoable, logged[1]!.undo!.segments[0]!.keep, logged[1]!.undo!.segments[0]!.messages]).toEqual(["", 1, []]);
        for (let version = 41n; version <= 43n; version++) expect(bytesOf(await windowed.loadAt(id, version)), `version ${version}`).toEqual(committed.get(version));
        if (windowed === bounded) {
          for (const version of [1n, 20n, 40n]) expect(bytesOf(await windowed.loadAt(id, version)), `version ${version}`).toEqual(committed.get(version));
        } else {
          const error = await rejection(windowed.loadAt(id, 40n));
          expect(error.code).toBe(Code.OutOfRange);
          expect(error.rawMessage).toContain("version 41 cannot be undone: its undo (the history messages the change removed or replaced) would hold more than 2000 bytes");
          expect(error.rawMessage).toContain("the oldest readable version is 41");
          expect((await rejection(windowed.rewind(id, undefined, 40n, ""))).code).toBe(Code.OutOfRange);
        }
      }
    } finally {
      await Promise.all([bounded.close(), slid.close()]);
    }
  });

  it(`reads a log without undos (as an older build wrote it, or --history-undo-bytes 0) by replaying it forward (${name})`, async () => {
    const legacy = await windowedStores.find(([storeName]) => storeName === name)![1](10_000, { maxUndoBytes: 0 });
    // Memory keeps its log in the process: the log an older build wrote is this store's own.
    const later = name === "memory" ? legacy : await windowedStores.find(([storeName]) => storeName === name)![1](10_000);
    try {
      const id = freshId("legacy");
      const committed = new Map<bigint, Buffer>();
      for (let version = 0n; version < 6n; version++) committed.set(version + 1n, bytesOf((await legacy.commit(id, version, [appendHistory(textMessage(`m${version}`, Role.USER, "x"))], "")).state!));
      for (let version = 6n; version < 9n; version++) committed.set(version + 1n, bytesOf((await later.commit(id, version, [appendHistory(textMessage(`n${version}`, Role.USER, "x"))], "")).state!));
      const logged: Change[] = [];
      const controller = new AbortController();
      for await (const change of later.watch(id, 0n, controller.signal)) {
        logged.push(change);
        if (change.version === 9n) controller.abort();
      }
      expect(logged.map((change) => change.undo !== undefined)).toEqual(name === "memory" ? Array(9).fill(false) : [false, false, false, false, false, false, true, true, true]);
      for (let version = 1n; version <= 9n; version++) expect(bytesOf(await later.loadAt(id, version)), `version ${version}`).toEqual(committed.get(version));
      await later.rewind(id, 9n, 2n, "");
      expect(bytesOf({ ...(await later.load(id)), version: 2n })).toEqual(committed.get(2n));
    } finally {
      await legacy.close();
      if (later !== legacy) await later.close();
    }
  });

  it(`forks a source that expires into a conversation with its own expiry, readable and listed (${name})`, async () => {
    // The stores' cheaper copies (Redis COPY, Postgres INSERT ... SELECT) would carry the source's
    // expiry (or none); a source that expires is forked through the engine, as under encryption.
    const timed = await open(undefined, { expiry: new ConversationExpiry({ defaultMs: 600_000, perTenant: new Map() }) });
    try {
      const source = freshId("expiring");
      await timed.commit(source, 0n, [appendHistory(textMessage("u1", Role.USER, "hi"), textMessage("a1", Role.ASSISTANT, "hello"))], "");
      const target = freshId("forked");
      expect((await timed.fork(source, undefined, target)).version).toBe(1n);
      const [summary] = (await timed.list(listById(target, 10, ""))).conversations;
      expect(summary!.expiresAtUnixMs).toBe(summary!.updatedAtUnixMs + 600_000n);
      const forked = await timed.load(target);
      expect(forked.history.map((message) => message.id)).toEqual(["u1", "a1"]);
      expect(forked.forkedFrom?.conversationId).toBe(source);
      const duplicate = await rejection(timed.commit(target, 1n, [appendHistory(textMessage("u1", Role.USER, "again"))], ""));
      expect(duplicate.code).toBe(Code.InvalidArgument);
      await timed.delete(target, undefined);
      await timed.delete(source, undefined);
    } finally {
      await timed.close();
    }
  });
});

/** The version of the oldest change `store` still logs for `conversationId`. */
async function oldestLoggedVersion(store: ConversationStore, conversationId: string): Promise<bigint> {
  const controller = new AbortController();
  try {
    for await (const change of store.watch(conversationId, 0n, controller.signal)) return change.version;
  } finally {
    controller.abort();
  }
  throw new Error(`no change logged for ${conversationId}`);
}

async function waitFor(condition: () => boolean): Promise<void> {
  for (let attempt = 0; attempt < 500 && !condition(); attempt++) await new Promise((resolve) => setTimeout(resolve, 10));
  expect(condition()).toBe(true);
}
