import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { Redis } from "ioredis";
import pg from "pg";
import { describe, expect, it, vi } from "vitest";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, type ConversationState, type Delta } from "#gen/contextd/v1/state_pb";
import type { CommitOutcome, ConversationStore } from "../../src/store/conversation-store.js";
import { PostgresConversationStore } from "../../src/store/postgres-conversation-store.js";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { startPostgres } from "../support/postgres.js";
import { startRedis } from "../support/redis.js";
import { startRedisCluster, type ClusterNode } from "../support/redis-cluster.js";
import { sharedStoreBackends, storesOnSharedBackend } from "../support/shared-store-backends.js";
import { appendHistory, textMessage } from "./fixtures.js";

// Two stores on one Redis (or one Postgres) taking a conversation's commits in turn, as two
// sidecars behind a round-robin balancer do: each finds its cached copy behind by the other's
// commits, reads only the messages appended since (the load script / contextd_load) and commits
// after them. A list caught up that way is
// checked only where the appended messages can change it (trustCaughtUpSegment); what the rules
// answer about the next commit must not depend on that: the same as a store that reads it fresh.

const toolCall = (id: string, callId: string): Message =>
  create(MessageSchema, { id, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: callId, name: "read_file", arguments: { data: "{}" } } } }] });
const toolResult = (id: string, callId: string): Message =>
  create(MessageSchema, { id, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, name: "read_file", payload: { text: "ok" } } } }] });

/** The outcome of a commit as comparable data: the stored ids, or the error's code and message. */
async function outcomeOf(store: ConversationStore, conversationId: string, deltas: Delta[]): Promise<unknown> {
  try {
    const outcome = await store.commit(conversationId, undefined, deltas, "");
    return { ids: outcome.state!.history.map((message) => message.id) };
  } catch (error) {
    if (!(error instanceof ConnectError)) throw error;
    return { code: Code[error.code], message: error.rawMessage };
  }
}

/**
 * Three rounds of `a` then `b` committing to one conversation, each store's commit made once the
 * other's notice caught it up (its catch-up started and finished): the reads and writes each such
 * commit made, every answer checked byte for byte against a fresh reader's state.
 */
async function alternatingTurns<Store extends RedisConversationStore | PostgresConversationStore>(
  a: Store,
  b: Store,
  commit: (store: Store) => Promise<CommitOutcome>,
  fresh: () => Promise<ConversationState>,
): Promise<{ reads: number; writes: number }[]> {
  const traffic: { reads: number; writes: number }[] = [];
  for (let round = 0; round < 3; round++) {
    for (const [store, other] of [[a, b], [b, a]] as const) {
      const catchUps = other.prefetch.catchUps;
      await commit(store);
      await vi.waitFor(() => expect([other.prefetch.catchUps, other.prefetch.caughtUp]).toEqual([catchUps + 1, catchUps + 1]), { timeout: 5_000 });
      const before = other.commitTraffic;
      const outcome = await commit(other);
      const after = other.commitTraffic;
      traffic.push({ reads: after.wholeReads - before.wholeReads + after.tailReads - before.tailReads, writes: after.writes - before.writes });
      expect(Buffer.from(toBinary(ConversationStateSchema, outcome.state!)).equals(Buffer.from(toBinary(ConversationStateSchema, await fresh())))).toBe(true);
    }
  }
  return traffic;
}

const backends = sharedStoreBackends("round_robin");

describe.each(backends)("%s store: sidecars taking turns (round-robin)", (_, start) => {
  const { newStore } = storesOnSharedBackend(start);

  it("each store catches up with the other's appends, tool rounds included, and commits after them", async () => {
    const [a, b] = [await newStore(), await newStore()];
    const id = "taking-turns";
    const expected: string[] = [];
    for (let turn = 0; turn < 12; turn++) {
      const store = turn % 2 === 0 ? a : b;
      // Every third turn leaves a tool call open for the other store to answer.
      const messages =
        turn % 3 === 0 ? [textMessage(`u${turn}`, Role.USER, "question"), toolCall(`a${turn}`, `call-${turn}`)] : turn % 3 === 1 ? [toolResult(`r${turn}`, `call-${turn - 1}`)] : [textMessage(`u${turn}`, Role.USER, "more")];
      const outcome = await store.commit(id, undefined, [appendHistory(...messages)], "");
      expected.push(...messages.map((message) => message.id));
      expect(outcome.version).toBe(BigInt(turn + 1));
      expect(outcome.state!.history.map((message) => message.id)).toEqual(expected);
    }
    expect((await (await newStore()).load(id)).history.map((message) => message.id)).toEqual(expected);
  });

  it("answers a commit after a catch-up as a store reading the conversation fresh would, refusals included", async () => {
    const [a, b] = [await newStore(), await newStore()];
    // Batches the rules may refuse after a tool call left open at the tail, and ones they take.
    const nextBatches: [string, Message[]][] = [
      ["a text before the result", [textMessage("late", Role.USER, "still there?")]],
      ["a result for another call", [toolResult("stray", "call-unknown")]],
      ["the result", [toolResult("answer", "call-open")]],
      ["a second call reusing the id", [toolCall("again", "call-open")]],
    ];
    for (const [index, [label, batch]] of nextBatches.entries()) {
      const id = `caught-up-${index}`;
      await a.commit(id, undefined, [appendHistory(textMessage("u0", Role.USER, "read it"))], "");
      // b caches the conversation, then falls one version behind.
      await b.load(id);
      await a.commit(id, undefined, [appendHistory(toolCall("call", "call-open"))], "");
      const fresh = await newStore();
      const freshAnswer = await (async () => {
        // A copy of the conversation that no store has cached: the fresh store reads it whole.
        const copy = `${id}-fresh`;
        await a.commit(copy, undefined, [appendHistory(textMessage("u0", Role.USER, "read it"), toolCall("call", "call-open"))], "");
        return outcomeOf(fresh, copy, [appendHistory(...batch)]);
      })();
      const caughtUpAnswer = await outcomeOf(b, id, [appendHistory(...batch)]);
      expect(JSON.stringify(caughtUpAnswer).replaceAll(`${id}-fresh`, id), label).toBe(JSON.stringify(freshAnswer).replaceAll(`${id}-fresh`, id));
    }
  });
});

describe("Redis store: a copy others wrote after is read first", () => {
  it("commits from a copy behind in two script calls (the read that catches it up, the commit), not three (a refused commit first)", async () => {
    const redis = await startRedis();
    const [a, b] = [new RedisConversationStore(redis.url), new RedisConversationStore(redis.url)];
    const raw = new Redis(redis.url);
    const scriptCalls = async () => {
      const stats = await raw.info("commandstats");
      return ["eval", "evalsha"].reduce((sum, name) => sum + Number(new RegExp(`^cmdstat_${name}:calls=(\\d+)`, "m").exec(stats)?.[1] ?? 0), 0);
    };
    try {
      await Promise.all([a.connected(), b.connected()]);
      const id = "read-first";
      let turn = 0;
      const commit = (store: RedisConversationStore) => store.commit(id, undefined, [appendHistory(textMessage(`m${turn++}`, Role.USER, "hi"))], "");
      // The first time b is behind it learns so from a refused commit; from then on it reads first.
      for (let round = 0; round < 2; round++) {
        await commit(a);
        await commit(b);
      }
      const perCommit: number[] = [];
      for (let round = 0; round < 4; round++) {
        await commit(a);
        const before = await scriptCalls();
        const outcome = await commit(b);
        perCommit.push((await scriptCalls()) - before);
        expect(outcome.state!.history.map((message) => message.id)).toEqual(Array.from({ length: turn }, (_, index) => `m${index}`));
      }
      expect(perCommit).toEqual([2, 2, 2, 2]);
      // Alone again, b commits from its copy unread: one script call.
      await commit(b);
      const before = await scriptCalls();
      await commit(b);
      expect((await scriptCalls()) - before).toBe(1);
    } finally {
      raw.disconnect();
      await a.close();
      await b.close();
      await redis.stop();
    }
  });
});

describe("Redis store: commit notices catch a follower's copy up before its next commit", () => {
  /** Two or more stores following conversations on one Redis, a raw connection, and EVAL/EVALSHA calls counted by INFO commandstats. */
  async function followers(count: number, prefetchConversations = 1_024) {
    const redis = await startRedis();
    const stores = Array.from({ length: count }, () => new RedisConversationStore(redis.url, { prefetchConversations }));
    const raw = new Redis(redis.url);
    await Promise.all(stores.map((store) => store.connected()));
    const scriptCalls = async () => {
      const stats = await raw.info("commandstats");
      return ["eval", "evalsha"].reduce((sum, name) => sum + Number(new RegExp(`^cmdstat_${name}:calls=(\\d+)`, "m").exec(stats)?.[1] ?? 0), 0);
    };
    let turn = 0;
    const commit = (store: RedisConversationStore, id: string) => store.commit(id, undefined, [appendHistory(textMessage(`m${turn++}`, Role.USER, "hi"))], "");
    /** Resolves once every catch-up `store` started has finished. */
    const settled = (store: RedisConversationStore) => vi.waitFor(() => expect(store.prefetch.caughtUp).toBe(store.prefetch.catchUps));
    /** Resolves once `store` started `catchUps` catch-ups in all and finished them. */
    const caughtUp = (store: RedisConversationStore, catchUps: number) =>
      vi.waitFor(() => expect([store.prefetch.catchUps, store.prefetch.caughtUp]).toEqual([catchUps, catchUps]), { timeout: 5_000 });
    const subscribers = async (id: string) => Number(((await raw.pubsub("NUMSUB", `contextd:{${id}}:changes`)) as [string, number])[1]);
    const stop = async () => {
      raw.disconnect();
      for (const store of stores) await store.close();
      await redis.stop();
    };
    return { redis, stores, raw, scriptCalls, commit, settled, caughtUp, subscribers, stop };
  }

  it("after the other store's notice, a commit is one script call and no read, and its state is a fresh reader's byte for byte", async () => {
    const { redis, stores: [a, b], scriptCalls, commit, caughtUp, subscribers, stop } = await followers(2);
    const freshLoad = async (id: string) => {
      const fresh = new RedisConversationStore(redis.url);
      try {
        await fresh.connected();
        return await fresh.load(id);
      } finally {
        await fresh.close();
      }
    };
    try {
      const id = "notified";
      // Taking turns, each finds the other wrote after its copy once and follows the conversation.
      for (let round = 0; round < 2; round++) {
        await commit(a!, id);
        await commit(b!, id);
      }
      await vi.waitFor(async () => expect(await subscribers(id)).toBe(2), { timeout: 5_000 });
      const perCommit: number[] = [];
      const reads: number[] = [];
      for (let round = 0; round < 4; round++) {
        for (const [store, other] of [[a!, b!], [b!, a!]] as const) {
          const catchUps = other.prefetch.catchUps;
          await commit(store, id);
          await caughtUp(other, catchUps + 1);
          const before = await scriptCalls();
          const { wholeReads, tailReads } = other.commitTraffic;
          const outcome = await commit(other, id);
          perCommit.push((await scriptCalls()) - before);
          reads.push(other.commitTraffic.wholeReads - wholeReads + other.commitTraffic.tailReads - tailReads);
          expect(Buffer.from(toBinary(ConversationStateSchema, outcome.state!)).equals(Buffer.from(toBinary(ConversationStateSchema, await freshLoad(id))))).toBe(true);
        }
      }
      expect(perCommit).toEqual([1, 1, 1, 1, 1, 1, 1, 1]);
      expect(reads).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
    } finally {
      await stop();
    }
  });

  it("catches a kept tail up the same way: the next commit without a copy is one script call", async () => {
    const { stores: [a, b], scriptCalls, commit, caughtUp, subscribers, stop } = await followers(2);
    try {
      const id = "notified-tail";
      await commit(a!, id);
      // b commits without asking for the state and holds no copy: it keeps the stored tail.
      const tailCommit = () => b!.commit(id, undefined, [appendHistory(textMessage(`t${Math.random()}`, Role.USER, "hi"))], "", undefined, undefined, { withState: false });
      await tailCommit();
      for (let round = 0; round < 2; round++) {
        await commit(a!, id);
        await tailCommit();
      }
      await vi.waitFor(async () => expect(await subscribers(id)).toBe(2), { timeout: 5_000 });
      const perCommit: number[] = [];
      for (let round = 0; round < 3; round++) {
        const catchUps = b!.prefetch.catchUps;
        await commit(a!, id);
        await caughtUp(b!, catchUps + 1);
        const before = await scriptCalls();
        const { keptTailCommits } = b!.commitTraffic;
        await tailCommit();
        perCommit.push((await scriptCalls()) - before);
        expect(b!.commitTraffic.keptTailCommits).toBe(keptTailCommits + 1);
      }
      expect(perCommit).toEqual([1, 1, 1]);
    } finally {
      await stop();
    }
  });

  it("follows at most --prefetch-conversations conversations", async () => {
    const { stores: [a, b], commit, stop } = await followers(2, 2);
    try {
      for (const id of ["one", "two", "three"]) {
        for (let round = 0; round < 2; round++) {
          await commit(a!, id);
          await commit(b!, id);
        }
      }
      expect([a!.prefetch.followed, b!.prefetch.followed]).toEqual([2, 2]);
    } finally {
      await stop();
    }
  });

  it("unfollows after three own commits with no notice, and after three notices with no own commit", async () => {
    const { stores: [a, b, c], commit, settled, subscribers, stop } = await followers(3);
    try {
      const id = "unfollowed";
      for (let round = 0; round < 2; round++) for (const store of [a!, b!, c!]) await commit(store, id);
      await vi.waitFor(async () => expect(await subscribers(id)).toBe(3), { timeout: 5_000 });
      await settled(b!);
      // a alone: its third commit in a row unfollows (it sent notices of the first two); b caught up on those two.
      const bCatchUps = b!.prefetch.catchUps;
      for (let turn = 0; turn < 3; turn++) await commit(a!, id);
      expect(a!.prefetch.followed).toBe(0);
      await settled(b!);
      expect(b!.prefetch.catchUps - bCatchUps).toBeLessThanOrEqual(2);
      // c and a take turns again (both follow once they find the other wrote); b, not turning it,
      // unfollows at the third notice and catches up no more.
      for (let turn = 0; turn < 8; turn++) await commit(turn % 2 === 0 ? c! : a!, id);
      await vi.waitFor(() => expect(b!.prefetch.followed).toBe(0));
      await settled(b!);
      const after = b!.prefetch.catchUps;
      for (let turn = 0; turn < 4; turn++) await commit(turn % 2 === 0 ? c! : a!, id);
      await vi.waitFor(async () => expect(await subscribers(id)).toBe(2), { timeout: 5_000 });
      expect(b!.prefetch.catchUps).toBe(after);
    } finally {
      await stop();
    }
  });

  it("runs one catch-up at a time per conversation; notices lost, repeated, out of order or false change no answer", async () => {
    const { redis, stores: [a, b], raw, commit, settled, subscribers, stop } = await followers(2);
    const fresh = new RedisConversationStore(redis.url);
    const ids = async (store: RedisConversationStore, id: string) => (await store.load(id)).history.map((message) => message.id);
    try {
      await fresh.connected();
      const id = "noticed";
      for (let round = 0; round < 2; round++) {
        await commit(a!, id);
        await commit(b!, id);
      }
      await vi.waitFor(async () => expect(await subscribers(id)).toBe(2), { timeout: 5_000 });
      const version = (await commit(a!, id)).version;
      // Ten notices at once, the real one among them, old and false ones: one catch-up, and at most
      // one more for the false version it found no further.
      await settled(b!);
      const catchUps = b!.prefetch.catchUps;
      const channel = `contextd:{${id}}:changes`;
      await Promise.all([...Array.from({ length: 8 }, (_, index) => raw.publish(channel, String(version - BigInt(index)))), raw.publish(channel, String(version + 5n)), raw.publish(channel, "not a version")]);
      await settled(b!);
      expect(b!.prefetch.catchUps - catchUps).toBeLessThanOrEqual(2);
      const outcome = await commit(b!, id);
      expect(outcome.version).toBe(version + 1n);
      expect(outcome.state!.history.map((message) => message.id)).toEqual(await ids(fresh, id));
      // The subscriber connection dropped: notices published meanwhile are lost, and the next
      // commit reads first, as without notices; subscribed again, notices catch up again.
      await raw.client("KILL", "TYPE", "pubsub");
      const lost = await commit(a!, id);
      const { wholeReads } = b!.commitTraffic;
      const afterLoss = await commit(b!, id);
      expect(afterLoss.version).toBe(lost.version + 1n);
      expect(afterLoss.state!.history.map((message) => message.id)).toEqual(await ids(fresh, id));
      // (its copy was current after the last notice, so it tried the copy first: refused, read, written)
      expect(b!.commitTraffic.wholeReads).toBe(wholeReads + 1);
      await vi.waitFor(async () => expect(await subscribers(id)).toBe(2), { timeout: 5_000 });
      for (let round = 0; round < 2; round++) {
        await commit(a!, id);
        await commit(b!, id);
      }
      const before = b!.prefetch.catchUps;
      await commit(a!, id);
      await vi.waitFor(() => expect(b!.prefetch.caughtUp).toBe(before + 1), { timeout: 5_000 });
      const reads = b!.commitTraffic.wholeReads;
      const last = await commit(b!, id);
      expect(b!.commitTraffic.wholeReads).toBe(reads);
      expect(last.state!.history.map((message) => message.id)).toEqual(await ids(fresh, id));
    } finally {
      await fresh.close();
      await stop();
    }
  });
});

describe("Redis Cluster store: sharded commit notices catch a follower's copy up before its next commit", () => {
  it("after the other store's SPUBLISH a commit makes no read and one write, the subscription on the slot's master only, before and after a failover", async () => {
    const cluster = await startRedisCluster();
    const open = () => new RedisConversationStore({ clusterNodes: cluster.addresses }, { prefetchConversations: 1_024 });
    const [a, b] = [open(), open()];
    const nodes = new Map(cluster.nodes.map((node) => [node.port, new Redis({ port: node.port, lazyConnect: true })]));
    const id = "notified";
    const channel = `contextd:{${id}}:changes`;
    /** What each node's PUBSUB SHARDNUMSUB says of the channel: the subscribers there, by port. */
    const subscribersByNode = async () =>
      Object.fromEntries(await Promise.all(cluster.nodes.map(async (node) => [node.port, Number(((await nodes.get(node.port)!.pubsub("SHARDNUMSUB", channel)) as [string, number])[1])])));
    /** Both stores subscribed on `master` and on no other node (every node's PUBSUB SHARDCHANNELS). */
    const subscribedOn = async (master: ClusterNode) => {
      await vi.waitFor(async () => expect(await subscribersByNode()).toEqual(Object.fromEntries(cluster.nodes.map((node) => [node.port, node === master ? 2 : 0]))), { timeout: 10_000 });
      for (const node of cluster.nodes) expect(await nodes.get(node.port)!.pubsub("SHARDCHANNELS")).toEqual(node === master ? [channel] : []);
    };
    const fresh = async () => {
      const store = new RedisConversationStore({ clusterNodes: cluster.addresses });
      try {
        await store.connected();
        return await store.load(id);
      } finally {
        await store.close();
      }
    };
    let turn = 0;
    const commit = (store: RedisConversationStore) => store.commit(id, undefined, [appendHistory(textMessage(`m${turn++}`, Role.USER, "hi"))], "");
    const turns = () => alternatingTurns(a, b, commit, fresh);
    try {
      await Promise.all([a.connected(), b.connected()]);
      for (let round = 0; round < 2; round++) {
        await commit(a);
        await commit(b);
      }
      expect([a.prefetch.followed, b.prefetch.followed]).toEqual([1, 1]);
      const master = await cluster.masterOf(channel);
      await subscribedOn(master);
      expect(await turns()).toEqual(Array.from({ length: 6 }, () => ({ reads: 0, writes: 1 })));

      // A manual failover: the old master turns replica, keeps its connections and drops the slot's
      // subscriptions. Each store's first command to the slot is MOVED, its cluster client
      // refreshes the slot map, and so does its notice subscriber, which subscribes again on the new
      // master. a's commit meanwhile may go unheard: b's next commit then reads first, as without notices.
      const replica = await cluster.replicaOf(master);
      await cluster.promote(replica);
      await cluster.settled();
      await commit(a);
      const afterFailover = await commit(b);
      expect(afterFailover.state!.history.map((message) => message.id)).toEqual((await fresh()).history.map((message) => message.id));
      await subscribedOn(replica);
      expect([a.prefetch.followed, b.prefetch.followed]).toEqual([1, 1]);
      expect(await turns()).toEqual(Array.from({ length: 6 }, () => ({ reads: 0, writes: 1 })));
    } finally {
      for (const node of nodes.values()) node.disconnect();
      await a.close();
      await b.close();
      await cluster.stop();
    }
  }, 60_000);
});

describe("Postgres store: commit notifications catch a follower's copy up before its next commit", () => {
  it("after the other store's commit, a commit makes no read and one write; its own notifications start no catch-up; the LISTEN connection dropped and reopened", async () => {
    const postgres = await startPostgres();
    const url = await postgres.createDatabase("round_robin_notices");
    const [a, b] = [new PostgresConversationStore(url, { prefetchConversations: 1_024 }), new PostgresConversationStore(url, { prefetchConversations: 1_024 })];
    const fresh = async (id: string) => {
      const store = new PostgresConversationStore(url);
      try {
        await store.connected();
        return await store.load(id);
      } finally {
        await store.close();
      }
    };
    try {
      await Promise.all([a.connected(), b.connected()]);
      const id = "notified";
      let turn = 0;
      const commit = (store: PostgresConversationStore) => store.commit(id, undefined, [appendHistory(textMessage(`m${turn++}`, Role.USER, "hi"))], "");
      for (let round = 0; round < 2; round++) {
        await commit(a);
        await commit(b);
      }
      expect([a.prefetch.followed, b.prefetch.followed]).toEqual([1, 1]);
      // Both listening (LISTEN connections open after the first conversation followed).
      const raw = new pg.Client({ connectionString: url });
      await raw.connect();
      try {
        await vi.waitFor(async () => expect((await raw.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'LISTEN%'")).rows[0].n).toBe(2), { timeout: 5_000 });
      } finally {
        await raw.end();
      }
      const traffic = await alternatingTurns(a, b, commit, () => fresh(id));
      expect(traffic).toEqual(Array.from({ length: 6 }, () => ({ reads: 0, writes: 1 })));
      // a alone: its own notifications are not notices to it; the third commit in a row unfollows.
      const catchUps = a.prefetch.catchUps;
      for (let alone = 0; alone < 3; alone++) await commit(a);
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(a.prefetch.catchUps).toBe(catchUps);
      expect(a.prefetch.followed).toBe(0);
      // b's LISTEN connection dropped: a's commit meanwhile is not heard, b's next commit reads
      // first and answers right, and reopens the connection; notifications catch up again after.
      const admin = new pg.Client({ connectionString: url });
      await admin.connect();
      try {
        const listeners = async () => (await admin.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'LISTEN%'")).rows[0].n as number;
        // b, which made none of these three commits, unfollowed at the third notification (on
        // Postgres every commit notifies while anyone listens, whether or not its writer follows).
        await vi.waitFor(() => expect(b.prefetch.followed).toBe(0), { timeout: 5_000 });
        for (let round = 0; round < 2; round++) {
          await commit(a);
          await commit(b);
        }
        await vi.waitFor(async () => expect(await listeners()).toBe(2), { timeout: 5_000 });
        // Only b's: a's backend pid is not known to the test, so drop them all and let a's reopen too.
        await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'");
        await vi.waitFor(async () => expect(await listeners()).toBe(0), { timeout: 5_000 });
        // No catch-up still reading: one started by a notice of the rounds above would otherwise
        // read after a's next commit and bring b's copy current before b's commit (no read).
        await vi.waitFor(() => expect([a.prefetch.caughtUp, b.prefetch.caughtUp]).toEqual([a.prefetch.catchUps, b.prefetch.catchUps]), { timeout: 5_000 });
        const { wholeReads } = b.commitTraffic;
        await commit(a);
        const afterDrop = await commit(b);
        expect(afterDrop.state!.history.map((message) => message.id)).toEqual((await fresh(id)).history.map((message) => message.id));
        expect(b.commitTraffic.wholeReads).toBe(wholeReads + 1);
        // Both listeners reopened (each store's first followed commit after the drop reopens its
        // own) before a's next commit, so that b hears it: had it not (a loaded full run), b's
        // commit after it would be b's third without a notice and unfollow it.
        await vi.waitFor(async () => expect(await listeners()).toBe(2), { timeout: 5_000 });
        // Each of a's commits waited for until b caught up on its notice, so that no late notice
        // starts a catch-up counted against the next.
        for (let round = 0; round < 2; round++) {
          const before = b.prefetch.caughtUp;
          await commit(a);
          await vi.waitFor(() => expect(b.prefetch.caughtUp).toBe(before + 1), { timeout: 5_000 });
          const reads = b.commitTraffic.wholeReads;
          const last = await commit(b);
          expect(b.commitTraffic.wholeReads).toBe(reads);
          expect(Buffer.from(toBinary(ConversationStateSchema, last.state!)).equals(Buffer.from(toBinary(ConversationStateSchema, await fresh(id))))).toBe(true);
        }
      } finally {
        await admin.end();
      }
    } finally {
      await a.close();
      await b.close();
      await postgres.destroy();
    }
  });
});
