import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, type ConversationState } from "#gen/contextd/v1/state_pb";
import { MessageListLineage } from "../../src/core/model/message-list-lineage.js";
import { indexedFromMessages, MessageIdIndex } from "../../src/store/message-id-index.js";

const text = (id: string): Message => create(MessageSchema, { id, role: Role.USER, parts: [{ kind: { case: "text", value: { text: id } } }] });
const call = (id: string, callId: string): Message =>
  create(MessageSchema, { id, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: callId, name: "f", arguments: { data: "{}" } } } }] });

function longState(): ConversationState {
  return create(ConversationStateSchema, {
    conversationId: "c",
    history: [call("a0", "c0"), ...Array.from({ length: indexedFromMessages }, (_, index) => text(`h${index}`))],
    memory: [text("m0")],
  });
}

describe("MessageIdIndex", () => {
  it("is only built for a conversation of at least indexedFromMessages messages", () => {
    expect(MessageIdIndex.of(create(ConversationStateSchema, { history: [text("a")] }))).toBeUndefined();
    expect(MessageIdIndex.of(longState())).toBeDefined();
  });

  it("answers for its state and for states appended to it, and moves on to them; never for a state it does not know to extend it", () => {
    const lineage = new MessageListLineage();
    const state = longState();
    const index = MessageIdIndex.of(state)!;
    const ids = index.lookupFor(state, lineage)!;
    expect([ids.has("h0"), ids.has("m0"), ids.has("a0"), ids.has("c0"), ids.has("new")]).toEqual([true, true, true, false, false]);
    expect(index.toolCallLookupFor(state, "history", lineage)!.has("c0")).toBe(true);
    expect(index.toolCallLookupFor(state, "memory", lineage)!.has("c0")).toBe(false);

    const history = state.history.concat(text("new"), call("a1", "c1"));
    lineage.appended(state.history, history);
    const next = { ...state, history };
    expect(index.lookupFor(next, lineage)!.has("new")).toBe(true);
    expect(index.toolCallLookupFor(next, "history", lineage)!.has("c1")).toBe(true);
    // Seen through a view: the index itself holds the base's ids until it moves on.
    expect(index.lookupFor(state, lineage)!.has("new")).toBe(false);

    // The same content, not made by an append: not known to extend the state.
    const copied = { ...state, history: [...state.history, text("other")] };
    expect(index.lookupFor(copied, lineage)).toBeUndefined();
    expect(index.advancedTo(copied, lineage)).toBeUndefined();

    expect(index.advancedTo(next, lineage)).toBe(index);
    expect(index.state).toBe(next);
    expect(index.lookupFor(next, lineage)!.has("new")).toBe(true);
    expect(index.toolCallLookupFor(next, "history", lineage)!.has("c1")).toBe(true);
    const removed = { ...next, history: next.history.filter((message) => message.id !== "h3") };
    expect(index.advancedTo(removed, lineage)).toBeUndefined();
  });

  it("follows a truncation the lineage knows of at the cost of the dropped ids: a dropped id or call is free again, a kept one still taken", () => {
    const lineage = new MessageListLineage();
    const state = longState();
    const index = MessageIdIndex.of(state)!;
    // Two rounds reuse a call id (as servers answering call_0 every turn do); the rewind drops one of them.
    const history = state.history.concat(call("a1", "c0"), call("a2", "c2"), text("tail"));
    lineage.appended(state.history, history);
    const long = { ...state, history };
    expect(index.advancedTo(long, lineage)).toBe(index);
    const head = history.slice(0, state.history.length + 1);
    lineage.truncated(history, head);
    const rewound = { ...long, history: head };
    expect(index.advancedTo(rewound, lineage)).toBe(index);
    expect(index.state).toBe(rewound);
    const ids = index.lookupFor(rewound, lineage)!;
    expect([ids.has("h5"), ids.has("a0"), ids.has("a1"), ids.has("m0"), ids.has("a2"), ids.has("tail")]).toEqual([true, true, true, true, false, false]);
    const calls = index.toolCallLookupFor(rewound, "history", lineage)!;
    expect([calls.has("c0"), calls.has("c2")]).toEqual([true, false]);
    // Back before the second c0 round and the first: c0 goes once no call makes it.
    const first = history.slice(0, 1);
    lineage.truncated(head, first);
    expect(index.advancedTo({ ...long, history: first }, lineage)).toBe(index);
    expect(index.toolCallLookupFor(index.state, "history", lineage)!.has("c0")).toBe(true);
    const none = history.slice(0, 0);
    lineage.truncated(first, none);
    expect(index.advancedTo({ ...long, history: none }, lineage)).toBe(index);
    expect(index.toolCallLookupFor(index.state, "history", lineage)!.has("c0")).toBe(false);
    expect(index.lookupFor(index.state, lineage)!.has("h0")).toBe(false);
    // The append after the truncation is followed as any append.
    const again = none.concat(text("h0"));
    lineage.appended(none, again);
    expect(index.advancedTo({ ...long, history: again }, lineage)).toBe(index);
    expect(index.lookupFor(index.state, lineage)!.has("h0")).toBe(true);
  });
});
