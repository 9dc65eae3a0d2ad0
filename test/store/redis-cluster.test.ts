import calculateSlot from "cluster-key-slot";
import { Role } from "../../gen/ts/contextd/v1/message_pb.js";
import type { Change } from "../../gen/ts/contextd/v1/conversation_service_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { conversationKeys } from "../../src/store/redis-scripts.js";
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";
import { appendHistory, textMessage } from "./fixtures.js";

// The Redis store on a real six-node cluster (three masters, one replica each): what the shared
// contract suite does not show by itself. The contract suite runs on a cluster too.

/** Ids that try every way of leaving the hash tag: braces, the separator, the escape character, nothing at all. */
const hostileIds = ["", "a", "{", "}", "{}", "}{", "a}:x", "a}:idempotency:x", "x{y}z", "%", "%7B", "%7D%3A", ":", "::", "tenant/conv-42", "é😀", "{".repeat(50) + "}".repeat(50)];

describe("Redis Cluster key layout", () => {
  it("keeps every key of a conversation, idempotency records included, in the one slot of its escaped id", () => {
    const slotsSeen = new Set<number>();
    for (const id of hostileIds) {
      const keys = conversationKeys("contextd", id);
      const all = [keys.version, keys.header, ...keys.segments, keys.changes, ...["", "k", "}", "{x}", "a:b", "%"].map((key) => keys.idempotency(key))];
      const slot = calculateSlot(keys.version);
      for (const key of all) expect(calculateSlot(key), `${JSON.stringify(id)}: ${key}`).toBe(slot);
      slotsSeen.add(slot);
    }
    // Different ids land in different slots: the tag is the id, not something all of them share.
    expect(slotsSeen.size).toBeGreaterThan(hostileIds.length / 2);
  });
});

describe("Redis Cluster store", () => {
  let cluster: RedisCluster;
  let store: RedisConversationStore;
  beforeAll(async () => {
    cluster = await startRedisCluster();
    store = new RedisConversationStore({ clusterNodes: cluster.addresses }, { watchBlockMs: 200 });
    expect(await store.connected()).toBe(true);
  }, 30_000);
  afterAll(async () => {
    await store?.close();
    await cluster?.stop();
  });

  it("commits, loads, lists and watches conversations whose ids try to break out of the hash tag", async () => {
    for (const [index, id] of hostileIds.entries()) {
      const committed = await store.commit(id, 0n, [appendHistory(textMessage(`m${index}`, Role.USER, id))], `key}{:${index}`);
      expect(committed.version).toBe(1n);
      expect((await store.commit(id, 0n, [appendHistory(textMessage(`m${index}`, Role.USER, id))], `key}{:${index}`)).replayed).toBe(true);
      expect((await store.load(id)).history.map((message) => message.id)).toEqual([`m${index}`]);
    }
    // The conversations are spread over the masters, and one listing sees all of them.
    const masters = new Set(await Promise.all(hostileIds.map(async (id) => (await cluster.masterOf(conversationKeys("contextd", id).version)).address)));
    expect(masters.size).toBe(3);
    const listed: string[] = [];
    let token = "";
    do {
      const page = await store.list("", 5, token);
      listed.push(...page.conversations.map((summary) => summary.conversationId));
      token = page.nextPageToken;
    } while (token !== "");
    expect(listed).toEqual([...hostileIds].sort());
    const watch = new AbortController();
    const changes: Change[] = [];
    for await (const change of store.watch("a}:x", 0n, watch.signal)) {
      changes.push(change);
      break;
    }
    expect(changes.map((change) => change.version)).toEqual([1n]);
  });

  it("keeps a live Watch going when its conversation's slot moves to a new master (MOVED after a manual failover)", async () => {
    const id = "watched-through-failover";
    const keys = conversationKeys("contextd", id);
    await store.commit(id, 0n, [appendHistory(textMessage("before", Role.USER, "before"))], "");
    const watch = new AbortController();
    const seen: string[] = [];
    const watching = (async () => {
      for await (const change of store.watch(id, 0n, watch.signal)) {
        seen.push(...change.deltas.flatMap((delta) => (delta.operation.case === "appendMessages" ? delta.operation.value.messages.map((message) => message.id) : [])));
        if (seen.length === 2) watch.abort();
      }
    })();
    await expect.poll(() => seen.length).toBe(1);
    const master = await cluster.masterOf(keys.changes);
    const replica = await cluster.replicaOf(master);
    await cluster.promote(replica);
    await cluster.settled();
    expect((await cluster.masterOf(keys.changes)).address).toBe(replica.address);
    // The commit finds the new master by itself (MOVED from the old one); the watch follows.
    await expect.poll(async () => store.commit(id, 1n, [appendHistory(textMessage("after", Role.USER, "after"))], "after").then((outcome) => outcome.version, () => 0n), { timeout: 10_000 }).toBe(2n);
    await watching;
    expect(seen).toEqual(["before", "after"]);
  });
});
