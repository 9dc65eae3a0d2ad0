// The Redis store's list layout (docs/stores.md, "Key layout"): a commit writes what its batch
// changed, a process whose cached copy is behind reads only what it lacks, and whatever the edit
// (append, remove, replace, compact, cancel_tool_calls, clear, artifacts, experiences), a copy
// caught up from the lists' tails is the state a fresh reader gets. Against a real redis-server.
import { toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, Segment, type ConversationState } from "#gen/contextd/v1/state_pb";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { segmentEdit } from "../../src/store/segment-edits.js";
import { conversationKeys } from "../../src/store/redis-scripts.js";
import { randomSource } from "../support/random-messages.js";
import { redisForFile } from "../support/redis-for-file.js";
import { appendHistory, delta, randomEdits, textMessage } from "./fixtures.js";

const redis = redisForFile();
const openStore = redis.openStore;

/**
 * How much one of Redis's `INFO stats` counters grows while `action` runs, less what the INFO
 * calls themselves send and receive (measured by one more call before).
 */
async function counted<T>(name: "total_net_input_bytes" | "total_net_output_bytes", action: () => Promise<T>): Promise<[number, T]> {
  const read = async () => Number(new RegExp(`^${name}:(\\d+)`, "m").exec(await redis.raw.info("stats"))![1]);
  const first = await read();
  const second = await read();
  const result = await action();
  const third = await read();
  return [third - second - (second - first), result];
}

/** A user message of about `bytes` bytes of text. */
const sized = (id: string, bytes: number) => textMessage(id, Role.USER, `${id} `.padEnd(bytes, "x"));

/** Appends `count` ~1 KB messages to a fresh conversation, 500 per commit. */
async function longConversation(store: RedisConversationStore, id: string, count: number): Promise<bigint> {
  let version = 0n;
  for (let start = 0; start < count; start += 500) {
    const messages = Array.from({ length: Math.min(500, count - start) }, (_, index) => sized(`m${start + index}`, 1_000));
    version = (await store.commit(id, version, [appendHistory(...messages)], "")).version;
  }
  return version;
}

const encoded = (state: ConversationState) => toBinary(ConversationStateSchema, state);

describe("RedisConversationStore list layout", () => {
  it("writes about the appended message per commit, not the conversation, keyed or not", async () => {
    const store = await openStore();
    const id = "bytes-written";
    let version = await longConversation(store, id, 2_000);
    const message = sized("appended-0", 1_000);
    const messageBytes = toBinary(MessageSchema, message).length;
    for (const key of ["", "idempotency-key-1"]) {
      const [written, outcome] = await counted("total_net_input_bytes", () => store.commit(id, version, [appendHistory(key === "" ? message : sized("appended-1", 1_000))], key));
      version = outcome.version;
      // The script's arguments hold the message twice (the list element and the change record
      // for Watch), key names, a few counts and the message's id for the id index; the conversation is ~2 MB.
      expect(written).toBeLessThanOrEqual(2 * messageBytes + 1_024 + 128);
    }
    expect((await store.load(id)).history).toHaveLength(2_002);
  });

  it("catches a cached copy up by reading the new tail only, and nothing at all when it is current", async () => {
    const [writer, reader] = [await openStore(), await openStore()];
    const id = "tail-read";
    const version = await longConversation(writer, id, 2_000);
    expect((await reader.load(id)).history).toHaveLength(2_000);

    const [idle, unchanged] = await counted("total_net_output_bytes", () => reader.load(id));
    expect(unchanged.version).toBe(version);
    expect(idle).toBeLessThan(200);

    const written = await writer.commit(id, version, [appendHistory(sized("new-1", 1_000), sized("new-2", 1_000))], "");
    const [read, caughtUp] = await counted("total_net_output_bytes", () => reader.load(id));
    expect(read).toBeLessThan(2 * 1_100 + 300);
    // Compared as buffers: vitest's toEqual walks a 2 MB array element by element for seconds.
    expect(Buffer.from(encoded(caughtUp)).equals(encoded(written.state!))).toBe(true);
    // The untouched lists and the untouched prefix are the cached copy's own objects.
    expect(caughtUp.history[0]).toBe(unchanged.history[0]);
    expect(caughtUp.system).toBe(unchanged.system);
  });

  it("catches a copy that lost a race up from the tail when its commit retries, instead of reading the conversation again", async () => {
    const [first, second] = [await openStore(), await openStore()];
    const id = "conflict-tail";
    const version = await longConversation(first, id, 2_000);
    await second.load(id);
    await first.commit(id, version, [appendHistory(sized("first-1", 1_000))], "");
    // second's cached copy is one version behind: its script is refused, it reads the new tail and commits again.
    const [read, outcome] = await counted("total_net_output_bytes", () => second.commit(id, undefined, [appendHistory(sized("second-1", 1_000))], ""));
    expect(outcome.version).toBe(version + 2n);
    expect(outcome.state!.history.slice(-2).map((message) => message.id)).toEqual(["first-1", "second-1"]);
    expect(read).toBeLessThan(3_000);
  });

  it("agrees with a fresh reader after every one of 300 random edits, caught up from the tails by a second process", async () => {
    const [writer, follower] = [await openStore(), await openStore()];
    const random = randomSource(14);
    const id = "random-edits";
    const edits = randomEdits(random);
    let state = await writer.load(id);
    for (let step = 0; step < 300; step++) {
      const deltas = edits(state);
      if (deltas === undefined) continue;
      state = (await writer.commit(id, state.version, deltas, "")).state!;
      // The follower reads every few versions, so its copy is 1 to 3 commits behind.
      if (random() < 0.5) continue;
      const caughtUp = await follower.load(id);
      const reader = new RedisConversationStore(redis.url);
      expect(await reader.connected()).toBe(true);
      const whole = await reader.load(id).finally(() => reader.close());
      expect(encoded(caughtUp), `step ${step}`).toEqual(encoded(state));
      expect(encoded(whole), `step ${step}`).toEqual(encoded(state));
      // The id index the commits kept is the state's: every id, each history call id's latest name, current.
      const keys = conversationKeys("contextd", id);
      const ids = [...state.system, ...state.history, ...state.memory, ...state.tools].map((message) => message.id);
      const latest: Record<string, string> = {};
      for (const message of state.history) if (message.role === Role.ASSISTANT) for (const part of message.parts) if (part.kind.case === "toolCall") latest[part.kind.value.id] = part.kind.value.name;
      const indexed = await writer.indexedIds(id);
      expect(indexed!.ids.sort(), `step ${step}`).toEqual(ids.sort());
      expect(indexed!.calls, `step ${step}`).toEqual(latest);
      expect(indexed!.current, `step ${step}`).toBe(true);
      expect(await redis.raw.hget(keys.header, "list_ids_at"), `step ${step}`).toBe(String(state.version));
    }
    expect(state.version).toBeGreaterThan(100n);
  });

  it("rewrites lists of more than 1,000 messages from either end (Lua takes a few thousand arguments per call)", async () => {
    const store = await openStore();
    const id = "chunked";
    const many = (prefix: string, count: number) => Array.from({ length: count }, (_, index) => textMessage(`${prefix}${index}`, Role.USER, "x"));
    const tail = many("t", 3);
    let outcome = await store.commit(id, 0n, [delta({ case: "replaceSegment", value: { segment: Segment.MEMORY, messages: [...many("a", 2_500), ...tail] } })], "");
    // Keeps the three at the tail and puts 2,600 new messages before them.
    outcome = await store.commit(id, 1n, [delta({ case: "replaceSegment", value: { segment: Segment.MEMORY, messages: [...many("b", 2_600), ...outcome.state!.memory.slice(-3)] } })], "");
    const reader = await openStore();
    const stored = await reader.load(id);
    expect(stored.memory.map((message) => message.id)).toEqual([...many("b", 2_600), ...tail].map((message) => message.id));
    expect(await redis.raw.llen(conversationKeys("contextd", id).segments[2]!)).toBe(2_603);
    expect(encoded(stored)).toEqual(encoded(outcome.state!));
  });

  it("reads the stored state again when its lists are not the cached copy's at the same version ('stale'), and commits onto it", async () => {
    const store = await openStore();
    const id = "stale-lists";
    await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "");
    const keys = conversationKeys("contextd", id);
    // Written behind the sidecar's back at the same version: one more message in history.
    await redis.raw.rpush(keys.segments[1]!, Buffer.from(toBinary(MessageSchema, textMessage("behind", Role.USER, "behind"))));
    await redis.raw.hset(keys.header, "history", "2");
    const outcome = await store.commit(id, 1n, [appendHistory(textMessage("u2", Role.USER, "again"))], "");
    expect(outcome.version).toBe(2n);
    expect(outcome.state!.history.map((message) => message.id)).toEqual(["u1", "behind", "u2"]);
    expect(await redis.raw.llen(keys.segments[1]!)).toBe(3);
  });
});

describe("segmentEdit", () => {
  const list = (...ids: string[]): Message[] => ids.map((id) => textMessage(id, Role.USER, id));
  it("is nothing for the same messages, the new tail for an append, and the side it keeps otherwise", () => {
    const base = list("a", "b", "c", "d");
    expect(segmentEdit(base, base)).toBeUndefined();
    expect(segmentEdit(base, [...base])).toBeUndefined();
    const added = list("e");
    expect(segmentEdit(base, [...base, ...added])).toEqual({ keepPrefix: true, keep: 4, messages: added });
    expect(segmentEdit(base, [base[0]!, base[1]!, base[3]!])).toEqual({ keepPrefix: true, keep: 2, messages: [base[3]!] });
    const summary = list("s");
    expect(segmentEdit(base, [...summary, base[3]!])).toEqual({ keepPrefix: false, keep: 1, messages: summary });
    expect(segmentEdit(base, [])).toEqual({ keepPrefix: true, keep: 0, messages: [] });
    expect(segmentEdit([], added)).toEqual({ keepPrefix: true, keep: 0, messages: added });
  });
});
