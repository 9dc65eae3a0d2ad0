import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "#gen/contextd/v1/message_pb";
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

// The tails a store keeps of conversations it committed on without a copy (store/kept-tails.ts)
// are bounded by --kept-tail-bytes: a sidecar committing to more conversations than fit keeps the
// most recent ones, and a conversation whose tail went is planned on a tail read again.
describe("RedisConversationStore: kept tails, bounded by --kept-tail-bytes", () => {
  it("stays within the bound while 30 conversations are committed on their tails; the newest are kept, the oldest read again", async () => {
    const writer = new RedisConversationStore(redis.url);
    const bound = 200_000;
    const cold = new RedisConversationStore(redis.url, { keptTailBytes: bound });
    const id = (index: number) => `kept-bound-${process.pid}-${index}`;
    const coldCommit = (index: number, messageId: string) =>
      cold.commit(id(index), undefined, [appendHistory(textMessage(messageId, Role.USER, "next"))], "", undefined, undefined, { withState: false });
    try {
      expect(await writer.connected()).toBe(true);
      expect(await cold.connected()).toBe(true);
      for (let index = 0; index < 30; index++) {
        await writer.commit(id(index), undefined, [appendHistory(...Array.from({ length: 200 }, (_, position) => textMessage(`m${position}`, Role.USER, `message ${position} `.repeat(10))))], "");
      }
      let largest = 0;
      for (let index = 0; index < 30; index++) {
        await coldCommit(index, "first");
        largest = Math.max(largest, cold.keptTails.bytes);
        expect(cold.keptTails.bytes).toBeLessThanOrEqual(bound);
      }
      // Each tail (64 messages of ~130 bytes, weighed as decoded) is a few tens of KB: several fit, not 30.
      expect(largest).toBeGreaterThan(bound / 2);
      expect(cold.keptTails.count).toBeGreaterThan(1);
      expect(cold.keptTails.count).toBeLessThan(30);
      const before = cold.commitTraffic;
      await coldCommit(29, "second");
      expect(cold.commitTraffic).toEqual({ ...before, writes: before.writes + 1, keptTailCommits: before.keptTailCommits + 1 });
      await coldCommit(0, "second");
      expect(cold.commitTraffic).toEqual({ ...before, tailReads: before.tailReads + 1, writes: before.writes + 2, keptTailCommits: before.keptTailCommits + 1 });
      for (const index of [0, 29]) expect((await writer.load(id(index))).history.slice(-2).map((message) => message.id)).toEqual(["first", "second"]);
    } finally {
      await Promise.all([writer.close(), cold.close()]);
    }
  }, 60_000);
});
