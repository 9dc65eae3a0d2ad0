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

  it("follows a removal the lineage knows of, and the appends after it, at the cost of the removed ids: equal to an index built afresh", () => {
    const lineage = new MessageListLineage();
    const state = longState();
    const index = MessageIdIndex.of(state)!;
    // h3 and the round a0 (whose call c0 no other round makes) go; an append in the same batch takes h3's id again.
    const positions = [0, 4];
    const kept = state.history.filter((_, position) => !positions.includes(position));
    lineage.removed(state.history, kept, positions);
    const history = kept.concat(text("h3"), text("after"));
    lineage.appended(kept, history);
    const next = { ...state, history };
    expect(index.advancedTo(next, lineage)).toBe(index);
    const afresh = MessageIdIndex.ofAll(next);
    for (const id of ["a0", "h3", "h2", "h4", "after", "m0", `h${indexedFromMessages - 1}`, "new"]) {
      expect(index.lookupFor(next, lineage)!.has(id), id).toBe(afresh.lookupFor(next, lineage)!.has(id));
    }
    expect(index.lookupFor(next, lineage)!.has("a0")).toBe(false);
    expect(index.toolCallLookupFor(next, "history", lineage)!.has("c0")).toBe(false);
    // A list with the same messages, not known as that removal: not followed.
    const fresh = MessageIdIndex.of(state)!;
    expect(fresh.advancedTo({ ...state, history: [...kept] }, lineage)).toBeUndefined();
  });

  it("shares its ids with a fork's index: each side's appends and truncations stay its own, equal to an index built afresh, through forks of forks past the merge depth", () => {
    const lineage = new MessageListLineage();
    let seed = 7;
    const random = (below: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % below;
    const root = longState();
    const sides: { state: ConversationState; index: MessageIdIndex }[] = [{ state: root, index: MessageIdIndex.of(root)! }];
    // A chain of twelve forks of forks first: deeper than the eight layers a lookup walks before they are merged.
    for (let depth = 0; depth < 12; depth++) {
      const side = sides[sides.length - 1]!;
      const forked = { ...side.state, conversationId: `chain${depth}` };
      sides.push({ state: forked, index: side.index.sharedWith(forked)! });
    }
    let made = 0;
    const probes = ["h0", "h5", "m0", "a0"];
    for (let step = 0; step < 400; step++) {
      const side = sides[random(sides.length)]!;
      const action = random(10);
      if (action < 2 && sides.length < 32) {
        const forked = { ...side.state, conversationId: `fork${step}` };
        const index = side.index.sharedWith(forked)!;
        expect(index.state).toBe(forked);
        sides.push({ state: forked, index });
        continue;
      }
      let history: Message[];
      if (action < 7) {
        // Appends, some reusing a call id another side or an earlier round made.
        const id = `n${made++}`;
        history = side.state.history.concat(random(2) === 0 ? text(id) : call(id, `c${random(3)}`));
        lineage.appended(side.state.history, history);
      } else {
        // A truncation (a rewind), never below the first message.
        history = side.state.history.slice(0, Math.max(1, side.state.history.length - 1 - random(3)));
        lineage.truncated(side.state.history, history);
      }
      const next = { ...side.state, history };
      expect(side.index.advancedTo(next, lineage)).toBe(side.index);
      side.state = next;
      probes.push(history[history.length - 1]!.id, `n${made - 1}`);
      for (const each of sides) {
        const fresh = MessageIdIndex.ofAll(each.state);
        const ids = each.index.lookupFor(each.state, lineage)!;
        const calls = each.index.toolCallLookupFor(each.state, "history", lineage)!;
        const freshIds = fresh.lookupFor(each.state, lineage)!;
        const freshCalls = fresh.toolCallLookupFor(each.state, "history", lineage)!;
        for (const probe of [...probes.slice(0, 4), ...probes.slice(-12)]) expect([probe, ids.has(probe)]).toEqual([probe, freshIds.has(probe)]);
        for (const probe of ["c0", "c1", "c2", "c9"]) expect([probe, calls.has(probe)]).toEqual([probe, freshCalls.has(probe)]);
      }
    }
  });

  it("is not shared with a state whose segments are other lists", () => {
    const state = longState();
    const index = MessageIdIndex.of(state)!;
    expect(index.sharedWith({ ...state, history: [...state.history] })).toBeUndefined();
  });
});
