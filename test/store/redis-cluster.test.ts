import calculateSlot from "cluster-key-slot";
import { Role } from "#gen/contextd/v1/message_pb";
import type { Change } from "#gen/contextd/v1/conversation_service_pb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { conversationKeys } from "../../src/store/redis-scripts.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { Cluster, Redis } from "ioredis";
import { startRedis } from "../support/redis.js";
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";
import { appendHistory, textMessage } from "./fixtures.js";
import { listById } from "../../src/store/conversation-listing.js";

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
      const page = await store.list(listById("", 5, token));
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

  it("writes a listing entry lost behind its back again with the conversation's next commit once indexRefreshMs has passed", async () => {
    let now = 1_000_000;
    const keyPrefix = "refresh";
    const refreshing = new RedisConversationStore({ clusterNodes: cluster.addresses }, { keyPrefix, indexRefreshMs: 60_000, now: () => now });
    const raw = new Cluster([{ host: "127.0.0.1", port: cluster.nodes[0]!.port }]);
    try {
      await refreshing.connected();
      await refreshing.commit("listed", 0n, [appendHistory(textMessage("m1", Role.USER, "hi"))], "");
      // As if the index's master failed over before replicating the entry.
      await raw.zrem(`${keyPrefix}:conversations`, "listed");
      now += 59_000;
      await refreshing.commit("listed", 1n, [appendHistory(textMessage("m2", Role.USER, "hi"))], "");
      expect((await refreshing.list(listById("", 10, ""))).conversations).toEqual([]);
      now += 2_000;
      await refreshing.commit("listed", 2n, [appendHistory(textMessage("m3", Role.USER, "hi"))], "");
      expect((await refreshing.list(listById("", 10, ""))).conversations.map((summary) => [summary.conversationId, summary.version])).toEqual([["listed", 3n]]);
    } finally {
      raw.disconnect();
      await refreshing.close();
    }
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
    // The other nodes learn the new configuration by gossip: the node asked may still name the old master for a moment.
    await expect.poll(async () => (await cluster.masterOf(keys.changes)).address, { timeout: 10_000 }).toBe(replica.address);
    // The commit finds the new master by itself (MOVED from the old one); the watch follows.
    await expect.poll(async () => store.commit(id, 1n, [appendHistory(textMessage("after", Role.USER, "after"))], "after").then((outcome) => outcome.version, () => 0n), { timeout: 10_000 }).toBe(2n);
    await watching;
    expect(seen).toEqual(["before", "after"]);
  });
  it("with waitReplicas, answers the first commit after a manual failover, with no read before it: the commit pipeline follows MOVED", async () => {
    // On another shard than the Watch test's: the masters vote for one failover per shard per two node timeouts.
    const watchedMaster = await cluster.masterOf(conversationKeys("contextd", "watched-through-failover").version);
    let id = "";
    for (let candidate = 0; id === ""; candidate++) {
      const master = await cluster.masterOf(conversationKeys("contextd", `committed-through-failover-${candidate}`).version);
      if (master !== watchedMaster) id = `committed-through-failover-${candidate}`;
    }
    const keys = conversationKeys("contextd", id);
    const waiting = new RedisConversationStore({ clusterNodes: cluster.addresses }, { waitReplicas: 1 });
    try {
      await waiting.connected();
      expect((await waiting.commit(id, 0n, [appendHistory(textMessage("before", Role.USER, "before"))], "before")).version).toBe(1n);
      const master = await cluster.masterOf(keys.version);
      await cluster.promote(await cluster.replicaOf(master));
      await cluster.settled();
      // The store still maps the slot to the old master, now a replica: the script is refused with
      // MOVED there while WAIT is refused for another reason, which the cluster client does not follow.
      const outcome = await waiting.commit(id, 1n, [appendHistory(textMessage("after", Role.USER, "after"))], "after");
      expect(outcome).toMatchObject({ version: 2n, replayed: false });
      expect((await store.load(id)).history.map((message) => message.id)).toEqual(["before", "after"]);
    } finally {
      await waiting.close();
    }
  });

  it("with waitReplicas, refuses a commit while its conversation's keys are mid-migration without writing anything (ASK, then TRYAGAIN at the importing node), and commits to the new owner after it (MOVED)", async () => {
    const id = "committed-while-migrating";
    const keys = conversationKeys("contextd", id);
    const slot = calculateSlot(keys.version);
    const source = await cluster.masterOf(keys.version);
    const roles = await Promise.all(cluster.nodes.map((node) => node.role()));
    const masters = cluster.nodes.filter((_, index) => roles[index] === "master");
    const target = masters.find((node) => node !== source)!;
    const clients = new Map(masters.map((node) => [node, new Redis(node.port)]));
    const [sourceClient, targetClient] = [clients.get(source)!, clients.get(target)!];
    const waiting = new RedisConversationStore({ clusterNodes: cluster.addresses }, { waitReplicas: 1, maxCommitAttempts: 1 });
    try {
      await waiting.connected();
      // Committed (and cached: the next commit goes straight to the script, without a read) before the migration.
      await waiting.commit(id, 0n, [appendHistory(textMessage("m1", Role.USER, "hi"))], "k1");
      const all = [keys.version, keys.header, ...keys.segments, keys.changes, keys.idempotency("k1"), ...keys.segmentIds, ...keys.segmentCalls, keys.idempotencyRecords];
      const present = (await Promise.all(all.map(async (key) => ((await sourceClient.exists(key)) === 1 ? [key] : [])))).flat();
      const [sourceId, targetId] = await Promise.all([sourceClient.call("CLUSTER", "MYID"), targetClient.call("CLUSTER", "MYID")]);
      await targetClient.call("CLUSTER", "SETSLOT", slot, "IMPORTING", String(sourceId));
      await sourceClient.call("CLUSTER", "SETSLOT", slot, "MIGRATING", String(targetId));
      await sourceClient.call("MIGRATE", "127.0.0.1", target.port, "", 0, 5_000, "KEYS", ...present);
      // The source has none of the keys: ASK. The importing node has some (the new idempotency
      // record is never there): TRYAGAIN, until the store gives up.
      const refused = await waiting.commit(id, 1n, [appendHistory(textMessage("m2", Role.USER, "hi"))], "k2").then(() => undefined, (error: unknown) => error);
      expect(refused).toBeInstanceOf(ConnectError);
      expect((refused as ConnectError).code).toBe(Code.Unavailable);
      expect((refused as ConnectError).rawMessage).toContain("TRYAGAIN");
      await targetClient.call("ASKING");
      expect(await targetClient.get(keys.version), "nothing written").toBe("1");
      // The migration ends: the slot is the target's, and the same commit goes through there.
      for (const client of clients.values()) await client.call("CLUSTER", "SETSLOT", slot, "NODE", String(targetId));
      await cluster.settled();
      expect(await waiting.commit(id, 1n, [appendHistory(textMessage("m2", Role.USER, "hi"))], "k2")).toMatchObject({ version: 2n, replayed: false });
      expect((await store.load(id)).history.map((message) => message.id)).toEqual(["m1", "m2"]);
    } finally {
      for (const client of clients.values()) client.disconnect();
      await waiting.close();
    }
  });
});

describe("replica acknowledgement (--redis-wait-replicas)", () => {
  it("waits the whole wait timeout when it is longer than the command timeout, and says how many replicas acknowledged", async () => {
    // WAIT answers only after its timeout; under the bare command timeout (shorter here) the
    // commit failed as "Command timed out", not saying whether any replica had acknowledged.
    const redis = await startRedis();
    const store = new RedisConversationStore(redis.url, { waitReplicas: 1, waitTimeoutMs: 400, commandTimeoutMs: 200 });
    try {
      await store.connected();
      const error = await store.commit("slow-wait", 0n, [appendHistory(textMessage("m1", Role.USER, "hi"))], "").then(() => undefined, (reason: unknown) => reason);
      expect((error as ConnectError).code).toBe(Code.Unavailable);
      expect((error as ConnectError).rawMessage).toContain("only 0 of 1 replicas acknowledged it within 400 ms");
    } finally {
      await store.close();
      await redis.stop();
    }
  });

  it("answers UNAVAILABLE for a commit too few replicas acknowledged; it stays applied on the master, and its retry replays it once a replica has it", async () => {
    // A lone Redis has no replica: WAIT 1 times out every time.
    const redis = await startRedis();
    const store = new RedisConversationStore(redis.url, { waitReplicas: 1, waitTimeoutMs: 50 });
    try {
      await store.connected();
      const commit = () => store.commit("unreplicated", 0n, [appendHistory(textMessage("m1", Role.USER, "hi"))], "key-1");
      const error = await commit().then(() => undefined, (reason: unknown) => reason);
      expect(error).toBeInstanceOf(ConnectError);
      expect((error as ConnectError).code).toBe(Code.Unavailable);
      expect((error as ConnectError).rawMessage).toContain(
        'conversation "unreplicated": version 1 was written on the Redis master but only 0 of 1 replicas acknowledged it within 50 ms, so a failover may lose it',
      );
      // Not rolled back: readers see it. Its retry finds the record but is still not answered as
      // applied (the replicas still lack it); once a replica has it, the retry is the replay.
      expect((await store.load("unreplicated")).version).toBe(1n);
      expect(((await commit().then(() => undefined, (reason: unknown) => reason)) as ConnectError).code).toBe(Code.Unavailable);
      const replica = await startRedis({ args: ["--replicaof", "127.0.0.1", String(redis.port)] });
      try {
        await expect.poll(() => commit().then((outcome) => outcome, () => undefined), { timeout: 10_000 }).toMatchObject({ version: 1n, replayed: true });
      } finally {
        await replica.stop();
      }
    } finally {
      await store.close();
      await redis.stop();
    }
  });
});
