import { Code, ConnectError } from "@connectrpc/connect";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "#gen/contextd/v1/message_pb";
import type { Change } from "#gen/contextd/v1/conversation_service_pb";
import { AtRestCipher, type StoredValues } from "../../src/store/at-rest-encryption.js";
import type { ConversationStore } from "../../src/store/conversation-store.js";
import { PostgresConversationStore } from "../../src/store/postgres-conversation-store.js";
import { conversationKeys } from "../../src/store/redis-scripts.js";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { listById } from "../../src/store/conversation-listing.js";
import { startPostgres, type PostgresProcess } from "../support/postgres.js";
import { startRedis, type RedisProcess } from "../support/redis.js";
import { appendHistory, delta, textMessage } from "./fixtures.js";

// Rotation, a missing key, a wrong key, tampered and moved ciphertext, on a real redis-server and
// a real PostgreSQL: what each read answers, from a store process with nothing cached.

const [k1, k2, wrong] = [Buffer.alloc(32, 1), Buffer.alloc(32, 2), Buffer.alloc(32, 3)];
const before = new AtRestCipher([{ id: "k1", key: k1, tenant: "" }]);
const rotated = new AtRestCipher([
  { id: "k2", key: k2, tenant: "" },
  { id: "k1", key: k1, tenant: "" },
]);
const retired = new AtRestCipher([{ id: "k2", key: k2, tenant: "" }]);
const misconfigured = new AtRestCipher([{ id: "k1", key: wrong, tenant: "" }]);

let redis: RedisProcess;
let postgres: PostgresProcess;
beforeAll(async () => {
  [redis, postgres] = await Promise.all([startRedis(), startPostgres()]);
}, 30_000);
afterAll(async () => {
  await Promise.all([redis?.stop(), postgres?.destroy()]);
});

let counter = 0;
const freshId = (label: string) => `${label}-${process.pid}-${++counter}`;

async function rejection(promise: Promise<unknown>): Promise<ConnectError> {
  const error = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error, "expected a rejection").toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

/** The key id a stored value names (see at-rest-encryption.ts for the format). */
const keyIdOf = (stored: Buffer) => stored.subarray(3, 3 + stored[2]!).toString("ascii");

async function changesOf(store: ConversationStore, conversationId: string, count: number): Promise<Change[]> {
  const controller = new AbortController();
  const changes: Change[] = [];
  try {
    for await (const change of store.watch(conversationId, 0n, controller.signal)) {
      changes.push(change);
      if (changes.length === count) break;
    }
  } finally {
    controller.abort();
  }
  return changes;
}

/** Raw access to what a store kept of a conversation: its history entries, its rest and its changes, read and overwritten. */
interface RawAccess {
  history(conversationId: string): Promise<Buffer[]>;
  setHistory(conversationId: string, position: number, bytes: Buffer): Promise<void>;
  rest(conversationId: string): Promise<Buffer>;
  setRest(conversationId: string, bytes: Buffer): Promise<void>;
  change(conversationId: string, version: number): Promise<Buffer>;
  setChange(conversationId: string, version: number, bytes: Buffer): Promise<void>;
  close(): Promise<void>;
}

const backends: [string, (values: StoredValues | undefined) => ConversationStore, () => Promise<RawAccess>, (conversationId: string, segment: string, position: number) => string][] = [
  [
    "redis",
    (values) => new RedisConversationStore(redis.url, { watchBlockMs: 200, ...(values ? { values } : {}) }),
    async () => {
      const raw = new Redis(redis.url);
      const keys = (id: string) => conversationKeys("contextd", id);
      return {
        history: (id) => raw.lrangeBuffer(keys(id).segments[1]!, 0, -1),
        setHistory: async (id, position, bytes) => void (await raw.lset(keys(id).segments[1]!, position, bytes)),
        rest: async (id) => (await raw.hgetBuffer(keys(id).header, "rest"))!,
        setRest: async (id, bytes) => void (await raw.hset(keys(id).header, "rest", bytes)),
        change: async (id, version) => (await raw.xrangeBuffer(keys(id).changes, `${version}-0`, `${version}-0`))[0]![1][1]!,
        // A stream entry is not overwritten in place: the stream is written anew with the entry changed.
        setChange: async (id, version, bytes) => {
          const entries = await raw.xrangeBuffer(keys(id).changes, "-", "+");
          await raw.del(keys(id).changes);
          for (const [entryId, fields] of entries) await raw.xadd(keys(id).changes, String(entryId), "change", String(entryId) === `${version}-0` ? bytes : fields[1]!);
        },
        close: async () => void raw.disconnect(),
      };
    },
    (id, segment, position) => `message ${position} of the ${segment} list contextd:{${id}}:segment:${segment}`,
  ],
  [
    "postgres",
    (values) => new PostgresConversationStore(postgres.url, { watchPollMs: 200, ...(values ? { values } : {}) }),
    async () => {
      const client = new pg.Client({ connectionString: postgres.url });
      await client.connect();
      const id = (conversationId: string) => Buffer.from(conversationId, "utf8");
      const historyRows = async (conversationId: string) =>
        (await client.query<{ message: Buffer; position: string }>("SELECT message, position FROM contextd_messages WHERE conversation_id = $1 AND segment = 1 ORDER BY position", [id(conversationId)])).rows;
      return {
        history: async (conversationId) => (await historyRows(conversationId)).map((row) => row.message),
        setHistory: async (conversationId, position, bytes) => {
          const row = (await historyRows(conversationId))[position]!;
          await client.query("UPDATE contextd_messages SET message = $3 WHERE conversation_id = $1 AND segment = 1 AND position = $2", [id(conversationId), row.position, bytes]);
        },
        rest: async (conversationId) => (await client.query<{ rest: Buffer }>("SELECT rest FROM contextd_conversations WHERE id = $1", [id(conversationId)])).rows[0]!.rest,
        setRest: async (conversationId, bytes) => void (await client.query("UPDATE contextd_conversations SET rest = $2 WHERE id = $1", [id(conversationId), bytes])),
        change: async (conversationId, version) =>
          (await client.query<{ change: Buffer }>("SELECT change FROM contextd_changes WHERE conversation_id = $1 AND version = $2", [id(conversationId), version])).rows[0]!.change,
        setChange: async (conversationId, version, bytes) => void (await client.query("UPDATE contextd_changes SET change = $3 WHERE conversation_id = $1 AND version = $2", [id(conversationId), version, bytes])),
        close: () => client.end(),
      };
    },
    (_id, segment, position) => `message ${position} of the ${segment} segment`,
  ],
];

describe.each(backends)("encryption at rest on the %s store", (name, open, rawAccess, entryName) => {
  let raw: RawAccess;
  const stores: ConversationStore[] = [];
  /** A store process with nothing cached. */
  const fresh = async (values: StoredValues | undefined) => {
    const store = open(values);
    stores.push(store);
    expect(await (store as RedisConversationStore | PostgresConversationStore).connected()).toBe(true);
    return store;
  };
  beforeAll(async () => {
    raw = await rawAccess();
  });
  afterAll(async () => {
    await Promise.all(stores.map((store) => store.close()));
    await raw?.close();
  });

  it("rotation: a new first key writes, the old one still reads everything written before; once it is removed, FAILED_PRECONDITION naming it", async () => {
    const id = freshId("rotation");
    const writer = await fresh(before);
    await writer.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "before the rotation")), delta({ case: "setMetadata", value: { title: "old title" } })], "");
    expect((await raw.history(id)).map(keyIdOf)).toEqual(["k1"]);

    const afterRotation = await fresh(rotated);
    expect((await afterRotation.load(id)).history.map((message) => message.id)).toEqual(["u1"]);
    await afterRotation.commit(id, 1n, [appendHistory(textMessage("u2", Role.USER, "after the rotation"))], "");
    expect((await raw.history(id)).map(keyIdOf)).toEqual(["k1", "k2"]);
    expect(keyIdOf(await raw.change(id, 1))).toBe("k1");
    expect(keyIdOf(await raw.change(id, 2))).toBe("k2");
    const reader = await fresh(rotated);
    expect((await reader.load(id)).history.map((message) => message.id)).toEqual(["u1", "u2"]);
    expect((await changesOf(reader, id, 2)).map((change) => change.version)).toEqual([1n, 2n]);
    expect((await reader.list(listById(id, 10, ""))).conversations.map((summary) => summary.title)).toEqual(["old title"]);

    const withoutOld = await fresh(retired);
    const error = await rejection(withoutOld.load(id));
    expect(error.code).toBe(Code.FailedPrecondition);
    expect(error.rawMessage).toBe(
      `conversation "${id}": ${name === "redis" ? `the header contextd:{${id}}:header field rest` : "the header row's rest"} was encrypted with key "k1", which the configured encryption keys (--encryption-key-file or CONTEXTD_ENCRYPTION_KEYS) do not list; add it back to read this value`,
    );
    expect((await rejection(changesOf(withoutOld, id, 1))).code).toBe(Code.FailedPrecondition);
    expect((await rejection(withoutOld.list(listById(id, 10, "")))).rawMessage).toMatch(/title was encrypted with key "k1"/);
  });

  it("a wrong key under the listed id: DATA_LOSS naming where, never a garbled state", async () => {
    const id = freshId("wrong-key");
    await (await fresh(before)).commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "secret"))], "");
    const error = await rejection((await fresh(misconfigured)).load(id));
    expect(error.code).toBe(Code.DataLoss);
    expect(error.rawMessage).toMatch(/does not decrypt with key "k1": it was changed, or belongs to another conversation or field/);
  });

  it("tampered ciphertext of an entry, the rest or a change: DATA_LOSS naming which", async () => {
    const id = freshId("tampered");
    const writer = await fresh(rotated);
    await writer.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "one"), textMessage("u2", Role.USER, "two"))], "");
    const [, second] = await raw.history(id);
    const flipped = Buffer.from(second!);
    flipped[flipped.length - 20]! ^= 0x40;
    await raw.setHistory(id, 1, flipped);
    const entry = await rejection((await fresh(rotated)).load(id));
    expect(entry.code).toBe(Code.DataLoss);
    expect(entry.rawMessage).toBe(`conversation "${id}" is corrupt in the store: ${entryName(id, "history", 1)} does not decrypt with key "k2": it was changed, or belongs to another conversation or field`);
    await raw.setHistory(id, 1, second!);
    expect((await (await fresh(rotated)).load(id)).history).toHaveLength(2);

    const rest = await raw.rest(id);
    const restFlipped = Buffer.from(rest);
    restFlipped[restFlipped.length - 1]! ^= 0x01;
    await raw.setRest(id, restFlipped);
    expect((await rejection((await fresh(rotated)).load(id))).rawMessage).toMatch(/rest does not decrypt with key "k2"/);
    await raw.setRest(id, rest);

    const change = await raw.change(id, 1);
    const changeFlipped = Buffer.from(change);
    changeFlipped[25]! ^= 0x01;
    await raw.setChange(id, 1, changeFlipped);
    const watched = await rejection(changesOf(await fresh(rotated), id, 1));
    const changeName = name === "redis" ? "change stream entry 1-0" : "change row 1";
    expect([watched.code, watched.rawMessage]).toEqual([Code.DataLoss, `conversation "${id}" is corrupt in the store: ${changeName} does not decrypt with key "k2": it was changed, or belongs to another conversation or field`]);
  });

  it("a ciphertext copied into another conversation does not open there (the conversation id is bound into it)", async () => {
    const [source, target] = [freshId("moved-from"), freshId("moved-to")];
    const writer = await fresh(rotated);
    await writer.commit(source, 0n, [appendHistory(textMessage("s1", Role.USER, "the source's"))], "");
    await writer.commit(target, 0n, [appendHistory(textMessage("t1", Role.USER, "the target's"))], "");
    await raw.setHistory(target, 0, (await raw.history(source))[0]!);
    const error = await rejection((await fresh(rotated)).load(target));
    expect(error.code).toBe(Code.DataLoss);
    expect(error.rawMessage).toContain(`${entryName(target, "history", 0)} does not decrypt with key "k2"`);
  });

  it("a conversation written without encryption is refused by an encrypted store as DATA_LOSS saying so, not read as plaintext", async () => {
    const id = freshId("plain");
    await (await fresh(undefined)).commit(id, 0n, [appendHistory(textMessage("p1", Role.USER, "in the clear"))], "");
    const error = await rejection((await fresh(rotated)).load(id));
    expect(error.code).toBe(Code.DataLoss);
    expect(error.rawMessage).toMatch(/is not an encrypted value \(the sidecar runs with encryption at rest; was it written without\?\)/);
  });
});
