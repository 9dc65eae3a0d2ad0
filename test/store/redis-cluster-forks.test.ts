// On Redis Cluster a fork lives under its source's home, its fork tree's first conversation
// (redis-scripts.ts, conversationKeys), and shares the source's segment lists there as on one
// Redis; its own hash tag keeps a pointer to the home. What this file shows, on a real six-node
// cluster: the fork sends and writes no message; every other process (a second store, one started
// after the fork) finds the fork through the pointer and reads, commits to and watches it, equal
// to a memory store given the same operations; a conversation under a fork's id after the fork is
// deleted or expired lives under its own tag again, and a process that remembers the old home
// finds that out; a pointer left without its conversation (a delete cut between its two steps)
// never holds the id away from its own tag.
import { Role } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, type ConversationState } from "#gen/contextd/v1/state_pb";
import { toBinary } from "@bufbuild/protobuf";
import { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listById } from "../../src/store/conversation-listing.js";
import { AtRestCipher } from "../../src/store/at-rest-encryption.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { RedisConversationStore, type RedisStoreOptions } from "../../src/store/redis-conversation-store.js";
import { conversationKeys } from "../../src/store/redis-scripts.js";
import { randomSource } from "../support/random-messages.js";
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";
import { appendHistory, delta, longConversation, randomEdits, textMessage } from "./fixtures.js";

const keyPrefix = "contextd";
const ownKeys = (id: string) => conversationKeys(keyPrefix, id);
const homeKeys = (id: string, home: string) => conversationKeys(keyPrefix, id, home);
const encoded = (state: ConversationState) => Buffer.from(toBinary(ConversationStateSchema, state)).toString("base64");
const generatedId = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** `encoded` with the ids a store makes up itself (the results it writes for cancelled calls) all one: the two stores draw them apart. */
const comparable = (state: ConversationState) =>
  encoded({ ...state, history: state.history.map((message) => (generatedId.test(message.id) ? { ...message, id: "generated" } : message)) });

describe("Redis Cluster forks", () => {
  let cluster: RedisCluster;
  let raw: Cluster;
  const stores: RedisConversationStore[] = [];
  /** A store on the cluster, closed after the file. */
  const openStore = async (options: RedisStoreOptions = {}) => {
    const store = new RedisConversationStore({ clusterNodes: cluster.addresses.slice(0, 1) }, { watchBlockMs: 200, ...options });
    stores.push(store);
    expect(await store.connected()).toBe(true);
    return store;
  };
  beforeAll(async () => {
    cluster = await startRedisCluster();
    const [host, port] = cluster.addresses[0]!.split(":");
    raw = new Cluster([{ host: host!, port: Number(port) }]);
  }, 30_000);
  afterAll(async () => {
    await Promise.all(stores.map((store) => store.close()));
    raw?.disconnect();
    await cluster?.stop();
  });

  /** Calls of `commands` every master ran (scripts' commands included), from INFO commandstats. */
  async function commandCalls(commands: string[]): Promise<number> {
    let calls = 0;
    for (const master of raw.nodes("master")) {
      const stats = await master.info("commandstats");
      for (const command of commands) calls += Number(new RegExp(`^cmdstat_${command}:calls=(\\d+)`, "m").exec(stats)?.[1] ?? 0);
    }
    return calls;
  }


  it("forks 10,000 messages sending and writing no message: the fork's keys under its source's tag, its pointer under its own, a fork of the fork under the first conversation's", async () => {
    const store = await openStore();
    await longConversation(store, "cluster-root", 10_000);
    const written = await commandCalls(["rpush", "lpush", "copy", "restore"]);
    await store.fork("cluster-root", undefined, "cluster-fork");
    await store.fork("cluster-fork", undefined, "cluster-fork-of-fork");
    expect(await commandCalls(["rpush", "lpush", "copy", "restore"])).toBe(written);
    for (const fork of ["cluster-fork", "cluster-fork-of-fork"]) {
      expect(await raw.get(ownKeys(fork).home)).toBe("cluster-root");
      expect(await raw.exists(ownKeys(fork).version)).toBe(0);
      expect(await raw.get(homeKeys(fork, "cluster-root").version)).toBe("1");
      expect(await raw.hget(homeKeys(fork, "cluster-root").header, "history_list")).toBe(ownKeys("cluster-root").segments[1]);
      expect(await raw.llen(homeKeys(fork, "cluster-root").segments[1]!)).toBe(0);
      expect((await cluster.masterOf(homeKeys(fork, "cluster-root").version)).address).toBe((await cluster.masterOf(ownKeys("cluster-root").version)).address);
    }
    // A process that never saw the forks (a restarted sidecar) reads them through the pointer;
    // one that remembers no home (--listed-id-bytes 0) too, through the pointer every time.
    const forgetful = await openStore({ listedIdBytes: 0 });
    expect((await forgetful.load("cluster-fork-of-fork")).history).toHaveLength(10_000);
    await forgetful.commit("cluster-fork-of-fork", 1n, [appendHistory(textMessage("forgotten", Role.USER, "no memo"))], "");
    expect(await forgetful.currentVersion("cluster-fork-of-fork")).toBe(2n);
    expect(await raw.get(homeKeys("cluster-fork-of-fork", "cluster-root").version)).toBe("2");
    const restarted = await openStore();
    const fork = await restarted.load("cluster-fork-of-fork");
    expect(fork.history).toHaveLength(10_001);
    expect(fork.forkedFrom?.conversationId).toBe("cluster-fork");
    expect(await restarted.currentVersion("cluster-fork")).toBe(1n);
    expect(await restarted.currentVersion("cluster-fork-of-fork")).toBe(2n);
    const page = await restarted.list(listById("cluster-fork", 10, ""));
    expect(page.conversations.map((summary) => summary.conversationId)).toEqual(["cluster-fork", "cluster-fork-of-fork"]);
  }, 120_000);

  it("shares under the home under encryption at rest: a fork of a fork of 1,000 messages sends and writes none, each side's elements open as their sealer's in a process that never saw the forks, and no stored list element holds message text", async () => {
    const values = new AtRestCipher([{ id: "k1", key: Buffer.alloc(32, 9), tenant: "" }]);
    const store = await openStore({ values });
    await longConversation(store, "sealed-root", 1_000);
    const written = await commandCalls(["rpush", "lpush", "copy", "restore"]);
    await store.fork("sealed-root", undefined, "sealed-fork");
    await store.fork("sealed-fork", undefined, "sealed-fork-of-fork");
    expect(await commandCalls(["rpush", "lpush", "copy", "restore"])).toBe(written);
    expect(await raw.get(ownKeys("sealed-fork-of-fork").home)).toBe("sealed-root");
    // Each side appends its own sealed elements after the shared prefix; a prune makes the fork's segment one list of two writers.
    await store.commit("sealed-fork", 1n, [appendHistory(textMessage("f0", Role.USER, "fork's own"))], "");
    await store.commit("sealed-fork-of-fork", 1n, [appendHistory(textMessage("g0", Role.USER, "fork of fork's own"))], "");
    await store.commit("sealed-fork-of-fork", 2n, [delta({ case: "pruneHistory", value: { maxMessages: 600 } })], "");
    const restarted = await openStore({ values });
    for (const id of ["sealed-root", "sealed-fork", "sealed-fork-of-fork"]) expect(encoded(await restarted.load(id))).toBe(encoded(await store.load(id)));
    expect((await restarted.load("sealed-fork-of-fork")).history.map((message) => message.id).slice(-2)).toEqual(["m999", "g0"]);
    for (const key of [ownKeys("sealed-root").segments[1]!, homeKeys("sealed-fork", "sealed-root").segments[1]!, homeKeys("sealed-fork-of-fork", "sealed-root").segments[1]!]) {
      for (const element of await raw.lrangeBuffer(key, 0, -1)) expect(element.includes("xxxxxxxx")).toBe(false);
    }
  }, 120_000);

  it("reads, commits to and watches a fork from a process that never saw it, equal to a memory store given the same steps (commits, edits, rewinds, prunes, forks at the latest and a past version, deletes)", async () => {
    let clock = 1_700_000_000_000;
    const now = () => clock;
    const writer = await openStore({ now });
    const model = new MemoryConversationStore({ now });
    const random = randomSource(61);
    const edits = randomEdits(random);
    const root = "random-root";
    const first = [appendHistory(...Array.from({ length: 20 }, (_, index) => textMessage(`h${index}`, Role.USER, `hello ${index}`)))];
    await writer.commit(root, 0n, first, "");
    await model.commit(root, 0n, first, "");
    const live = new Set([root]);
    let forks = 0;
    let reader = await openStore({ now });
    for (let step = 0; step < 90; step++) {
      clock += 1_000;
      // Now and then a new process, which knows no home; otherwise one that remembers them.
      if (step % 15 === 14) reader = await openStore({ now });
      const ids = [...live];
      const id = ids[Math.floor(random() * ids.length)]!;
      const store = random() < 0.5 ? writer : reader;
      const draw = random();
      if (draw < 0.18 && live.size < 7) {
        const fork = `${root}-fork-${++forks}`;
        const current = await model.currentVersion(id);
        const at = random() < 0.5 || current === 1n ? undefined : current - 1n;
        const forked = await store.fork(id, at, fork);
        expect(forked).toEqual(await model.fork(id, at, fork));
        live.add(fork);
      } else if (draw < 0.25) {
        const version = await model.currentVersion(id);
        if (version > 2n) {
          const target = version - 1n;
          await store.rewind(id, version, target, "");
          await model.rewind(id, version, target, "");
        }
      } else if (draw < 0.3 && live.size > 1) {
        await store.delete(id, undefined);
        await model.delete(id, undefined);
        live.delete(id);
      } else {
        const state = await model.load(id);
        const batch = edits(state);
        if (batch === undefined) continue;
        const outcome = await store.commit(id, state.version, batch, "").then(
          (result) => result.version,
          (error: { code?: number }) => error.code,
        );
        const expected = await model.commit(id, state.version, batch, "").then(
          (result) => result.version,
          (error: { code?: number }) => error.code,
        );
        expect(outcome, `${id} at step ${step}`).toEqual(expected);
      }
      for (const other of [...live, id]) {
        const expected = comparable(await model.load(other));
        const read = await reader.load(other);
        expect(comparable(read), `${other} read by the reader after step ${step} on ${id}`).toBe(expected);
        expect(encoded(await writer.load(other)), `${other} read by the writer after step ${step} on ${id}`).toBe(encoded(read));
      }
    }
    expect(forks).toBeGreaterThan(3);
    // A watch from a process that never saw the fork gets the fork's next commit.
    const fork = [...live].find((id) => id !== root)!;
    const watcher = await openStore({ now });
    const watching = new AbortController();
    const version = await model.currentVersion(fork);
    const seen = (async () => {
      for await (const change of watcher.watch(fork, version, watching.signal)) return change.version;
    })();
    await writer.commit(fork, version, [appendHistory(textMessage("watched", Role.USER, "watched"))], "");
    expect(await seen).toBe(version + 1n);
    watching.abort();
  }, 300_000);

  it("puts a new conversation under a deleted fork's id under its own tag, and a process that remembers the old home reads and commits to that one", async () => {
    const remembering = await openStore();
    await remembering.commit("deleted-home", 0n, [appendHistory(textMessage("r0", Role.USER, "root"))], "");
    await remembering.fork("deleted-home", undefined, "deleted-fork");
    expect((await remembering.load("deleted-fork")).version).toBe(1n);
    const other = await openStore();
    await other.delete("deleted-fork", undefined);
    expect(await raw.exists(ownKeys("deleted-fork").home)).toBe(0);
    expect(await raw.exists(homeKeys("deleted-fork", "deleted-home").version)).toBe(0);
    await other.commit("deleted-fork", 0n, [appendHistory(textMessage("n0", Role.USER, "new"))], "");
    expect(await raw.get(ownKeys("deleted-fork").version)).toBe("1");
    // The first store still remembers the home: it finds nothing there and reads the own tag.
    expect((await remembering.load("deleted-fork")).history.map((message) => message.id)).toEqual(["n0"]);
    await remembering.commit("deleted-fork", 1n, [appendHistory(textMessage("n1", Role.USER, "more"))], "");
    expect(await raw.get(ownKeys("deleted-fork").version)).toBe("2");
    expect(await raw.exists(homeKeys("deleted-fork", "deleted-home").version)).toBe(0);
  });

  it("never holds an id away from its own tag with a pointer whose conversation is gone: reads find nothing, the next first commit removes the pointer and writes under the own tag, a fork claims it again", async () => {
    const store = await openStore();
    await store.commit("stranded-home", 0n, [appendHistory(textMessage("r0", Role.USER, "root"))], "");
    await store.fork("stranded-home", undefined, "stranded-fork");
    await store.delete("stranded-fork", undefined);
    // A delete cut between its two steps: the conversation's keys gone, its pointer not.
    await raw.set(ownKeys("stranded-fork").home, "stranded-home");
    const fresh = await openStore();
    expect(await fresh.currentVersion("stranded-fork")).toBe(0n);
    expect((await fresh.load("stranded-fork")).version).toBe(0n);
    await fresh.commit("stranded-fork", 0n, [appendHistory(textMessage("n0", Role.USER, "new"))], "");
    expect(await raw.exists(ownKeys("stranded-fork").home)).toBe(0);
    expect(await raw.get(ownKeys("stranded-fork").version)).toBe("1");
    expect((await store.load("stranded-fork")).history.map((message) => message.id)).toEqual(["n0"]);
    // A pointer naming another home (a fork's claim whose fork did not follow) is no bar either.
    await raw.set(ownKeys("claimed-elsewhere").home, "nowhere");
    await store.fork("stranded-home", undefined, "claimed-elsewhere");
    expect((await fresh.load("claimed-elsewhere")).history.map((message) => message.id)).toEqual(["r0"]);
    expect(await raw.exists(ownKeys("claimed-elsewhere").home)).toBe(0);
    // Once deleted, the id is free for a fork under a home again.
    await fresh.delete("stranded-fork", undefined);
    await fresh.fork("stranded-home", undefined, "stranded-fork");
    expect(await raw.get(ownKeys("stranded-fork").home)).toBe("stranded-home");
    expect((await store.load("stranded-fork")).history.map((message) => message.id)).toEqual(["r0"]);
  });

  it("removes an expired fork's pointer with its listing entries, and the id then commits under its own tag", async () => {
    // On CI's two loaded cores this test once found nothing to sweep: the expiry index is written
    // beside the commit, and a write lost then (to the default 2 s command timeout, suspected)
    // was written again only by the next commit. The sweep now writes it again (docs/retention.md,
    // tested in conversation-expiry.test.ts); the longer timeout keeps the load out of this test.
    const store = await openStore({ expirySweepMs: 0, commandTimeoutMs: 20_000 });
    await store.commit("expiring-home", 0n, [appendHistory(textMessage("r0", Role.USER, "root"))], "");
    await store.fork("expiring-home", undefined, "expiring-fork");
    await store.commit("expiring-fork", 1n, [delta({ case: "setMetadata", value: { idleTtlMs: 300n } })], "");
    // A keyed commit leaves an idempotency record under the home, which lives for its own TTL.
    await store.commit("expiring-fork", 2n, [appendHistory(textMessage("f0", Role.USER, "keyed"))], "keyed-commit");
    const record = homeKeys("expiring-fork", "expiring-home").idempotency("keyed-commit");
    expect(await raw.exists(record)).toBe(1);
    await raw.persist(record);
    await expect.poll(() => raw.exists(homeKeys("expiring-fork", "expiring-home").version), { timeout: 5_000 }).toBe(0);
    expect(await store.sweepExpired()).toBeGreaterThanOrEqual(1);
    expect(await raw.exists(ownKeys("expiring-fork").home)).toBe(0);
    expect(await raw.exists(record)).toBe(0);
    await store.commit("expiring-fork", 0n, [appendHistory(textMessage("n0", Role.USER, "new"))], "");
    expect(await raw.get(ownKeys("expiring-fork").version)).toBe("1");
  });
});
