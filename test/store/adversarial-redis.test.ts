// Issue 15, items 4-6 (the store's part), tried as an attacker or an unlucky operator would,
// against a real sidecar process and a real redis-server: ids that look like key syntax, key types
// and values changed behind the sidecar's back, and a Redis at its maxmemory limit.
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { toBinary } from "@bufbuild/protobuf";
import { MessageSchema } from "#gen/contextd/v1/message_pb";
import { escapeKeyPart } from "../../src/store/redis-scripts.js";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { startRedis, type RedisProcess } from "../support/redis.js";
import { startSidecar, type Sidecar } from "../support/sidecar.js";
import { appendHistory, textMessage } from "./fixtures.js";

/** Every call gets this deadline: a call that hangs fails the test instead of the suite's timeout. */
const callOptions = { timeoutMs: 3_000 };

interface Deployment {
  redis: RedisProcess;
  sidecar: Sidecar;
  raw: Redis;
  conversations: Client<typeof ConversationService>;
  health: Client<typeof Health>;
}

async function deploy(redisArgs: string[] = []): Promise<Deployment> {
  const redis = await startRedis({ args: redisArgs });
  const sidecar = await startSidecar(["--redis-url", redis.url, "--health-interval-ms", "100"]);
  const transport = createGrpcTransport({ baseUrl: sidecar.url });
  return {
    redis,
    sidecar,
    raw: new Redis(redis.url),
    conversations: createClient(ConversationService, transport),
    health: createClient(Health, transport),
  };
}

async function undeploy(deployment: Deployment | undefined): Promise<void> {
  deployment?.raw.disconnect();
  await deployment?.sidecar.stop();
  await deployment?.redis.stop();
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

async function rejection(promise: Promise<unknown>): Promise<ConnectError> {
  const error = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error, "expected a rejection").toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

const say = (text: string) => [appendHistory(textMessage("", Role.USER, text))];
const keysOf = (id: string) => {
  const base = `contextd:{${escapeKeyPart(id)}}`;
  return {
    version: `${base}:version`,
    header: `${base}:header`,
    history: `${base}:segment:history`,
    system: `${base}:segment:system`,
    changes: `${base}:changes`,
    record: (key: string) => `${base}:idempotency:${escapeKeyPart(key)}`,
  };
};

describe("adversarial Redis store (real sidecar, real redis-server)", () => {
  let deployment: Deployment;
  beforeAll(async () => {
    deployment = await deploy();
  });
  afterAll(async () => {
    await undeploy(deployment);
  });

  const serving = async () => (await deployment.health.check({ service: "" }, callOptions)).status;
  /** Every key of the conversation, with its values, to show that a refused call wrote nothing. */
  const snapshot = async (id: string, key: string) => {
    const keys = keysOf(id);
    const pipeline = deployment.raw.pipeline();
    pipeline.type(keys.version).getBuffer(keys.version).type(keys.header).type(keys.history).type(keys.changes).exists(keys.record(key));
    const values = (await pipeline.exec())!.map(([error, value]) => (error ? String(error) : value));
    const header = (await deployment.raw.type(keys.header)) === "hash" ? await deployment.raw.hgetallBuffer(keys.header) : null;
    const history = (await deployment.raw.type(keys.history)) === "list" ? await deployment.raw.lrangeBuffer(keys.history, 0, -1) : null;
    const state = { header, history };
    const changes = (await deployment.raw.type(keys.changes)) === "stream" ? await deployment.raw.xrange(keys.changes, "-", "+") : null;
    return { values, state, changes };
  };

  it("keeps ids with }, { and : apart, all keys of one conversation under one hash tag that no id can end", async () => {
    const { conversations, raw } = deployment;
    // Unescaped, B's version key was A's idempotency record for key "x}:version" (and likewise for
    // state and changes): A's keyed commit wrote into B, and B's commits failed with WRONGTYPE.
    const a = "tenant/a";
    const b = "tenant/a}:idempotency:x";
    const c = "tenant/{a}";
    await conversations.commit({ conversationId: b, deltas: say("b1"), idempotencyKey: "k" }, callOptions);
    for (const key of ["x}:version", "x}:state", "x}:changes"]) {
      await conversations.commit({ conversationId: a, deltas: say(key), idempotencyKey: key }, callOptions);
    }
    await conversations.commit({ conversationId: c, deltas: say("c1") }, callOptions);
    expect((await conversations.commit({ conversationId: b, expectedVersion: 1n, deltas: say("b2"), idempotencyKey: "x}:version" }, callOptions)).version).toBe(2n);

    const history = async (id: string) => (await conversations.getState({ conversationId: id }, callOptions)).state!.history.map((message) => message.parts[0]!.kind.value);
    expect((await history(a)).map((part) => (part as { text: string }).text)).toEqual(["x}:version", "x}:state", "x}:changes"]);
    expect((await history(b)).map((part) => (part as { text: string }).text)).toEqual(["b1", "b2"]);
    expect((await history(c)).map((part) => (part as { text: string }).text)).toEqual(["c1"]);

    // Redis Cluster hashes the text between the first "{" and the next "}": for every key that is
    // the escaped id, so a conversation's keys share a slot and no id reaches another's slot.
    const stored = (await raw.keys("contextd:{*")).sort();
    const tagOf = (key: string) => key.slice(key.indexOf("{") + 1, key.indexOf("}", key.indexOf("{")));
    const ids = new Map([a, b, c].map((id) => [escapeKeyPart(id), id]));
    for (const key of stored) {
      const id = ids.get(tagOf(key));
      expect(id, `key ${key} is under the tag of a conversation`).toBeDefined();
      expect(key.slice(`contextd:{${escapeKeyPart(id!)}}:`.length)).toMatch(/^(version|header|segment:(system|history|memory|tools)(:ids|:calls)?|changes|idempotency-records|idempotency:[^{}:]*)$/);
    }
    expect(stored).toContain("contextd:{tenant/a%7D%3Aidempotency%3Ax}:version");
    expect(stored).toContain("contextd:{tenant/a}:idempotency:x%7D%3Aversion");
  });

  it("refuses a commit onto a wrong-type id index with DATA_LOSS naming the key, writing nothing, from the sidecar's copy and from a process without one", async () => {
    const { conversations, raw, redis } = deployment;
    const id = "tenant/wrong-type-index";
    await conversations.commit({ conversationId: id, deltas: say("first") }, callOptions);
    // The history list's index (the id index is kept per segment list).
    const base = `contextd:{${escapeKeyPart(id)}}:segment:history`;
    await raw.del(`${base}:ids`);
    await raw.set(`${base}:ids`, "not a hash");
    const before = await snapshot(id, "");
    const warm = await rejection(conversations.commit({ conversationId: id, deltas: say("second") }, callOptions));
    expect([warm.code, warm.rawMessage]).toEqual([Code.DataLoss, `conversation "${id}" is corrupt in the store: the id index key ${base}:ids is a string, not a hash`]);
    expect(await snapshot(id, "")).toEqual(before);
    // A cold commit reads the index with the tail: a wrong type is DATA_LOSS there.
    await raw.del(`${base}:ids`);
    await raw.set(`${base}:calls`, "not a hash");
    const cold = new RedisConversationStore(redis.url);
    try {
      await cold.connected();
      const error = await rejection(cold.commit(id, undefined, say("third"), "", undefined, undefined, { withState: false }));
      expect([error.code, error.rawMessage]).toEqual([Code.DataLoss, `conversation "${id}" is corrupt in the store: the call index key ${base}:calls is a string, not a hash`]);
    } finally {
      await cold.close();
    }
    expect(await snapshot(id, "")).toEqual(before);
  });

  it("refuses a commit onto a wrong-type change stream with DATA_LOSS naming the id, writing nothing; the retry does the same until repaired, then applies once", async () => {
    const { conversations, raw } = deployment;
    const id = "tenant/wrong-type-stream";
    await conversations.commit({ conversationId: id, deltas: say("first") }, callOptions);
    await raw.del(keysOf(id).changes);
    await raw.set(keysOf(id).changes, "not a stream");
    const before = await snapshot(id, "retry-1");

    const commit = () => conversations.commit({ conversationId: id, expectedVersion: 1n, deltas: say("second"), idempotencyKey: "retry-1" }, callOptions);
    for (let attempt = 0; attempt < 2; attempt++) {
      const error = await rejection(commit());
      expect(error.code).toBe(Code.DataLoss);
      expect(error.rawMessage).toBe(`conversation "${id}" is corrupt in the store: the change stream key ${keysOf(id).changes} is a string, not a stream`);
      expect(await snapshot(id, "retry-1")).toEqual(before);
    }
    // Watch says so at once, instead of UNAVAILABLE for the client to retry forever.
    const watchError = await rejection((async () => {
      for await (const response of conversations.watch({ conversationId: id, fromVersion: 0n }, callOptions)) void response;
    })());
    expect(watchError.code).toBe(Code.DataLoss);
    expect(watchError.rawMessage).toContain(`conversation "${id}" is corrupt in the store`);
    expect(await serving()).toBe(ServingStatus.SERVING);

    await raw.del(keysOf(id).changes);
    expect(await commit()).toMatchObject({ version: 2n, replayed: false });
    expect(await commit()).toMatchObject({ version: 2n, replayed: true });
    expect((await conversations.getState({ conversationId: id }, callOptions)).state!.history).toHaveLength(2);
  });

  it("refuses a commit onto a hand-corrupted change stream (an id past the version, a malformed entry) with DATA_LOSS, writing nothing", async () => {
    const { conversations, raw } = deployment;
    const id = "tenant/corrupt-stream";
    await conversations.commit({ conversationId: id, deltas: say("first") }, callOptions);
    await raw.xadd(keysOf(id).changes, "2-0", "junk", "x");
    const before = await snapshot(id, "k");
    const error = await rejection(conversations.commit({ conversationId: id, expectedVersion: 1n, deltas: say("second"), idempotencyKey: "k" }, callOptions));
    expect(error.code).toBe(Code.DataLoss);
    expect(error.rawMessage).toMatch(new RegExp(`^conversation "${id}" is corrupt in the store: the change stream \\S+ does not take version 2 \\(ERR The ID specified in XADD is equal or smaller`));
    expect(await snapshot(id, "k")).toEqual(before);

    const watchError = await rejection((async () => {
      for await (const response of conversations.watch({ conversationId: id, fromVersion: 0n }, callOptions)) void response;
    })());
    expect(watchError.code).toBe(Code.DataLoss);
    expect(watchError.rawMessage).toBe(`conversation "${id}" is corrupt in the store: change stream entry 2-0 has fields junk, not one "change"`);
  });

  it("answers corrupted state and version keys with DATA_LOSS naming the id, never INTERNAL or UNAVAILABLE", async () => {
    const { conversations, raw } = deployment;
    const undecodable = "tenant/undecodable";
    await conversations.commit({ conversationId: undecodable, deltas: say("first") }, callOptions);
    // Another writer's version 2 whose appended message is garbage (the sidecar's cached copy is
    // version 1, so it reads only the list's new tail, and finds it undecodable).
    await raw.rpush(keysOf(undecodable).history, Buffer.from([0xff, 0xff, 0xff, 0xff]));
    await raw.hset(keysOf(undecodable).header, "history", "2");
    await raw.set(keysOf(undecodable).version, "2");
    const garbage = await rejection(conversations.getState({ conversationId: undecodable }, callOptions));
    expect(garbage.code).toBe(Code.DataLoss);
    expect(garbage.rawMessage).toMatch(new RegExp(`^conversation "${undecodable}" is corrupt in the store: message 1 of the history list ${escapeRegExp(keysOf(undecodable).history)} does not decode`));
    // ...and a version 3 whose rest (artifacts, experiences, tool definitions) is garbage.
    await raw.lset(keysOf(undecodable).history, 1, Buffer.from(toBinary(MessageSchema, textMessage("fixed", Role.USER, "fixed"))));
    await raw.hset(keysOf(undecodable).header, "rest", Buffer.from([0xff, 0xff]), "rest_at", "3");
    await raw.set(keysOf(undecodable).version, "3");
    const rest = await rejection(conversations.getState({ conversationId: undecodable }, callOptions));
    expect(rest.code).toBe(Code.DataLoss);
    expect(rest.rawMessage).toMatch(new RegExp(`^conversation "${undecodable}" is corrupt in the store: the header ${escapeRegExp(keysOf(undecodable).header)} field rest does not decode`));

    const nonNumeric = "tenant/non-numeric";
    await conversations.commit({ conversationId: nonNumeric, deltas: say("first") }, callOptions);
    await raw.set(keysOf(nonNumeric).version, "abc");
    for (const call of [
      () => conversations.getState({ conversationId: nonNumeric }, callOptions),
      () => conversations.commit({ conversationId: nonNumeric, deltas: say("x") }, callOptions),
      () => conversations.commit({ conversationId: nonNumeric, expectedVersion: 1n, deltas: say("x"), idempotencyKey: "k" }, callOptions),
      () => conversations.clear({ conversationId: nonNumeric }, callOptions),
    ]) {
      const error = await rejection(call());
      expect(error.code).toBe(Code.DataLoss);
      expect(error.rawMessage).toMatch(new RegExp(`^conversation "${nonNumeric}" is corrupt in the store: the version key .*holds "abc", not a version$`));
    }
    expect(await raw.get(keysOf(nonNumeric).version)).toBe("abc");

    const wrongType = "tenant/wrong-type-version";
    await conversations.commit({ conversationId: wrongType, deltas: say("first") }, callOptions);
    await raw.del(keysOf(wrongType).version);
    await raw.hset(keysOf(wrongType).version, "v", "1");
    const typed = await rejection(conversations.getState({ conversationId: wrongType }, callOptions));
    expect(typed.code).toBe(Code.DataLoss);
    expect(typed.rawMessage).toBe(`conversation "${wrongType}" is corrupt in the store: the version key ${keysOf(wrongType).version} is a hash, not a string`);

    const wrongRecord = "tenant/wrong-type-record";
    await conversations.commit({ conversationId: wrongRecord, deltas: say("first") }, callOptions);
    await raw.set(keysOf(wrongRecord).record("k"), "not a hash");
    const record = await rejection(conversations.commit({ conversationId: wrongRecord, deltas: say("x"), idempotencyKey: "k" }, callOptions));
    expect(record.code).toBe(Code.DataLoss);
    expect(record.rawMessage).toContain(`the idempotency record key ${keysOf(wrongRecord).record("k")} is a string, not a hash`);
    expect(await raw.get(keysOf(wrongRecord).version)).toBe("1");
    expect(await serving()).toBe(ServingStatus.SERVING);
  });

  it("answers a lost or damaged part of the list layout (header, segment list) with DATA_LOSS naming the id, on every call, writing nothing", async () => {
    const { conversations, raw } = deployment;
    const damages: [string, (keys: ReturnType<typeof keysOf>) => Promise<unknown>, string][] = [
      ["lost-list", (keys) => raw.del(keys.history), "the history list KEY holds 0 messages but the header says 2"],
      ["short-list", (keys) => raw.rpop(keys.history), "the history list KEY holds 1 messages but the header says 2"],
      ["lost-header", (keys) => raw.del(keys.header), "version 1 is stored without its state"],
      ["header-field", (keys) => raw.hdel(keys.header, "rest_at"), "the header HEADER lacks its field rest_at"],
      ["header-count", (keys) => raw.hset(keys.header, "history", "two"), 'the header HEADER field history holds "two", not a count'],
      ["header-future", (keys) => raw.hset(keys.header, "history_at", "9"), "the header HEADER says history_at 9, past version 1"],
      ["header-type", (keys) => raw.del(keys.header).then(() => raw.set(keys.header, "x")), "the header key HEADER is a string, not a hash"],
      ["list-type", (keys) => raw.del(keys.system).then(() => raw.set(keys.system, "x")), "the system list key SYSTEM is a string, not a list"],
      ["no-version", (keys) => raw.del(keys.version), "a state is stored without its version"],
    ];
    for (const [label, damage, detail] of damages) {
      const id = `tenant/layout-${label}`;
      const keys = keysOf(id);
      await conversations.commit({ conversationId: id, deltas: [appendHistory(textMessage("", Role.USER, "one"), textMessage("", Role.ASSISTANT, "two"))] }, callOptions);
      await damage(keys);
      const before = await snapshot(id, "k");
      const expected = `conversation "${id}" is corrupt in the store: ${detail.replace("KEY", keys.history).replace("HEADER", keys.header).replace("SYSTEM", keys.system)}`;
      for (const call of [
        () => conversations.getState({ conversationId: id }, callOptions),
        () => conversations.commit({ conversationId: id, deltas: say("x") }, callOptions),
        () => conversations.commit({ conversationId: id, expectedVersion: 1n, deltas: say("x"), idempotencyKey: "k" }, callOptions),
        () => conversations.clear({ conversationId: id }, callOptions),
      ]) {
        const error = await rejection(call());
        expect([label, error.code]).toEqual([label, Code.DataLoss]);
        expect(error.rawMessage).toBe(expected);
      }
      expect(await snapshot(id, "k")).toEqual(before);
    }
    expect(await serving()).toBe(ServingStatus.SERVING);
  });

  it("lists past corrupt conversations, leaving them out of the page", async () => {
    const { conversations, raw } = deployment;
    const ids = ["1", "2", "3", "4", "5"].map((suffix) => `listing/${suffix}`);
    for (const id of ids) await conversations.commit({ conversationId: id, deltas: say(id) }, callOptions);
    await raw.set(keysOf(ids[1]!).version, "not a version");
    await raw.del(keysOf(ids[3]!).version);
    await raw.rpush(keysOf(ids[3]!).version, "a list");
    // Listing reads versions only: a corrupt state is listed, and answered DATA_LOSS when read.
    await raw.set(keysOf(ids[4]!).version, "2");
    await raw.lset(keysOf(ids[4]!).history, 0, Buffer.from([0xff, 0xff]));
    await raw.hset(keysOf(ids[4]!).header, "history_at", "2");
    const listed: [string, bigint][] = [];
    let pageToken = "";
    do {
      const page = await conversations.listConversations({ prefix: "listing/", pageSize: 2, pageToken }, callOptions);
      listed.push(...page.conversations.map((summary): [string, bigint] => [summary.conversationId, summary.version]));
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    expect(listed).toEqual([
      ["listing/1", 1n],
      ["listing/3", 1n],
      ["listing/5", 2n],
    ]);
    for (const id of [ids[1]!, ids[3]!, ids[4]!]) {
      expect((await rejection(conversations.getState({ conversationId: id }, callOptions))).code).toBe(Code.DataLoss);
    }
  });
});

// How long a test waits for health to change. Polls run every 100 ms, yet at load 20 (test/store
// beside other suites) health stayed SERVING for 5 s after a commit refused for memory, twice, in
// runs where the same test passed alone; the cause is not found. The wait bounds the test and
// measures nothing, so a longer one costs nothing when health changes at once.
const healthWaitMs = 20_000;

describe("a Redis at maxmemory with noeviction (real sidecar, real redis-server)", () => {
  let deployment: Deployment;
  beforeAll(async () => {
    deployment = await deploy(["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"]);
  });
  afterAll(async () => {
    await undeploy(deployment);
  });

  it("answers commits RESOURCE_EXHAUSTED writing nothing, keeps reads working, and is NOT_SERVING until memory is freed", async () => {
    const { conversations, health, raw, sidecar } = deployment;
    const status = async () => (await health.check({ service: "" }, callOptions)).status;
    const id = "tenant/full";
    await conversations.commit({ conversationId: id, deltas: say("before") }, callOptions);
    await expect.poll(status, { timeout: healthWaitMs }).toBe(ServingStatus.SERVING);

    // Fill Redis until it refuses 4 KiB writes (it counts a command's arguments against maxmemory).
    let filled = 0;
    for (const size of [256 * 1024, 64 * 1024, 16 * 1024, 4 * 1024]) {
      const filler = Buffer.alloc(size, 1);
      for (let refused = false; !refused && filled < 1_000; ) {
        refused = await raw.set(`filler:${filled}`, filler).then(
          () => false,
          (error: Error) => error.message.startsWith("OOM"),
        );
        if (!refused) filled++;
      }
    }
    expect(filled).toBeLessThan(1_000);
    // Pin maxmemory a little below what Redis holds now: in a loaded full run the 16 KiB commit
    // below once went through right after a 4 KiB write had been refused, most likely because
    // memory was freed meanwhile (not proven); over the limit, Redis refuses a write of any size.
    const used = Number(/^used_memory:(\d+)/m.exec(await raw.info("memory"))![1]);
    await raw.config("SET", "maxmemory", String(used - 64 * 1024));

    const before = await raw.get(keysOf(id).version);
    // A commit of 16 KiB, past what Redis takes now.
    const deltas = say("x".repeat(16 * 1024));
    const error = await rejection(conversations.commit({ conversationId: id, expectedVersion: 1n, deltas, idempotencyKey: "k" }, callOptions));
    expect(error.code).toBe(Code.ResourceExhausted);
    expect(error.rawMessage).toMatch(/^redis store is full while committing: Redis refuses writes at its maxmemory limit \(OOM command not allowed when used memory > 'maxmemory'\.\); reads still work/);
    expect(await raw.get(keysOf(id).version)).toBe(before);
    expect(await raw.exists(keysOf(id).record("k"))).toBe(0);
    expect((await conversations.getState({ conversationId: id }, callOptions)).state!.version).toBe(1n);
    await expect.poll(status, { timeout: healthWaitMs }).toBe(ServingStatus.NOT_SERVING);
    expect(sidecar.logs.some((line) => line.includes("NOT_SERVING") && line.includes("Redis refuses writes at its maxmemory limit"))).toBe(true);

    await raw.del(...Array.from({ length: filled }, (_, index) => `filler:${index}`));
    await raw.config("SET", "maxmemory", "4mb");
    await expect.poll(status, { timeout: healthWaitMs }).toBe(ServingStatus.SERVING);
    expect(await conversations.commit({ conversationId: id, expectedVersion: 1n, deltas, idempotencyKey: "k" }, callOptions)).toMatchObject({ version: 2n, replayed: false });
  });

  it("is NOT_SERVING while Redis is over maxmemory, before any commit was refused", async () => {
    const { health, raw } = deployment;
    const status = async () => (await health.check({ service: "" }, callOptions)).status;
    await expect.poll(status, { timeout: healthWaitMs }).toBe(ServingStatus.SERVING);
    // An operator lowers maxmemory below what Redis holds: every write is refused, small ones too.
    await raw.config("SET", "maxmemory", "1");
    try {
      await expect.poll(status, { timeout: healthWaitMs }).toBe(ServingStatus.NOT_SERVING);
    } finally {
      await raw.config("SET", "maxmemory", "4mb");
    }
    await expect.poll(status, { timeout: healthWaitMs }).toBe(ServingStatus.SERVING);
  });
});
