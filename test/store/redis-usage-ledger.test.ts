import { Code, ConnectError } from "@connectrpc/connect";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { usageKeys } from "../../src/store/redis-usage-ledger.js";
import type { UsageReport } from "../../src/store/usage-ledger.js";
import { startRedis, type RedisProcess } from "../support/redis.js";

// The Redis usage ledger's layout and what it answers for keys it did not write: DATA_LOSS naming
// the key, before anything is written (the contract suite covers the behaviour on every store).

let redis: RedisProcess;
let store: RedisConversationStore;
let raw: Redis;
beforeAll(async () => {
  redis = await startRedis();
  store = new RedisConversationStore(redis.url);
  expect(await store.connected()).toBe(true);
  raw = new Redis(redis.url);
}, 30_000);
afterAll(async () => {
  raw?.disconnect();
  await store?.close();
  await redis?.stop();
});

const report = (reportId: string): UsageReport => ({ reportId, turnId: "t", provider: 1, model: "gpt-4o", inputTokens: 10, outputTokens: 2, cachedInputTokens: 1, compiledTokens: 9, reportedAtMs: 1_700_000_000_000 });
const bounds = { maxEntriesPerConversation: 10 };

async function dataLoss(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error).toBeInstanceOf(ConnectError);
  expect((error as ConnectError).code).toBe(Code.DataLoss);
  return (error as ConnectError).rawMessage;
}

describe("RedisUsageLedger", () => {
  it("keeps a tenant's ledger under its hash tag: sums as integers, report ids in order, entries by report id", async () => {
    await store.recordUsage("acme", "acme/chat", report("r1"), bounds);
    const keys = usageKeys("contextd", "acme", "acme/chat");
    expect(keys.totals).toBe("contextd:usage:{acme}:c:acme/chat");
    expect(await raw.hgetall(keys.totals)).toMatchObject({ reports: "1", input_tokens: "10", output_tokens: "2", cached_input_tokens: "1", compiled_tokens: "9" });
    expect(await raw.hgetall(keys.tenant)).toMatchObject({ reports: "1", input_tokens: "10" });
    expect(await raw.lrange(keys.order, 0, -1)).toEqual(["r1"]);
    expect(await raw.zrange(keys.conversations, 0, -1)).toEqual(["acme/chat"]);
  });

  it("answers DATA_LOSS naming the key for a key of the wrong type or a total that is no integer, writing nothing", async () => {
    const wrongType = usageKeys("contextd", "corrupt-a", "corrupt-a/chat");
    await raw.set(wrongType.order, "not a list");
    expect(await dataLoss(store.recordUsage("corrupt-a", "corrupt-a/chat", report("r1"), bounds))).toBe(
      `usage ledger ${wrongType.totals} is corrupt in the store: ${wrongType.order} is a string, not a list`,
    );
    expect(await raw.exists(wrongType.tenant, wrongType.totals, wrongType.entries)).toBe(0);
    const notInteger = usageKeys("contextd", "corrupt-b", "corrupt-b/chat");
    await store.recordUsage("corrupt-b", "corrupt-b/chat", report("r1"), bounds);
    await raw.hset(notInteger.totals, "output_tokens", "many");
    expect(await dataLoss(store.readUsage("corrupt-b", "corrupt-b/chat"))).toContain(`${notInteger.totals} field output_tokens holds "many", not an integer`);
    expect(await dataLoss(store.recordUsage("corrupt-b", "corrupt-b/chat", report("r2"), bounds))).toContain("not an integer");
    expect(await raw.hget(notInteger.tenant, "reports")).toBe("1");
  });
});
