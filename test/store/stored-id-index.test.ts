import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { Segment, type ConversationState } from "#gen/contextd/v1/state_pb";
import { applyDeltas } from "../../src/core/deltas/apply-deltas.js";
import { MessageListLineage } from "../../src/core/model/message-list-lineage.js";
import { emptyConversationState } from "../../src/store/commit-plan.js";
import { idIndexArguments, idIndexChanges } from "../../src/store/stored-id-index.js";
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

  it("adds an append's ids with the calls they make", () => {
    const next = applyDeltas(base, [appendHistory(assistant("a3", ["c2", "third"]), result("r4", "c2")), delta({ case: "appendMessages", value: { segment: Segment.MEMORY, messages: [textMessage("m1", Role.USER, "note")] } })], context);
    expect(idIndexChanges(base, next, lineage, "t")).toEqual({
      mode: "t",
      addedIds: ["a3", "r4", "m1"],
      removedIds: [],
      madeCalls: [{ id: "c2", name: "third", at: 1 }],
      removedCalls: [],
    });
  });

  it("removes a removed round's ids and names the calls its messages made, once each", () => {
    const next = applyDeltas(base, [delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: ["a2", "r2", "r3"] } })], context);
    const changes = idIndexChanges(base, next, lineage, "a");
    expect(changes.mode).toBe("a");
    expect(changes.addedIds).toEqual([]);
    expect(changes.removedIds).toEqual(["a2", "r2", "r3"]);
    expect(changes.removedCalls).toEqual(["c1", "c2"]);
  });

  it("writes the index whole for a change longer than it (a clear) and when asked", () => {
    const cleared = applyDeltas(base, [delta({ case: "clearState", value: {} })], context);
    expect(idIndexChanges(base, cleared, lineage, "a")).toEqual({ mode: "b", addedIds: [], removedIds: [], madeCalls: [], removedCalls: [] });
    const whole = idIndexChanges(emptyConversationState("c"), base, lineage, "b");
    expect(whole.addedIds).toEqual(["u0", "a1", "r1", "a2", "r2", "r3"]);
    // Every call made, where it is (both stores keep a call per message making it): a1's c1, then a2's c1 and c2.
    expect(whole.madeCalls).toEqual([{ id: "c1", name: "first", at: 2 }, { id: "c1", name: "second", at: 4 }, { id: "c2", name: "other", at: 4 }]);
    expect(idIndexArguments(whole)).toEqual(["b", "6", "u0", "a1", "r1", "a2", "r2", "r3", "0", "3", "c1", "first", "2", "c1", "second", "4", "c2", "other", "4", "0"]);
  });

  it("drops a rewound tool round's call by position, looking at no kept message", () => {
    const rounds = 2_000;
    const history: Message[] = [];
    for (let round = 0; round < rounds; round++) history.push(assistant(`a${round}`, [`call_${round}`, "read_file"]), result(`r${round}`, `call_${round}`));
    const long = applyDeltas(emptyConversationState("long"), [appendHistory(...history)], context);
    // The rewound history counts every element read: the dropped round's call id is not looked for in it.
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
    const changes = idIndexChanges(long, rewound, lineage, "a");
    expect([changes.removedIds, changes.removedCalls, changes.madeCalls, reads]).toEqual([[`a${rounds - 1}`, `r${rounds - 1}`], [`call_${rounds - 1}`], [], 0]);
  });
});
