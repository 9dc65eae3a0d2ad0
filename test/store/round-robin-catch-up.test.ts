import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { Redis } from "ioredis";
import { describe, expect, it } from "vitest";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import type { Delta } from "#gen/contextd/v1/state_pb";
import type { ConversationStore } from "../../src/store/conversation-store.js";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { startRedis } from "../support/redis.js";
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
