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
});
