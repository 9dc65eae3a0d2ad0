// A fork at the latest version on one Redis shares its source's segment lists (redis-scripts.ts,
// readHeader: a segment is a prefix of a shared list, then the conversation's own list) instead of
// copying them, and with them their id index (kept per list: redis-scripts.ts, idsOf). What this
// file shows, against a real redis-server: the fork writes no list element and no index entry (its
// memory grows by its few keys at any size), and its first commits are as cheap as the source's;
// neither conversation's writes (commit, rewind, edits, prune, delete) ever change what the other
// reads, and every conversation's index stays its state's ids; a delete or expiry of the source
// leaves the fork whole; the readers' bookkeeping goes with the last reader.
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, Segment, type ConversationState } from "#gen/contextd/v1/state_pb";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { conversationKeys } from "../../src/store/redis-scripts.js";
import { AtRestCipher, type StoredValues } from "../../src/store/at-rest-encryption.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { randomSource } from "../support/random-messages.js";
import { redisForFile } from "../support/redis-for-file.js";
import { expectForkCopyWeighedOnce } from "./fork-copy-weight.js";
import { appendHistory, delta, everyFieldToolRound, longConversation, randomEdits, textMessage } from "./fixtures.js";

const redis = redisForFile();
const openStore = redis.openStore;

const keyPrefix = "contextd";
const keysOf = (id: string) => conversationKeys(keyPrefix, id);
const encoded = (state: ConversationState) => Buffer.from(toBinary(ConversationStateSchema, state)).toString("base64");

/** The key the encrypted runs seal with (one key for every conversation). */
const cipher = new AtRestCipher([{ id: "k1", key: Buffer.alloc(32, 7), tenant: "" }]);

/** A state as a store with no cached copy reads it (every list read from Redis). */
const freshRead = (id: string) => freshReadWith(id, undefined);
async function freshReadWith(id: string, values: StoredValues | undefined): Promise<string> {
  const fresh = new RedisConversationStore(redis.url, { values });
  try {
    expect(await fresh.connected()).toBe(true);
    return encoded(await fresh.load(id));
  } finally {
    await fresh.close();
  }
}

/** Calls of each command Redis ran (scripts' commands included), from INFO commandstats. */
async function commandCalls(): Promise<Map<string, number>> {
  const calls = new Map<string, number>();
  for (const match of (await redis.raw.info("commandstats")).matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) calls.set(match[1]!, Number(match[2]));
  return calls;
}

/** Every message id of a state, sorted. */
const idsOf = (state: ConversationState) => [...state.system, ...state.history, ...state.memory, ...state.tools].map((message) => message.id).sort();

/** Per call id of the history's ASSISTANT messages, its latest call's name. */
function latestCalls(state: ConversationState): Record<string, string> {
  const latest: Record<string, string> = {};
  for (const message of state.history) if (message.role === Role.ASSISTANT) for (const part of message.parts) if (part.kind.case === "toolCall") latest[part.kind.value.id] = part.kind.value.name;
  return latest;
}

const usedMemory = async () => Number(/^used_memory:(\d+)/m.exec(await redis.raw.info("memory"))![1]);


describe("Redis shared segment lists", () => {
  it("forks 10,000 messages writing no list element and no id index entry: no COPY, RPUSH, LPUSH, SADD or HSET per message, no list of its own, the same few KB of memory at 1,000 and 10,000", async () => {
    const store = await openStore();
    const growth: number[] = [];
    // A first fork loads the fork script into Redis's script cache: not the fork's memory.
    await longConversation(store, "shared-warm-up", 1);
    await store.fork("shared-warm-up", undefined, "shared-warm-up-fork");
    for (const size of [1_000, 10_000]) {
      const source = `shared-source-${size}`;
      await longConversation(store, source, size);
      const before = await commandCalls();
      const memoryBefore = await usedMemory();
      await store.fork(source, undefined, `${source}-fork`);
      const forkKeys = keysOf(`${source}-fork`);
      growth.push((await usedMemory()) - memoryBefore);
      const after = await commandCalls();
      for (const command of ["rpush", "lpush", "lrange", "copy", "sadd", "hgetall"]) expect(after.get(command) ?? 0, command).toBe(before.get(command) ?? 0);
      // The fork's header fields are one HSET; no other HSET (none per message).
      expect((after.get("hset") ?? 0) - (before.get("hset") ?? 0), "hset").toBe(1);
      expect(await redis.raw.hget(forkKeys.header, "list_ids_at")).toBe("1");
      const indexed = await store.indexedIds(`${source}-fork`);
      expect(indexed!.current).toBe(true);
      expect(indexed!.ids.sort()).toEqual((await store.indexedIds(source))!.ids.sort());
      expect(indexed!.ids).toHaveLength(size);
      for (const key of [...forkKeys.segments, ...forkKeys.segmentIds, ...forkKeys.segmentCalls]) expect(await redis.raw.exists(key), key).toBe(0);
      expect(await redis.raw.llen(keysOf(source).segments[1]!)).toBe(size);
      expect(await redis.raw.hget(forkKeys.header, "history_list")).toBe(keysOf(source).segments[1]);
      expect(await redis.raw.hget(forkKeys.header, "history_shared")).toBe(String(size));
      expect(await freshRead(`${source}-fork`)).toBe(encoded(await store.load(`${source}-fork`)));
      expect((await store.load(`${source}-fork`)).history).toHaveLength(size);
    }
    // The fork's keys (header, version, change stream, reader entries) are ~6.4 KB at either size;
    // when it copied its source's id index it grew by it too: 54,656 bytes at 1,000 messages and
    // 537,632 at 10,000 (~54 bytes an id), where the messages are ~2 MB.
    console.log(`used_memory growth of a fork: ${growth[0]} bytes at 1,000 messages, ${growth[1]} at 10,000`);
    expect(growth[0]!).toBeLessThan(16 * 1024);
    expect(growth[1]!).toBeLessThan(16 * 1024);
  });

  it.each([
    ["plain", undefined],
    ["encrypted", cipher],
  ] as const)("keeps what each conversation reads through commits, rewinds, edits, prunes and deletes on the source and on forks, each byte-equal to a fresh reader's (%s)", async (name, values) => {
    const store = await openStore({ values });
    const freshRead = (id: string) => freshReadWith(id, values);
    const random = randomSource(32);
    const edits = randomEdits(random);
    const root = `diverging-${name}`;
    await store.commit(root, 0n, [appendHistory(...Array.from({ length: 30 }, (_, index) => textMessage(`h${index}`, Role.USER, `hello ${index}`)))], "");
    await store.commit(root, 1n, [delta({ case: "appendMessages", value: { segment: Segment.SYSTEM, messages: [textMessage("s0", Role.SYSTEM, "be kind")] } })], "");
    const live = new Map<string, string>([[root, await freshRead(root)]]);
    const callsBefore = await commandCalls();
    let forks = 0;
    for (let step = 0; step < 160; step++) {
      const ids = [...live.keys()];
      const id = ids[Math.floor(random() * ids.length)]!;
      const draw = random();
      if (draw < 0.15 && live.size < 8) {
        const fork = `${root}-fork-${++forks}`;
        // Half at a past version: shared when only appends came since, through the engine otherwise.
        const current = await store.currentVersion(id);
        await store.fork(id, random() < 0.5 || current === 1n ? undefined : current - 1n, fork);
        live.set(fork, await freshRead(fork));
      } else if (draw < 0.22) {
        const version = await store.currentVersion(id);
        if (version > 2n) await store.rewind(id, undefined, version - 1n - BigInt(Math.floor(random() * 2)), "");
      } else if (draw < 0.3) {
        const state = await store.load(id);
        if (state.history.length > 4) await store.commit(id, state.version, [delta({ case: "pruneHistory", value: { maxMessages: 3 } })], "");
      } else if (draw < 0.34 && live.size > 1) {
        await store.delete(id, undefined);
        live.delete(id);
        expect(await store.currentVersion(id)).toBe(0n);
      } else {
        const state = await store.load(id);
        const batch = edits(state);
        if (batch === undefined) continue;
        try {
          await store.commit(id, state.version, batch, "");
        } catch (error) {
          // A random edit the state does not take (a compaction inside a round...) writes nothing.
          expect((error as { code?: number }).code).toBeDefined();
        }
      }
      for (const [other, was] of live) {
        const now = await freshRead(other);
        if (other !== id) expect(now, `${other} after step ${step} on ${id}`).toBe(was);
        else expect(now, `${id} after step ${step}`).toBe(encoded(await store.load(id)));
        live.set(other, now);
        // Every live conversation's index is its state's ids and calls, current.
        const state = await store.load(other);
        const indexed = await store.indexedIds(other);
        expect(indexed!.current, `${other}'s index after step ${step} on ${id}`).toBe(true);
        expect(indexed!.ids.sort(), `${other}'s ids after step ${step} on ${id}`).toEqual(idsOf(state));
        expect(indexed!.calls, `${other}'s calls after step ${step} on ${id}`).toEqual(latestCalls(state));
      }
    }
    expect(forks).toBeGreaterThan(2);
    // The steps went through the copy-once paths: owners leaving lists to readers (RENAME) and
    // copies made their own (COPY).
    const callsAfter = await commandCalls();
    for (const command of ["rename", "copy"]) expect((callsAfter.get(command) ?? 0) - (callsBefore.get(command) ?? 0), command).toBeGreaterThan(0);
    for (const id of [...live.keys()]) await store.delete(id, undefined);
    // Every reader gone: no list, orphan or reader set of these conversations remains.
    expect(await redis.raw.keys(`${keyPrefix}:{${root}*`)).toEqual([]);
  });

  it("keeps the fork whole when the source is deleted, or recreated under its id, or starts to expire and does", async () => {
    const store = await openStore();
    await longConversation(store, "deleted-source", 2_000);
    await store.fork("deleted-source", undefined, "orphaned-fork");
    const forked = await freshRead("orphaned-fork");
    await store.delete("deleted-source", undefined);
    expect(await freshRead("orphaned-fork")).toBe(forked);
    await store.commit("deleted-source", 0n, [appendHistory(textMessage("new", Role.USER, "a new conversation"))], "");
    expect((await store.load("deleted-source")).history.map((message) => message.id)).toEqual(["new"]);
    expect(await freshRead("orphaned-fork")).toBe(forked);
    await store.commit("orphaned-fork", 1n, [appendHistory(textMessage("more", Role.USER, "more"))], "");
    expect((await store.load("orphaned-fork")).history).toHaveLength(2_001);
    await store.delete("orphaned-fork", undefined);
    await store.delete("deleted-source", undefined);
    expect(await redis.raw.keys(`${keyPrefix}:{deleted-source}*`)).toEqual([]);

    await longConversation(store, "expiring-source", 2_000);
    await store.fork("expiring-source", undefined, "surviving-fork");
    const survivor = await freshRead("surviving-fork");
    const version = await store.currentVersion("expiring-source");
    // The source takes a 300 ms idle TTL: it stops sharing first (its readers keep an orphan).
    await store.commit("expiring-source", version, [delta({ case: "setMetadata", value: { idleTtlMs: 300n } })], "");
    for (let attempt = 0; attempt < 100 && (await redis.raw.exists(keysOf("expiring-source").version)) === 1; attempt++) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await redis.raw.exists(keysOf("expiring-source").version)).toBe(0);
    expect(await freshRead("surviving-fork")).toBe(survivor);
    // The fork taking an expiry makes its segments its own, and the orphan goes with it.
    await store.commit("surviving-fork", 1n, [delta({ case: "setMetadata", value: { idleTtlMs: 60_000n } })], "");
    expect(await redis.raw.hget(keysOf("surviving-fork").header, "history_list")).toBeNull();
    expect(await redis.raw.llen(keysOf("surviving-fork").segments[1]!)).toBe(2_000);
    expect((await store.load("surviving-fork")).history).toHaveLength(2_000);
    await store.delete("surviving-fork", undefined);
    expect(await redis.raw.keys(`${keyPrefix}:{expiring-source}*`)).toEqual([]);
  });

  it("shares its source's id index with a fork: the fork's first commits read no list whole, refuse an id the source held before the fork, take one the source appended after it, and keep both indexes exactly their ids", async () => {
    const store = await openStore();
    await longConversation(store, "indexed-source", 5_000);
    await store.fork("indexed-source", undefined, "indexed-fork");
    const forkKeys = keysOf("indexed-fork");
    expect(await redis.raw.hget(forkKeys.header, "list_ids_at")).toBe("1");
    // The source appends after the fork: its own list, which the fork does not read past its prefix.
    await store.commit("indexed-source", undefined, [appendHistory(textMessage("after-fork", Role.USER, "source"))], "");
    const sentBytes = async () => Number(/^total_net_output_bytes:(\d+)/m.exec(await redis.raw.info("stats"))![1]);
    // A sidecar with nothing cached: without the index its first commit found it stale and read
    // the fork whole (~1 MB of messages here) to write it whole; each of the first two reads a few KB.
    const cold = await openStore();
    const wholeReads = cold.commitTraffic.wholeReads;
    for (let turn = 0; turn < 2; turn++) {
      const before = await sentBytes();
      await cold.commit("indexed-fork", undefined, [appendHistory(textMessage(`f${turn}`, Role.USER, "fork"))], "", undefined, undefined, { withState: false });
      expect((await sentBytes()) - before).toBeLessThan(64 * 1024);
    }
    expect(cold.staleIdIndexIds.count).toBe(0);
    expect(cold.commitTraffic.wholeReads).toBe(wholeReads);
    expect(cold.tailCommits).toBe(2);
    // An id the source held before the fork is the fork's too: refused (by the index, then named by the whole state).
    const taken = await cold.commit("indexed-fork", undefined, [appendHistory(textMessage("m42", Role.USER, "again"))], "", undefined, undefined, { withState: false }).catch((error: unknown) => error);
    expect(taken).toBeInstanceOf(ConnectError);
    expect((taken as ConnectError).code).toBe(Code.InvalidArgument);
    expect((taken as ConnectError).rawMessage).toContain('duplicate message id "m42"');
    // One the source appended after the fork is free in the fork, planned on the tail.
    const afterTaken = cold.tailCommits;
    const second = await openStore();
    await second.commit("indexed-fork", undefined, [appendHistory(textMessage("after-fork", Role.USER, "fork"))], "", undefined, undefined, { withState: false });
    expect(second.tailCommits).toBe(1);
    expect(cold.tailCommits).toBe(afterTaken);
    const fork = await store.load("indexed-fork");
    expect(fork.history.slice(-3).map((message) => message.id)).toEqual(["f0", "f1", "after-fork"]);
    expect((await store.indexedIds("indexed-fork"))!.ids.sort()).toEqual(idsOf(fork));
    // The source's index is its own: the fork's ids are not in it.
    const source = await store.indexedIds("indexed-source");
    expect(source!.ids.sort()).toEqual(idsOf(await store.load("indexed-source")));
    expect(source!.ids).not.toContain("f0");
    expect(source!.ids).toHaveLength(5_001);
  });

  it("names a call made in the shared prefix from the source's list, and a later call of the same id made by the source after the fork never", async () => {
    const store = await openStore();
    const call = (messageId: string, name: string) => create(MessageSchema, { id: messageId, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "c0", name, arguments: { data: "{}" } } } }] });
    const answer = (messageId: string) => delta({ case: "appendToolResult", value: { toolCallId: "c0", messageId, payload: { text: "found" } } });
    // The call, then 300 messages: past the 64 a tail read asks for, so its name comes from the index.
    await store.commit("calling-source", 0n, [appendHistory(call("a0", "lookup"), ...Array.from({ length: 300 }, (_, index) => textMessage(`h${index}`, Role.USER, "later")))], "");
    await store.fork("calling-source", undefined, "calling-fork");
    // The source calls c0 again, by another name, after the fork: its own list, past the fork's prefix.
    await store.commit("calling-source", undefined, [appendHistory(call("a1", "other"))], "");
    const cold = await openStore();
    await cold.commit("calling-fork", undefined, [answer("r0")], "", undefined, undefined, { withState: false });
    await cold.commit("calling-source", undefined, [answer("r1")], "", undefined, undefined, { withState: false });
    expect(cold.tailCommits).toBe(2);
    expect(cold.commitTraffic.wholeReads).toBe(0);
    const named = async (id: string) => (await store.load(id)).history.at(-1)!.parts[0]!.kind.value as { name: string };
    expect((await named("calling-fork")).name).toBe("lookup");
    expect((await named("calling-source")).name).toBe("other");
    expect((await store.indexedIds("calling-fork"))!.calls).toEqual({ c0: "lookup" });
    expect((await store.indexedIds("calling-source"))!.calls).toEqual({ c0: "other" });
  });

  it("finds a shared list a previous release renamed to an orphan without its index (its orphanList) stale: the reader's next cold commit reads it whole once and rebuilds the index as its own", async () => {
    const store = await openStore();
    await longConversation(store, "renamed-source", 2_000);
    await store.fork("renamed-source", undefined, "renamed-fork");
    // What a previous release's orphanList does: the list and its readers renamed, the reader
    // re-pointed, the owner's list copied back; the index keys stay where they were.
    const list = keysOf("renamed-source").segments[1]!;
    const orphan = `${list}:orphan:previous:9`;
    await redis.raw.rename(list, orphan);
    await redis.raw.rename(`${list}:readers`, `${orphan}:readers`);
    await redis.raw.hset(keysOf("renamed-fork").header, "history_list", orphan);
    await redis.raw.copy(orphan, list);
    expect((await store.indexedIds("renamed-fork"))!.current).toBe(false);
    const cold = await openStore();
    const taken = await cold.commit("renamed-fork", undefined, [appendHistory(textMessage("m7", Role.USER, "again"))], "", undefined, undefined, { withState: false }).catch((error: unknown) => error);
    expect((taken as ConnectError).code).toBe(Code.InvalidArgument);
    expect(cold.commitTraffic.wholeReads).toBe(1);
    await cold.commit("renamed-fork", undefined, [appendHistory(textMessage("f0", Role.USER, "fork"))], "");
    const indexed = await store.indexedIds("renamed-fork");
    expect(indexed!.current).toBe(true);
    const fork = await store.load("renamed-fork");
    expect(indexed!.ids.sort()).toEqual(idsOf(fork));
    // Rebuilt as its own: the history is one list of the fork's, the orphan went with its last reader.
    expect(await redis.raw.hget(keysOf("renamed-fork").header, "history_list")).toBeNull();
    expect(await redis.raw.exists(orphan)).toBe(0);
    expect(await freshRead("renamed-fork")).toBe(encoded(fork));
    const again = await openStore();
    await again.commit("renamed-fork", undefined, [appendHistory(textMessage("f1", Role.USER, "fork"))], "", undefined, undefined, { withState: false });
    expect(again.commitTraffic.wholeReads).toBe(0);
  });

  it("holds the fork's copy from the source's: its first commits with the state back read nothing, answer as a fresh reader reads and refuse a source's id; a copy weighs what it does not share", async () => {
    const store = await openStore();
    await longConversation(store, "seeded-source", 5_000);
    const held = store.heldCopies.decodedStates.count;
    await store.fork("seeded-source", undefined, "seeded-fork");
    expect(store.heldCopies.decodedStates.count).toBe(held + 1);
    const traffic = store.commitTraffic;
    for (let turn = 0; turn < 2; turn++) {
      const { state } = await store.commit("seeded-fork", undefined, [appendHistory(textMessage(`f${turn}`, Role.USER, "fork"))], "");
      expect(encoded(state!)).toBe(await freshRead("seeded-fork"));
    }
    // Both commits wrote from the held copy: no read before either (before, the first read the fork's 5,000 messages whole).
    expect(store.commitTraffic).toEqual({ ...traffic, writes: traffic.writes + 2 });
    const taken = await store.commit("seeded-fork", undefined, [appendHistory(textMessage("m42", Role.USER, "again"))], "").catch((error: unknown) => error);
    expect((taken as ConnectError).code).toBe(Code.InvalidArgument);
    const { state: source } = await store.commit("seeded-source", undefined, [appendHistory(textMessage("f0", Role.USER, "the fork's id is free here"))], "");
    expect(encoded(source!)).toBe(await freshRead("seeded-source"));

    // The fork's copy weighs only what it does not share with its source's (DecodedStateCache).
    const small = await openStore({ cacheBytes: 8 * 1024 * 1024 });
    await expectForkCopyWeighedOnce(small, 8 * 1024 * 1024, (id) => longConversation(small, id, 5_000), async (id, state) => expect(encoded(state)).toBe(await freshRead(id)));
  });

  it("appends to a fork and its source without copying either: each writes its own list", async () => {
    const store = await openStore();
    await longConversation(store, "appending-source", 5_000);
    await store.fork("appending-source", undefined, "appending-fork");
    const before = await commandCalls();
    for (let turn = 0; turn < 5; turn++) {
      await store.commit("appending-source", undefined, [appendHistory(textMessage(`s${turn}`, Role.USER, "source"))], "");
      await store.commit("appending-fork", undefined, [appendHistory(textMessage(`f${turn}`, Role.USER, "fork"))], "");
    }
    const after = await commandCalls();
    expect((after.get("copy") ?? 0) - (before.get("copy") ?? 0)).toBe(0);
    expect((after.get("rpush") ?? 0) - (before.get("rpush") ?? 0)).toBe(10);
    expect(await redis.raw.llen(keysOf("appending-fork").segments[1]!)).toBe(5);
    expect(await redis.raw.llen(keysOf("appending-source").segments[1]!)).toBe(5_005);
    const fork = await store.load("appending-fork");
    expect(fork.history.slice(-6).map((message) => message.id)).toEqual(["m4999", "f0", "f1", "f2", "f3", "f4"]);
    expect(await freshRead("appending-fork")).toBe(encoded(fork));
    // A fork of the fork: the fork's shared prefix and own tail become one list first (once).
    await store.fork("appending-fork", undefined, "second-fork");
    expect(await redis.raw.hget(keysOf("second-fork").header, "history_list")).toBe(keysOf("appending-fork").segments[1]);
    expect(await freshRead("second-fork")).toBe(encoded(await store.load("second-fork")));
    expect((await store.load("second-fork")).history.map((message) => message.id)).toEqual(fork.history.map((message) => message.id));
    expect(await freshRead("appending-fork")).toBe(encoded(fork));
  });
});

describe("Redis shared segment lists at a past version", () => {
  it("forks a version the source only appended to since by sharing its prefixes; one before a prune pushes its history as its own", async () => {
    const store = await openStore();
    const source = "past-source";
    let version = await longConversation(store, source, 3_000);
    const past = version;
    for (let turn = 0; turn < 3; turn++) version = (await store.commit(source, version, [appendHistory(textMessage(`later${turn}`, Role.USER, "later"))], "")).version;
    const before = await commandCalls();
    const { forkedFrom } = await store.fork(source, past, "past-fork");
    const after = await commandCalls();
    for (const command of ["copy", "rpush", "lpush"]) expect(after.get(command) ?? 0, command).toBe(before.get(command) ?? 0);
    expect(await redis.raw.hget(keysOf("past-fork").header, "history_shared")).toBe("3000");
    const forked = await store.load("past-fork");
    // The index is shared at a past version too: the prefix read bounds it (the source's later ids are not the fork's).
    expect(await redis.raw.hget(keysOf("past-fork").header, "list_ids_at")).toBe("1");
    expect((await store.indexedIds("past-fork"))!.ids.sort()).toEqual(idsOf(forked));
    expect(forked.history).toHaveLength(3_000);
    expect(encoded(forked)).toBe(encoded({ ...(await store.loadAt(source, past)), conversationId: "past-fork", forkedFrom, version: 1n }));
    expect(await freshRead("past-fork")).toBe(encoded(forked));
    // The source's later edit of its head (a prune) leaves the fork's prefix to it.
    await store.commit(source, version, [delta({ case: "pruneHistory", value: { maxMessages: 10 } })], "");
    expect(await freshRead("past-fork")).toBe(encoded(forked));
    // A version before a prune shares no prefix of the current history (the prune cut its head):
    // the fork script pushes the whole past history as the fork's own.
    await store.fork(source, past, "past-fork-2");
    expect(await redis.raw.hget(keysOf("past-fork-2").header, "history_shared")).toBeNull();
    expect(await redis.raw.llen(keysOf("past-fork-2").segments[1]!)).toBe(3_000);
    const pruned = await store.load("past-fork-2");
    expect(pruned.history.map((message) => message.id)).toEqual(forked.history.map((message) => message.id));
    expect((await store.indexedIds("past-fork-2"))!.ids.sort()).toEqual(idsOf(pruned));
    expect(await freshRead("past-fork-2")).toBe(encoded(pruned));
  });

  it("forks a version before a rewind or a removal sharing the longest prefix the source still holds, writing only the rest, indexed, in the fork script", async () => {
    const store = await openStore();
    const source = "rewound-source";
    const start = await longConversation(store, source, 3_000);
    let version = (await store.commit(source, start, [everyFieldToolRound("t1"), appendHistory(textMessage("after-round", Role.USER, "go on"))], "")).version;
    const beforeRewind = version;
    version = (await store.rewind(source, version, start, "")).version;
    // The version before the rewind: the current history followed by the round and the message it dropped.
    const before = await commandCalls();
    const { forkedFrom } = await store.fork(source, beforeRewind, "rewound-fork");
    const after = await commandCalls();
    expect(after.get("copy") ?? 0).toBe(before.get("copy") ?? 0);
    expect((after.get("rpush") ?? 0) - (before.get("rpush") ?? 0)).toBe(1);
    const forkKeys = keysOf("rewound-fork");
    expect(await redis.raw.hget(forkKeys.header, "history_shared")).toBe("3000");
    expect(await redis.raw.llen(forkKeys.segments[1]!)).toBe(3);
    const forked = await store.load("rewound-fork");
    expect(encoded(forked)).toBe(encoded({ ...(await store.loadAt(source, beforeRewind)), conversationId: "rewound-fork", forkedFrom, version: 1n }));
    expect(forked.history.slice(-3).map((message) => message.id)).toEqual(["t1-a", "t1-r", "after-round"]);
    expect(await freshRead("rewound-fork")).toBe(encoded(forked));
    // Its own messages are indexed with the shared ones: ids and the round's call, current.
    const indexed = await store.indexedIds("rewound-fork");
    expect(indexed!.current).toBe(true);
    expect(indexed!.ids.sort()).toEqual(idsOf(forked));
    expect(indexed!.calls).toEqual(latestCalls(forked));
    expect(indexed!.calls["t1-call"]).toBe("lookup");
    // A process that never saw the fork commits to it and refuses an id of its own part.
    const fresh = new RedisConversationStore(redis.url);
    try {
      expect(await fresh.connected()).toBe(true);
      await expect(fresh.commit("rewound-fork", 1n, [appendHistory(textMessage("t1-r", Role.USER, "again"))], "")).rejects.toThrow(/t1-r/);
      expect((await fresh.commit("rewound-fork", 1n, [appendHistory(textMessage("fork-next", Role.USER, "next"))], "")).version).toBe(2n);
    } finally {
      await fresh.close();
    }
    expect(await freshRead("rewound-fork")).toBe(encoded(await store.load("rewound-fork")));

    // A removal near the end: the version before it shares the history up to the removed message.
    version = (await store.commit(source, version, [delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: ["m2990"] } })], "")).version;
    const { forkedFrom: removedFrom } = await store.fork(source, version - 1n, "removed-fork");
    expect(await redis.raw.hget(keysOf("removed-fork").header, "history_shared")).toBe("2990");
    expect(await redis.raw.llen(keysOf("removed-fork").segments[1]!)).toBe(10);
    const removed = await store.load("removed-fork");
    expect(encoded(removed)).toBe(encoded({ ...(await store.loadAt(source, version - 1n)), conversationId: "removed-fork", forkedFrom: removedFrom, version: 1n }));
    expect(await freshRead("removed-fork")).toBe(encoded(removed));
    expect((await store.indexedIds("removed-fork"))!.ids.sort()).toEqual(idsOf(removed));
  });
});

describe("Redis forks with long own parts", () => {
  it("forks the version before a prune of 65,000 messages, every message its own: more arguments than one JavaScript call can spread", async () => {
    const store = await openStore();
    const id = "long-pruned-source";
    let version = 0n;
    for (let start = 0; start < 65_000; start += 13_000) {
      version = (await store.commit(id, version, [appendHistory(...Array.from({ length: 13_000 }, (_, index) => textMessage(`p${start + index}`, Role.USER, "x")))], "")).version;
    }
    const pruned = await store.commit(id, version, [delta({ case: "pruneHistory", value: { maxMessages: 10 } })], "");
    await store.fork(id, pruned.version - 1n, "long-pruned-fork");
    expect(await redis.raw.llen(keysOf("long-pruned-fork").segments[1]!)).toBe(65_000);
    const forked = await store.load("long-pruned-fork");
    expect(forked.history.map((message) => message.id)).toEqual(Array.from({ length: 65_000 }, (_, index) => `p${index}`));
    expect((await store.indexedIds("long-pruned-fork"))!.ids).toHaveLength(65_000);
  });
});

describe("Redis shared segment lists behind the store's back", () => {
  it("answers DATA_LOSS naming the shared list when it holds less than the fork reads, or the sharing fields disagree", async () => {
    const store = await openStore();
    await longConversation(store, "trimmed-source", 5);
    await store.fork("trimmed-source", undefined, "trimmed-fork");
    const shared = keysOf("trimmed-source").segments[1]!;
    const fork = keysOf("trimmed-fork").header;
    const loadError = async () => {
      const fresh = new RedisConversationStore(redis.url);
      try {
        expect(await fresh.connected()).toBe(true);
        return await fresh.load("trimmed-fork").then(
          () => undefined,
          (error: unknown) => ConnectError.from(error),
        );
      } finally {
        await fresh.close();
      }
    };
    await redis.raw.ltrim(shared, 0, 2);
    const short = await loadError();
    expect(short?.code).toBe(Code.DataLoss);
    expect(short?.rawMessage).toContain(`the shared history list ${shared} holds 3 messages but the header ${fork} reads 5 of it`);
    await redis.raw.hdel(fork, "history_shared");
    const half = await loadError();
    expect(half?.code).toBe(Code.DataLoss);
    expect(half?.rawMessage).toContain(`the header ${fork} says history_list "${shared}" and history_shared "" for 5 messages`);
  });
});

describe("Redis shared segment lists under any key prefix", () => {
  it("tells an orphan by its key's end: a prefix that reads like one never makes a live list go with its last reader", async () => {
    const store = await redis.openStore({ keyPrefix: "tenant:orphan:1" });
    await store.commit("prefixed", 0n, [appendHistory(textMessage("u1", Role.USER, "hi"), textMessage("u2", Role.USER, "there"))], "");
    await store.fork("prefixed", undefined, "prefixed-fork");
    await store.delete("prefixed-fork", undefined);
    expect(await redis.raw.llen(conversationKeys("tenant:orphan:1", "prefixed").segments[1]!)).toBe(2);
    expect((await store.load("prefixed")).history).toHaveLength(2);
  });
});

describe("Redis shared segment lists under encryption at rest: each element opened as the conversation that sealed it", () => {
  const secret = "the-secret-text";
  const message = (id: string) => textMessage(id, Role.USER, `${secret} ${id}`);
  /** Every key of the prefix, DUMPed: the bytes an attacker reading the store sees. */
  async function dumpAll(): Promise<Buffer> {
    const parts: Buffer[] = [];
    for (const key of (await redis.raw.keys(`${keyPrefix}:*`)).sort()) parts.push(Buffer.from(key, "utf8"), (await redis.raw.dumpBuffer(key)) ?? Buffer.alloc(0));
    return Buffer.concat(parts);
  }

  it("forks 1,000 and 10,000 messages writing no list element (no RPUSH, LPUSH or COPY); after commits on both sides, a prepend on the fork, a fork of the fork, a rewind and a prune, no key holds message text and every conversation reads back as the memory store's", async () => {
    const clock = 1_700_000_000_000;
    const now = () => clock;
    // The ids a prune's summary gets, counted per store: both make the same ones.
    const counted = () => {
      let made = 0;
      return { newMessageId: () => `made-${++made}` };
    };
    const store = await openStore({ values: cipher, now, deltaContext: counted() });
    const memory = new MemoryConversationStore({ now, deltaContext: counted() });
    const both = [memory, store];
    // The same dump check without keys finds the text: it would see a leak.
    const plain = await openStore();
    await plain.commit("plain-text", 0n, [appendHistory(message("p0"))], "");
    expect((await dumpAll()).includes(secret)).toBe(true);
    await plain.delete("plain-text", undefined);
    for (const size of [1_000, 10_000]) {
      const [source, fork, forkOfFork, past] = [`sealed-${size}`, `sealed-${size}-fork`, `sealed-${size}-fork-fork`, `sealed-${size}-past`];
      for (let from = 0; from < size; from += 1_000) {
        const batch = [appendHistory(...Array.from({ length: Math.min(1_000, size - from) }, (_, index) => message(`${source}-m${from + index}`)))];
        for (const each of both) await each.commit(source, undefined, batch, "");
      }
      for (const each of both) await each.commit(source, undefined, [appendHistory(message(`${source}-extra`))], "");
      const before = await commandCalls();
      for (const each of both) await each.fork(source, undefined, fork);
      for (const each of both) await each.fork(source, 1n, past);
      const after = await commandCalls();
      for (const command of ["rpush", "lpush", "copy"]) expect((after.get(command) ?? 0) - (before.get(command) ?? 0), command).toBe(0);
      expect(await redis.raw.hget(keysOf(fork).header, "history_list")).toBe(keysOf(source).segments[1]);
      expect(await redis.raw.hget(keysOf(past).header, "history_shared")).toBe("1000");
      const steps: [string, Parameters<RedisConversationStore["commit"]>[2]][] = [
        [source, [appendHistory(message(`${source}-after`))]],
        [fork, [appendHistory(message(`${fork}-own`))]],
        [past, [appendHistory(message(`${past}-own`))]],
      ];
      for (const [id, batch] of steps) for (const each of both) await each.commit(id, undefined, batch, "");
      // A fork of a fork with an own tail: the fork's segment becomes one list of two sealers.
      for (const each of both) await each.fork(fork, undefined, forkOfFork);
      expect(await redis.raw.get(`${keysOf(fork).segments[1]}:sealers`)).toBe(`${size + 1}:${source.length}:${source}`);
      const more: [string, Parameters<RedisConversationStore["commit"]>[2]][] = [
        [forkOfFork, [appendHistory(message(`${forkOfFork}-own`))]],
        // A prepend on the fork (its prune's summary goes before what it keeps), whose list the fork of the fork reads.
        [fork, [delta({ case: "pruneHistory", value: { maxMessages: 10 } })]],
        [source, [delta({ case: "pruneHistory", value: { maxMessages: 10 } })]],
        [past, [appendHistory(message(`${past}-own2`))]],
      ];
      for (const [id, batch] of more) for (const each of both) await each.commit(id, undefined, batch, "");
      for (const each of both) await each.rewind(forkOfFork, undefined, 2n, "");
      for (const id of [source, fork, forkOfFork, past]) {
        const expected = encoded(await memory.load(id));
        expect(await freshReadWith(id, cipher), id).toBe(expected);
        expect(encoded(await store.load(id)), id).toBe(expected);
        const window = await (await openStore({ values: cipher })).readWindow(id, { segment: "history", count: 5, withRest: true });
        expect(window.state.history.map((each) => each.id), id).toEqual((await memory.load(id)).history.slice(-5).map((each) => each.id));
      }
      // The fork of the fork still reads the fork's orphaned list of two sealers: the source's prefix, the fork's own message and its own.
      expect((await store.load(forkOfFork)).history).toHaveLength(size + 3);
    }
    // A sidecar without a copy commits on the stored tail (the tail script sends its sealers), and again on the tail it keeps.
    const cold = await openStore({ values: cipher, now, deltaContext: counted() });
    for (const turn of [0, 1]) {
      const batch = [appendHistory(message(`cold-${turn}`))];
      await memory.commit("sealed-1000-fork-fork", undefined, batch, "");
      await cold.commit("sealed-1000-fork-fork", undefined, batch, "", undefined, undefined, { withState: false });
    }
    expect(cold.tailCommits).toBe(2);
    expect(await freshReadWith("sealed-1000-fork-fork", cipher)).toBe(encoded(await memory.load("sealed-1000-fork-fork")));
    // A sealers key of the wrong type is DATA_LOSS naming it, before anything is written.
    await redis.raw.rpush(`${keysOf("sealed-1000-fork").segments[0]}:sealers`, "x");
    const wrong = await (await openStore({ values: cipher })).load("sealed-1000-fork").catch((error: unknown) => error);
    expect((wrong as ConnectError).code).toBe(Code.DataLoss);
    expect((wrong as ConnectError).rawMessage).toContain(`the sealers of the system list key ${keysOf("sealed-1000-fork").segments[0]}:sealers is a list, not a string`);
    await redis.raw.del(`${keysOf("sealed-1000-fork").segments[0]}:sealers`);
    expect((await dumpAll()).includes(secret)).toBe(false);
    // The change records are the fork's own, sealed for it: Watch serves them opened.
    const controller = new AbortController();
    for await (const change of store.watch("sealed-1000-fork", 0n, controller.signal)) {
      expect(change.forkedFrom?.conversationId).toBe("sealed-1000");
      break;
    }
    controller.abort();
  });

  it("opens a fork's shared elements sealed under an old key after a rotation, and under a tenant's key, sharing within the tenant", async () => {
    const old = new AtRestCipher([{ id: "old", key: Buffer.alloc(32, 1), tenant: "" }]);
    const rotated = new AtRestCipher([
      { id: "new", key: Buffer.alloc(32, 2), tenant: "" },
      { id: "old", key: Buffer.alloc(32, 1), tenant: "" },
    ]);
    const before = await openStore({ values: old });
    await before.commit("rotated-source", 0n, [appendHistory(...Array.from({ length: 20 }, (_, index) => message(`r${index}`)))], "");
    const after = await openStore({ values: rotated });
    await after.fork("rotated-source", undefined, "rotated-fork");
    await after.commit("rotated-fork", undefined, [appendHistory(message("r-own"))], "");
    expect(await redis.raw.hget(keysOf("rotated-fork").header, "history_list")).toBe(keysOf("rotated-source").segments[1]);
    const read = await (await openStore({ values: rotated })).load("rotated-fork");
    expect(read.history.map((each) => each.id)).toEqual([...Array.from({ length: 20 }, (_, index) => `r${index}`), "r-own"]);
    // The fork's own element is sealed under the new key, the shared ones stay under the old.
    expect((await redis.raw.lindexBuffer(keysOf("rotated-fork").segments[1]!, 0))!.subarray(3, 6).toString("latin1")).toBe("new");
    expect((await redis.raw.lindexBuffer(keysOf("rotated-source").segments[1]!, 0))!.subarray(3, 6).toString("latin1")).toBe("old");
    const tenants = new AtRestCipher([
      { id: "shared", key: Buffer.alloc(32, 3), tenant: "" },
      { id: "acme-key", key: Buffer.alloc(32, 4), tenant: "acme" },
    ]);
    const store = await openStore({ values: tenants });
    await store.commit("acme/source", 0n, [appendHistory(message("a0"), message("a1"))], "");
    await store.fork("acme/source", undefined, "acme/fork");
    expect(await redis.raw.hget(keysOf("acme/fork").header, "history_list")).toBe(keysOf("acme/source").segments[1]);
    expect((await (await openStore({ values: tenants })).load("acme/fork")).history.map((each) => each.id)).toEqual(["a0", "a1"]);
  });

  it("a chain of 20 forks, each appending: each generation's list records one more sealer, and past 16 runs the fork goes through the engine, sealed for the fork; every generation reads as the memory store's", async () => {
    const store = await openStore({ values: cipher });
    const memory = new MemoryConversationStore();
    const both = [memory, store];
    for (const each of both) await each.commit("chain-0", 0n, [appendHistory(message("c0"))], "");
    const shared: boolean[] = [];
    for (let generation = 1; generation <= 20; generation++) {
      for (const each of both) await each.fork(`chain-${generation - 1}`, undefined, `chain-${generation}`);
      shared.push((await redis.raw.hget(keysOf(`chain-${generation}`).header, "history_list")) !== null);
      for (const each of both) await each.commit(`chain-${generation}`, undefined, [appendHistory(message(`c${generation}`))], "");
    }
    // Generation n reads generation n-1's list, made one list of n-1 runs by its fork (ownWhole);
    // the 17th would read 16 and its own fork's ownWhole make 17: it goes through the engine, and
    // its list, of one writer, starts the chain again.
    expect(shared.map((each, index) => (each ? "" : String(index + 1))).filter((each) => each !== "")).toEqual(["17"]);
    expect(await redis.raw.get(`${keysOf("chain-15").segments[1]}:sealers`)).toMatch(/^(\d+:\d+:chain-\d+){15}$/);
    for (let generation = 0; generation <= 20; generation++) {
      expect(await freshReadWith(`chain-${generation}`, cipher), `chain-${generation}`).toBe(encoded(await memory.load(`chain-${generation}`)));
    }
  });

  it("a fork taking an expiry makes its segment one list of two sealers, whose sealers key expires with it; an expiring source's fork goes through the engine", async () => {
    const store = await openStore({ values: cipher });
    await store.commit("expiry-source", 0n, [appendHistory(message("e0"), message("e1"))], "");
    await store.fork("expiry-source", undefined, "expiry-fork");
    await store.commit("expiry-fork", undefined, [appendHistory(message("e-own"))], "");
    await store.commit("expiry-fork", undefined, [delta({ case: "setMetadata", value: { idleTtlMs: 60_000n } })], "");
    const list = keysOf("expiry-fork").segments[1]!;
    expect(await redis.raw.hget(keysOf("expiry-fork").header, "history_list")).toBeNull();
    expect(await redis.raw.get(`${list}:sealers`)).toBe("2:13:expiry-source");
    expect(await redis.raw.pexpiretime(`${list}:sealers`)).toBe(await redis.raw.pexpiretime(list));
    expect(await redis.raw.pexpiretime(list)).toBeGreaterThan(0);
    expect((await (await openStore({ values: cipher })).load("expiry-fork")).history.map((each) => each.id)).toEqual(["e0", "e1", "e-own"]);
    await store.fork("expiry-fork", undefined, "expiry-fork-fork");
    expect(await redis.raw.hget(keysOf("expiry-fork-fork").header, "history_list")).toBeNull();
    expect(await freshReadWith("expiry-fork-fork", cipher)).toBe(encoded(await store.load("expiry-fork-fork")));
  });

  it("with shareEncryptedForks false (--share-encrypted-forks false) the fork writes its own lists, every element sealed for it, which opens as the fork's as a previous release opens it", async () => {
    const store = await openStore({ values: cipher });
    await store.commit("held-source", 0n, [appendHistory(...Array.from({ length: 10 }, (_, index) => message(`s${index}`)))], "");
    const holding = await openStore({ values: cipher, shareEncryptedForks: false });
    await holding.fork("held-source", undefined, "held-fork");
    const forkKeys = keysOf("held-fork");
    expect(await redis.raw.hget(forkKeys.header, "history_list")).toBeNull();
    const elements = await redis.raw.lrangeBuffer(forkKeys.segments[1]!, 0, -1);
    expect(elements).toHaveLength(10);
    const openAsFork = cipher.opener("held-fork", "message");
    for (const element of elements) openAsFork(element, () => "an element of the fork");
    expect((await (await openStore({ values: cipher })).load("held-fork")).history).toEqual((await store.load("held-source")).history);
  });

  it("weighs a fork the engine wrote (here with shareEncryptedForks false) once with its source's copy: both held under a bound that holds one in full, commits to either read nothing", async () => {
    const small = await openStore({ values: cipher, shareEncryptedForks: false, cacheBytes: 8 * 1024 * 1024 });
    await longConversation(small, "engine-source", 5_000);
    const alone = small.heldCopies.decodedStates.bytes;
    expect(alone * 2).toBeGreaterThan(8 * 1024 * 1024);
    await small.fork("engine-source", undefined, "engine-fork");
    // The engine wrote every element (no shared list).
    expect(await redis.raw.llen(keysOf("engine-fork").segments[1]!)).toBe(5_000);
    expect(small.heldCopies.decodedStates.count).toBe(2);
    expect(small.heldCopies.decodedStates.bytes - alone).toBeLessThan(alone / 10);
    const before = small.commitTraffic;
    await small.commit("engine-source", undefined, [appendHistory(message("more"))], "");
    const { state: fork } = await small.commit("engine-fork", undefined, [appendHistory(message("f0"))], "");
    expect(small.commitTraffic).toEqual({ ...before, writes: before.writes + 2 });
    expect(await freshReadWith("engine-fork", cipher)).toBe(encoded(fork!));
  });

  it("answers DATA_LOSS for elements swapped between a source's list and its fork's, and a fork into another tenant goes through the engine", async () => {
    const store = await openStore({ values: cipher });
    await store.commit("swap-source", 0n, [appendHistory(...Array.from({ length: 10 }, (_, index) => message(`s${index}`)))], "");
    await store.fork("swap-source", undefined, "swap-fork");
    await store.commit("swap-fork", undefined, [appendHistory(message("f0"))], "");
    const [sourceList, forkList] = [keysOf("swap-source").segments[1]!, keysOf("swap-fork").segments[1]!];
    const [sourceFirst, forkFirst] = [await redis.raw.lindexBuffer(sourceList, 0), await redis.raw.lindexBuffer(forkList, 0)];
    await redis.raw.lset(sourceList, 0, forkFirst!);
    await redis.raw.lset(forkList, 0, sourceFirst!);
    for (const id of ["swap-source", "swap-fork"]) {
      const failed = await (await openStore({ values: cipher })).load(id).catch((error: unknown) => error);
      expect(failed, id).toBeInstanceOf(ConnectError);
      expect((failed as ConnectError).code, id).toBe(Code.DataLoss);
    }
    await store.commit("tenant-a/source", 0n, [appendHistory(message("t0"))], "");
    await store.fork("tenant-a/source", undefined, "tenant-b/fork");
    expect(await redis.raw.hget(keysOf("tenant-b/fork").header, "history_list")).toBeNull();
    expect(await redis.raw.llen(keysOf("tenant-b/fork").segments[1]!)).toBe(1);
    expect(await freshReadWith("tenant-b/fork", cipher)).toBe(encoded(await store.load("tenant-b/fork")));
  });
});
