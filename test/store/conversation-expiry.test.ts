import { create } from "@bufbuild/protobuf";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema } from "#gen/contextd/v1/state_pb";
import { ConversationExpiry, hasExpired } from "../../src/store/conversation-expiry.js";
import { listById } from "../../src/store/conversation-listing.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { PostgresConversationStore } from "../../src/store/postgres-conversation-store.js";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { startPostgres, type PostgresProcess } from "../support/postgres.js";
import { startRedis, type RedisProcess } from "../support/redis.js";
import { appendHistory, delta, textMessage } from "./fixtures.js";

const idleTtl = (idleTtlMs: bigint) => delta({ case: "setMetadata", value: { idleTtlMs } });
const hello = () => appendHistory(textMessage("u1", Role.USER, "hello"));

async function eventually(check: () => Promise<boolean>): Promise<void> {
  for (let attempt = 0; attempt < 200; attempt++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error("the condition did not hold within 10 s");
}

describe("ConversationExpiry", () => {
  const expiry = new ConversationExpiry({ defaultMs: 1_000, perTenant: new Map([["acme", 50], ["forever", 0]]) });
  const state = (idleTtlMs: bigint) => create(ConversationStateSchema, { idleTtlMs });

  it("takes the conversation's own TTL, else its tenant's, else the default; -1 and 0 mean never", () => {
    expect(expiry.expiresAt("acme/a", state(0n), 10_000n)).toBe(10_050n);
    expect(expiry.expiresAt("acme/a", state(7n), 10_000n)).toBe(10_007n);
    expect(expiry.expiresAt("acme/a", state(-1n), 10_000n)).toBe(0n);
    expect(expiry.expiresAt("forever/a", state(0n), 10_000n)).toBe(0n);
    expect(expiry.expiresAt("other/a", state(0n), 10_000n)).toBe(11_000n);
    expect(expiry.expiresAt("no-tenant", state(0n), 10_000n)).toBe(11_000n);
    expect(new ConversationExpiry().expiresAt("acme/a", state(0n), 10_000n)).toBe(0n);
    expect([hasExpired(0n, 1e15), hasExpired(100n, 99), hasExpired(100n, 100)]).toEqual([false, false, true]);
  });
});

describe("MemoryConversationStore expiry sweep", () => {
  it("removes expired conversations a bounded batch at a time, soonest first, with an injected clock", async () => {
    let clock = 1_000_000;
    const store = new MemoryConversationStore({ now: () => clock, expirySweepMs: 0 });
    for (let index = 0; index < 5; index++) await store.commit(`c${index}`, 0n, [hello(), idleTtl(BigInt(100 + index))], "");
    await store.commit("kept", 0n, [hello()], "");
    clock += 102;
    // c0, c1 and c2 have expired: a batch of 2 takes the two soonest, the next one the third.
    expect(store.sweepExpired(2)).toBe(2);
    expect(store.sweepExpired(10)).toBe(1);
    expect(store.sweepExpired(10)).toBe(0);
    expect((await store.list(listById("", 10, ""))).conversations.map((summary) => summary.conversationId)).toEqual(["c3", "c4", "kept"]);
    // A commit renews: c3 committed to now expires 103 ms later.
    await store.commit("c3", 1n, [appendHistory(textMessage("u2", Role.USER, "again"))], "");
    clock += 10;
    expect(store.sweepExpired(10)).toBe(1);
    expect((await store.list(listById("", 10, ""))).conversations.map((summary) => summary.conversationId)).toEqual(["c3", "kept"]);
    await store.close();
  });
});

describe("RedisConversationStore expiry", () => {
  let redis: RedisProcess;
  beforeAll(async () => {
    redis = await startRedis();
  }, 30_000);
  afterAll(async () => {
    await redis?.stop();
  });

  it("gives every key of a conversation one expiry (the idempotency record no later), keeps them on -1, and sweeps its listing entries once Redis expired it", async () => {
    const keyPrefix = "expiry-test";
    const store = new RedisConversationStore(redis.url, { keyPrefix, expirySweepMs: 0 });
    const raw = new Redis(redis.url);
    try {
      await store.connected();
      await store.commit("kept", 0n, [hello(), idleTtl(60_000n)], "");
      const keys = await raw.keys(`${keyPrefix}:{kept}:*`);
      // The id index (the history list's `:ids`) is one of the conversation's keys: it expires and goes with them.
      expect(keys.sort()).toEqual([`${keyPrefix}:{kept}:changes`, `${keyPrefix}:{kept}:header`, `${keyPrefix}:{kept}:segment:history`, `${keyPrefix}:{kept}:segment:history:ids`, `${keyPrefix}:{kept}:version`]);
      const expiries = await Promise.all(keys.map((key) => raw.pexpiretime(key)));
      expect(new Set(expiries).size).toBe(1);
      expect(expiries[0]).toBeGreaterThan(0);
      await store.commit("kept", 1n, [idleTtl(-1n)], "never-key");
      for (const key of keys) expect(await raw.pttl(key)).toBe(-1);
      // The idempotency record keeps its own TTL (seconds) when the conversation does not expire.
      expect(await raw.ttl(`${keyPrefix}:{kept}:idempotency:never-key`)).toBeGreaterThan(0);

      await store.commit("brief", 0n, [hello(), idleTtl(1_000n)], "brief-key");
      const briefExpiry = await raw.pexpiretime(`${keyPrefix}:{brief}:version`);
      expect(await raw.pexpiretime(`${keyPrefix}:{brief}:idempotency:brief-key`)).toBe(briefExpiry);
      expect(await raw.zscore(`${keyPrefix}:conversations:expiry`, "brief")).toBe(String(briefExpiry));
      await eventually(async () => (await raw.exists(`${keyPrefix}:{brief}:version`)) === 0);
      // Left: the set naming its idempotency records, on its own TTL, for the sweep (or a new commit under the id) to remove them by.
      expect(await raw.keys(`${keyPrefix}:{brief}:*`)).toEqual([`${keyPrefix}:{brief}:idempotency-records`]);
      expect(await store.sweepExpired()).toBe(1);
      expect(await raw.keys(`${keyPrefix}:{brief}:*`)).toEqual([]);
      for (const index of ["conversations", "conversations:updated", "conversations:expiry"]) expect(await raw.zscore(`${keyPrefix}:${index}`, "brief")).toBeNull();
      expect(await raw.zscore(`${keyPrefix}:conversations`, "kept")).toBe("0");

      // A delete takes the keys, the idempotency records and the listing entries at once.
      expect((await raw.keys(`${keyPrefix}:{kept}:idempotency*`)).sort()).toEqual([`${keyPrefix}:{kept}:idempotency-records`, `${keyPrefix}:{kept}:idempotency:never-key`]);
      await store.delete("kept", 2n);
      expect(await raw.keys(`${keyPrefix}:{kept}:*`)).toEqual([]);
      expect(await raw.zscore(`${keyPrefix}:conversations`, "kept")).toBeNull();
    } finally {
      raw.disconnect();
      await store.close();
    }
  });

  it("sweeps an expired conversation behind a full batch of due entries whose conversations live on: those take their keys' expiry, or leave", async () => {
    const keyPrefix = "stuck-test";
    const index = `${keyPrefix}:conversations:expiry`;
    const store = new RedisConversationStore(redis.url, { keyPrefix, expirySweepMs: 0 });
    const raw = new Redis(redis.url);
    try {
      await store.connected();
      // Entries left due while their conversations live on, as a lost write of a later commit
      // leaves them: 100 that expire in a minute, then 5 that never expire.
      for (let at = 1; at <= 100; at++) {
        await store.commit(`alive-${at}`, 0n, [hello(), idleTtl(60_000n)], "");
        await raw.zadd(index, at, `alive-${at}`);
      }
      for (let at = 101; at <= 105; at++) {
        await store.commit(`never-${at}`, 0n, [hello()], "");
        await raw.zadd(index, at, `never-${at}`);
      }
      await store.commit("brief", 0n, [hello(), idleTtl(100n)], "");
      await eventually(async () => (await raw.exists(`${keyPrefix}:{brief}:version`)) === 0);
      expect(await raw.zscore(`${keyPrefix}:conversations`, "brief")).not.toBeNull();
      // Before, the first batch was the 100 living ones, none gone, and the pass ended there.
      expect(await store.sweepExpired()).toBe(1);
      for (const name of ["conversations", "conversations:updated", "conversations:expiry"]) expect(await raw.zscore(`${keyPrefix}:${name}`, "brief")).toBeNull();
      expect(await raw.zscore(index, "alive-1")).toBe(String(await raw.pexpiretime(`${keyPrefix}:{alive-1}:version`)));
      expect(Number(await raw.zscore(index, "alive-100"))).toBeGreaterThan(Date.now());
      expect(await raw.zscore(index, "never-101")).toBeNull();
      expect(await raw.zcard(index)).toBe(100);
      expect((await store.load("alive-1")).version).toBe(1n);
    } finally {
      raw.disconnect();
      await store.close();
    }
  });

  it("writes an expiry entry whose write failed at the next sweep, which then removes the expired conversation's listing entries", async () => {
    const keyPrefix = "unwritten-test";
    const index = `${keyPrefix}:conversations:expiry`;
    const raw = new Redis(redis.url);
    // A user that may write every key of the store but the expiry index: its entry writes fail
    // (NOPERM) while the commits apply.
    await raw.call("ACL", "SETUSER", "writer", "on", ">writer-secret", "&*", "+@all", `~${keyPrefix}:{*`, `~${keyPrefix}:usage:*`, `~${keyPrefix}:conversations`, `~${keyPrefix}:conversations:updated`);
    const store = new RedisConversationStore(`redis://writer:writer-secret@127.0.0.1:${redis.port}`, { keyPrefix, expirySweepMs: 0 });
    try {
      await store.connected();
      expect((await store.commit("unlisted-expiry", 0n, [hello(), idleTtl(200n)], "")).version).toBe(1n);
      expect(await raw.zscore(index, "unlisted-expiry")).toBeNull();
      await raw.call("ACL", "SETUSER", "writer", `~${index}`);
      await eventually(async () => (await raw.exists(`${keyPrefix}:{unlisted-expiry}:version`)) === 0);
      expect(await raw.zscore(`${keyPrefix}:conversations`, "unlisted-expiry")).not.toBeNull();
      // Before, nothing named the conversation to the sweep: its listing entries stayed for good.
      expect(await store.sweepExpired()).toBe(1);
      for (const name of ["conversations", "conversations:updated", "conversations:expiry"]) expect(await raw.zscore(`${keyPrefix}:${name}`, "unlisted-expiry")).toBeNull();
      expect(await store.sweepExpired()).toBe(0);
    } finally {
      await store.close();
      await raw.call("ACL", "DELUSER", "writer");
      raw.disconnect();
    }
  });
});

describe("PostgresConversationStore expiry", () => {
  let postgres: PostgresProcess;
  beforeAll(async () => {
    postgres = await startPostgres();
  }, 30_000);
  afterAll(async () => {
    await postgres?.destroy();
  });

  it("treats an expired conversation as absent at once and deletes its rows in batches of the sweep", async () => {
    const store = new PostgresConversationStore(postgres.url, { expirySweepMs: 0 });
    const client = new pg.Client({ connectionString: postgres.url });
    await client.connect();
    const rowsOf = async (id: string) => {
      const { rows } = await client.query<{ rows: string }>(
        `SELECT (SELECT count(*) FROM contextd_conversations WHERE id = $1) + (SELECT count(*) FROM contextd_messages WHERE conversation_id = $1) + (SELECT count(*) FROM contextd_changes WHERE conversation_id = $1) AS rows`,
        [Buffer.from(id)],
      );
      return Number(rows[0]!.rows);
    };
    try {
      expect(await store.connected()).toBe(true);
      for (let index = 0; index < 3; index++) await store.commit(`gone-${index}`, 0n, [hello(), idleTtl(100n)], "");
      await store.commit("stays", 0n, [hello()], "");
      expect(await rowsOf("gone-0")).toBe(3);
      // gone-2 was committed last, so it expires last.
      await eventually(async () => (await store.currentVersion("gone-2")) === 0n);
      // Still stored, already absent to every read.
      expect(await rowsOf("gone-0")).toBe(3);
      expect((await store.load("gone-0")).version).toBe(0n);
      expect((await store.list(listById("", 10, ""))).conversations.map((summary) => summary.conversationId)).toEqual(["stays"]);
      expect(await store.sweepExpired()).toBe(3);
      for (const id of ["gone-0", "gone-1", "gone-2"]) expect(await rowsOf(id)).toBe(0);
      expect(await rowsOf("stays")).toBe(3);
      // A commit to an expired conversation no sweep reached yet starts it anew.
      await store.commit("again", 0n, [hello(), idleTtl(100n)], "");
      await eventually(async () => (await store.currentVersion("again")) === 0n);
      expect((await store.commit("again", 0n, [hello()], "")).version).toBe(1n);
      expect(await rowsOf("again")).toBe(3);
      expect(await store.delete("stays", 1n)).toBe(1n);
      expect(await rowsOf("stays")).toBe(0);
    } finally {
      await client.end();
      await store.close();
    }
  });
});
