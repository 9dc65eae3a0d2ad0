import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { Segment, type ConversationState } from "#gen/contextd/v1/state_pb";
import { applyDeltas } from "../../src/core/deltas/apply-deltas.js";
import { MessageListLineage } from "../../src/core/model/message-list-lineage.js";
import { emptyConversationState } from "../../src/store/commit-plan.js";
import { MessageIdIndex } from "../../src/store/message-id-index.js";
import { idIndexArguments, idIndexChanges } from "../../src/store/stored-id-index.js";
import { randomSource } from "../support/random-messages.js";
import { appendHistory, delta, textMessage } from "./fixtures.js";

// What a commit changes in the stored id index, computed from the states before and after it
// (the Redis scripts apply it; the contract suite shows the index answering cold commits).
const assistant = (id: string, ...calls: [string, string][]): Message =>
  create(MessageSchema, { id, role: Role.ASSISTANT, parts: calls.map(([callId, name]) => ({ kind: { case: "toolCall" as const, value: { id: callId, name, arguments: { data: "{}" } } } })) });
const result = (id: string, callId: string): Message => create(MessageSchema, { id, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, payload: { text: "ok" } } } }] });

describe("idIndexChanges", () => {
  const lineage = new MessageListLineage();
  const context = { newMessageId: () => "generated", lineage };
  const base = applyDeltas(
    emptyConversationState("c"),
    [appendHistory(textMessage("u0", Role.USER, "hi"), assistant("a1", ["c1", "first"]), result("r1", "c1"), assistant("a2", ["c1", "second"], ["c2", "other"]), result("r2", "c1"), result("r3", "c2"))],
    context,
  );

  it("adds an append's ids and names its calls by the appended (latest) call", () => {
    const next = applyDeltas(base, [appendHistory(assistant("a3", ["c2", "third"]), result("r4", "c2")), delta({ case: "appendMessages", value: { segment: Segment.MEMORY, messages: [textMessage("m1", Role.USER, "note")] } })], context);
    expect(idIndexChanges(base, next, lineage, "t")).toEqual({ mode: "t", addedIds: ["a3", "r4", "m1"], removedIds: [], namedCalls: ["c2", "third"], removedCalls: [], madeCalls: [{ id: "c2", name: "third", at: 1 }] });
  });

  it("removes a removed round's ids and names its calls by their latest call left, or removes them", () => {
    const next = applyDeltas(base, [delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: ["a2", "r2", "r3"] } })], context);
    const changes = idIndexChanges(base, next, lineage, "a");
    expect(changes.mode).toBe("a");
    expect(changes.addedIds).toEqual([]);
    expect(changes.removedIds).toEqual(["a2", "r2", "r3"]);
    expect(changes.namedCalls).toEqual(["c1", "first"]);
    expect(changes.removedCalls).toEqual(["c2"]);
  });

  it("writes the index whole for a change longer than it (a clear) and when asked", () => {
    const cleared = applyDeltas(base, [delta({ case: "clearState", value: {} })], context);
    expect(idIndexChanges(base, cleared, lineage, "a")).toEqual({ mode: "b", addedIds: [], removedIds: [], namedCalls: [], removedCalls: [], madeCalls: [] });
    const whole = idIndexChanges(emptyConversationState("c"), base, lineage, "b");
    expect(whole.addedIds).toEqual(["u0", "a1", "r1", "a2", "r2", "r3"]);
    expect(whole.namedCalls).toEqual(["c1", "second", "c2", "other"]);
    // Every call made, where it is (the Postgres index's rows): a1's c1, then a2's c1 and c2.
    expect(whole.madeCalls).toEqual([{ id: "c1", name: "first", at: 2 }, { id: "c1", name: "second", at: 4 }, { id: "c2", name: "other", at: 4 }]);
    expect(idIndexArguments(whole)).toEqual(["b", "6", "u0", "a1", "r1", "a2", "r2", "r3", "0", "4", "c1", "second", "c2", "other", "0"]);
  });

  it("follows a rewind that drops a tool round from the in-process index's call counts, looking at no kept message for a call id no call makes any more", () => {
    const rounds = 2_000;
    const history: Message[] = [];
    for (let round = 0; round < rounds; round++) history.push(assistant(`a${round}`, [`call_${round}`, "read_file"]), result(`r${round}`, `call_${round}`));
    const long = applyDeltas(emptyConversationState("long"), [appendHistory(...history)], context);
    const index = MessageIdIndex.of(long)!;
    // The rewound history counts every element read: the dropped round's call id must not be looked for in it.
    let reads = 0;
    const kept = long.history.slice(0, long.history.length - 2);
    const counted = new Proxy(kept, {
      get(target, key, receiver) {
        if (typeof key === "string" && /^\d+$/.test(key)) reads++;
        return Reflect.get(target, key, receiver);
      },
    });
    lineage.truncated(long.history, counted);
    const rewound: ConversationState = { ...long, version: long.version + 1n, history: counted };
    const changes = idIndexChanges(long, rewound, lineage, "a", () => index);
    expect([changes.removedIds, changes.removedCalls, changes.namedCalls, reads]).toEqual([[`a${rounds - 1}`, `r${rounds - 1}`], [`call_${rounds - 1}`], [], 0]);
    // Without the counts, the same answer after a look through every kept message.
    expect(idIndexChanges(long, rewound, lineage, "a")).toEqual(changes);
    expect(reads).toBeGreaterThanOrEqual(kept.length);
  });

  it("answers with the counts as it does without them when call ids repeat, over random edits of history", () => {
    const random = randomSource(41);
    const pick = (n: number) => Math.floor(random() * n);
    for (let trial = 0; trial < 200; trial++) {
      const messages: Message[] = [];
      // Few call ids, so that rounds reuse them (as some model servers' "call_0" does).
      for (let round = 0; round < 1_100; round++) {
        const callId = `call_${pick(6)}`;
        messages.push(assistant(`t${trial}a${round}`, [callId, `tool${pick(3)}`]), result(`t${trial}r${round}`, callId));
      }
      const before = applyDeltas(emptyConversationState("random"), [appendHistory(...messages)], context);
      const ids = before.history.map((message) => message.id);
      // Whole rounds: a call and its result.
      const removedCount = 2 * (1 + pick(3));
      const start = 2 * pick((ids.length - removedCount) / 2);
      const edits =
        trial % 2 === 0
          ? [delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: ids.slice(start, start + removedCount) } })]
          : [delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: ids.slice(ids.length - removedCount) } }), appendHistory(...(() => {
                const callId = `call_${pick(8)}`;
                return [assistant(`t${trial}new`, [callId, "fresh"]), result(`t${trial}newr`, callId)];
              })())];
      const after = applyDeltas(before, edits, context);
      const index = MessageIdIndex.of(before)!;
      const withCounts = idIndexChanges(before, after, lineage, "a", () => index);
      const without = idIndexChanges(before, after, lineage, "a");
      const named = (changes: typeof without) => Object.fromEntries(changes.namedCalls.flatMap((item, at) => (at % 2 === 0 ? [[item, changes.namedCalls[at + 1]]] : [])));
      expect([withCounts.addedIds, withCounts.removedIds, [...withCounts.removedCalls].sort(), named(withCounts)], `trial ${trial}`).toEqual([without.addedIds, without.removedIds, [...without.removedCalls].sort(), named(without)]);
    }
  });
});
