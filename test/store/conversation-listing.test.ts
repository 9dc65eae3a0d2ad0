import { Code, ConnectError } from "@connectrpc/connect";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { entriesToRead, listById, listScanAllowance, pageOf, positionOf, summaryOf, type ExaminedEntry, type ListQuery } from "../../src/store/conversation-listing.js";
import { conversationKeys, conversationUpdateIndexKey } from "../../src/store/redis-scripts.js";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { startRedis, type RedisProcess } from "../support/redis.js";
import { delta } from "./fixtures.js";

/** `count` entries newest first from `newest` ms down, one per ms, every tenth labelled shard=0. */
function entries(count: number, newest = 10_000): ExaminedEntry[] {
  return Array.from({ length: count }, (_, index) => {
    const id = `c${String(index).padStart(5, "0")}`;
    const updated = BigInt(newest - index);
    return { position: { conversationId: id, updatedAtUnixMs: updated }, summary: summaryOf(id, 1n, updated, updated, "", { shard: String(index % 10) }) };
  });
}

describe("pageOf and page tokens", () => {
  const byUpdate: ListQuery = { ...listById("", 10, ""), order: "updated" };

  it("reads page size + 1 entries without a filter and page size + the allowance with one", () => {
    expect(entriesToRead(byUpdate)).toBe(11);
    expect(entriesToRead({ ...byUpdate, labels: { shard: "0" } })).toBe(10 + listScanAllowance + 1);
  });

  it("answers a short page with a token when the examined entries run out before the page fills, and the next page goes on after them", () => {
    const query: ListQuery = { ...byUpdate, labels: { shard: "0" }, pageSize: 200 };
    const all = entries(3_000);
    const first = pageOf(query, all.slice(0, entriesToRead(query)));
    // 1,200 examined, every tenth matches: 120 conversations, and a token at the 1,200th.
    expect(first.conversations).toHaveLength(120);
    const position = positionOf({ ...query, pageToken: first.nextPageToken })!;
    expect(position).toEqual({ conversationId: "c01199", updatedAtUnixMs: 10_000n - 1_199n });
    const rest = pageOf(query, all.slice(1_200, 1_200 + entriesToRead(query)));
    expect(rest.conversations.map((summary) => summary.conversationId)[0]).toBe("c01200");
  });

  it("ends at the first entry older than updated_since in the update order", () => {
    const page = pageOf({ ...byUpdate, pageSize: 100, updatedSinceUnixMs: 9_995n }, entries(50));
    expect(page.conversations.map((summary) => summary.conversationId)).toEqual(["c00000", "c00001", "c00002", "c00003", "c00004", "c00005"]);
    expect(page.nextPageToken).toBe("");
  });

  it("refuses another order's token and a token it did not make with INVALID_ARGUMENT", () => {
    const idToken = pageOf(listById("", 1, ""), entries(3)).nextPageToken;
    const updateToken = pageOf(byUpdate, entries(30)).nextPageToken;
    const refusal = (query: ListQuery) => {
      try {
        positionOf(query);
      } catch (error) {
        return error as ConnectError;
      }
      throw new Error("not refused");
    };
    expect(refusal({ ...byUpdate, pageToken: idToken }).rawMessage).toMatch(/token of the id order, not of the updated order/);
    expect(refusal({ ...listById("", 1, ""), pageToken: updateToken }).rawMessage).toMatch(/token of the updated order, not of the id order/);
    const forged = "u" + Buffer.from("99999999999999999:x").toString("base64url");
    expect(refusal({ ...byUpdate, pageToken: forged }).code).toBe(Code.InvalidArgument);
  });
});

describe("the Redis store's update order for conversations written before it was kept", () => {
  let redis: RedisProcess;
  let raw: Redis;
  let store: RedisConversationStore;
  beforeAll(async () => {
    redis = await startRedis();
    raw = new Redis(redis.url);
    store = new RedisConversationStore(redis.url, { now: () => 1_800_000_000_000 });
    expect(await store.connected()).toBe(true);
  });
  afterAll(async () => {
    await store?.close();
    raw?.disconnect();
    await redis?.stop();
  });

  it("lists such a conversation by id with times 0, by update only after its next commit, which leaves created at 0", async () => {
    await store.commit("older", 0n, [delta({ case: "remember", value: { text: "x" } })], "");
    // What a sidecar of the previous release left: no listing times in the header, no update-order entry.
    await raw.hdel(conversationKeys("contextd", "older").header, "created_at_ms", "updated_at_ms", "title", "labels");
    await raw.zrem(conversationUpdateIndexKey("contextd"), "older");
    expect((await store.list(listById("", 10, ""))).conversations).toMatchObject([{ conversationId: "older", createdAtUnixMs: 0n, updatedAtUnixMs: 0n, labels: {} }]);
    const byUpdate: ListQuery = { ...listById("", 10, ""), order: "updated" };
    expect((await store.list(byUpdate)).conversations).toEqual([]);
    await store.commit("older", 1n, [delta({ case: "remember", value: { text: "y" } })], "");
    expect((await store.list(byUpdate)).conversations).toMatchObject([{ conversationId: "older", version: 2n, createdAtUnixMs: 0n, updatedAtUnixMs: 1_800_000_000_000n }]);
  });
});
