import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "#gen/contextd/v1/message_pb";
import { rememberedIdOverheadBytes } from "../../src/store/recent-ids.js";
import { escapeKeyPart } from "../../src/store/redis-scripts.js";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { startRedis, type RedisProcess } from "../support/redis.js";
import { appendHistory, textMessage } from "./fixtures.js";

let redis: RedisProcess;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

// The Redis store remembers the conversations whose stored id index a commit found stale, so its
// next commit writes the index whole; the memo was bounded at 100,000 ids whatever their length,
// now by --listed-id-bytes. Filled past it, it stays within it, the newest are remembered, and a
// forgotten one is found stale again by its next commit and made current by the one after.
describe("RedisConversationStore: the memo of stale id indexes, bounded by --listed-id-bytes", () => {
  it("stays within the bound while 40 conversations' indexes are found stale; the newest is rewritten, the oldest found stale again", async () => {
    const id = (index: number) => `stale-index-${process.pid}/conversation-${String(index).padStart(3, "0")}`;
    const weight = rememberedIdOverheadBytes + 2 * id(0).length;
    const bound = 10 * weight;
    const store = new RedisConversationStore(redis.url, { listedIdBytes: bound });
    const raw = new Redis(redis.url);
    const header = (index: number) => `contextd:{${escapeKeyPart(id(index))}}:header`;
    const indexIsCurrent = async (index: number) => (await raw.hget(header(index), "list_ids_at")) === (await raw.get(`contextd:{${escapeKeyPart(id(index))}}:version`));
    const say = (index: number, messageId: string) => store.commit(id(index), undefined, [appendHistory(textMessage(messageId, Role.USER, "hello"))], "");
    try {
      expect(await store.connected()).toBe(true);
      for (let index = 0; index < 40; index++) {
        await say(index, "first");
        // As a sidecar of the previous release leaves it: the index no longer says it is current.
        await raw.hdel(header(index), "list_ids_at");
        // From this process's copy: the script appends, finds the index stale and says so.
        await say(index, "second");
        expect(await indexIsCurrent(index)).toBe(false);
        expect(store.staleIdIndexIds.bytes).toBeLessThanOrEqual(bound);
      }
      expect(store.staleIdIndexIds).toEqual({ count: 10, bytes: bound });
      // The newest is remembered: its next commit writes the index whole.
      await say(39, "third");
      expect(await indexIsCurrent(39)).toBe(true);
      expect(store.staleIdIndexIds.count).toBe(9);
      // The oldest was forgotten: its next commit leaves the index stale and remembers it again, the one after rewrites it.
      await say(0, "third");
      expect(await indexIsCurrent(0)).toBe(false);
      expect(store.staleIdIndexIds.count).toBe(10);
      await say(0, "fourth");
      expect(await indexIsCurrent(0)).toBe(true);
      expect((await store.load(id(0))).history.map((message) => message.id)).toEqual(["first", "second", "third", "fourth"]);
    } finally {
      raw.disconnect();
      await store.close();
    }
  }, 60_000);
});
