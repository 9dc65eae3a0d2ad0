import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listById } from "../../src/store/conversation-listing.js";
import { rememberedIdOverheadBytes } from "../../src/store/recent-ids.js";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { startRedis, type RedisProcess } from "../support/redis.js";
import { appendHistory, textMessage } from "./fixtures.js";
import { Role } from "#gen/contextd/v1/message_pb";

let redis: RedisProcess;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

// The Redis store remembers which conversations' listing entries it wrote (so a commit skips that
// write), bounded by --listed-id-bytes: filled past it, the memo stays within it, and what it
// forgot is written again by the conversation's next commit, so every conversation stays listed.
describe("RedisConversationStore: the memo of listing entries written, bounded by --listed-id-bytes", () => {
  it("stays within the bound while 200 conversations are committed, and lists every one", async () => {
    const prefix = `listed-${process.pid}`;
    const id = (index: number) => `${prefix}/conversation-${String(index).padStart(4, "0")}`;
    const weight = rememberedIdOverheadBytes + 2 * id(0).length;
    const bound = 20 * weight;
    const store = new RedisConversationStore(redis.url, { listedIdBytes: bound });
    try {
      expect(await store.connected()).toBe(true);
      for (let index = 0; index < 200; index++) {
        await store.commit(id(index), undefined, [appendHistory(textMessage("m", Role.USER, "hello"))], "");
        expect(store.listedIds.bytes).toBeLessThanOrEqual(bound);
      }
      expect(store.listedIds).toEqual({ count: 20, bytes: bound });
      // A conversation the memo forgot: its next commit writes the entry again (ZADD of an existing member).
      await store.commit(id(0), undefined, [appendHistory(textMessage("m2", Role.USER, "again"))], "");
      expect(store.listedIds).toEqual({ count: 20, bytes: bound });
      const listed: string[] = [];
      let token = "";
      do {
        const page = await store.list(listById(`${prefix}/`, 100, token));
        listed.push(...page.conversations.map((conversation) => conversation.conversationId));
        token = page.nextPageToken;
      } while (token !== "");
      expect(listed).toEqual(Array.from({ length: 200 }, (_, index) => id(index)));
    } finally {
      await store.close();
    }
  }, 60_000);
});
