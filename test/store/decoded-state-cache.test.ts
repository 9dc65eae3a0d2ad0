import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema } from "#gen/contextd/v1/state_pb";
import { MessageListLineage } from "../../src/core/model/message-list-lineage.js";
import { DecodedStateCache, decodedMessageOverheadBytes } from "../../src/store/decoded-state-cache.js";
import { indexedFromMessages } from "../../src/store/message-id-index.js";

const state = (conversationId: string) => create(ConversationStateSchema, { conversationId, version: 1n });

describe("DecodedStateCache", () => {
  it("lets the least recently used states go beyond its byte bound, counting each state once", () => {
    const cache = new DecodedStateCache(100, 250, new MessageListLineage());
    cache.remember(state("a"), 100);
    cache.remember(state("b"), 100);
    cache.remember(state("a"), 100); // a newer version of a: replaces, and is now the most recent
    expect([cache.size, cache.keptBytes]).toEqual([2, 200]);
    cache.remember(state("c"), 100);
    expect([cache.get("a"), cache.get("b"), cache.get("c")].map((kept) => kept?.conversationId)).toEqual(["a", undefined, "c"]);
    cache.touch("a");
    cache.remember(state("d"), 100);
    expect([cache.get("a"), cache.get("c"), cache.get("d")].map((kept) => kept?.conversationId)).toEqual(["a", undefined, "d"]);
    expect(cache.keptBytes).toBe(200);
  });

  it("keeps the newest state even when it alone is over the bound, and holds to the count bound", () => {
    const cache = new DecodedStateCache(2, 1_000, new MessageListLineage());
    cache.remember(state("small"), 10);
    cache.remember(state("huge"), 5_000);
    expect([cache.get("small"), cache.get("huge")?.conversationId, cache.keptBytes]).toEqual([undefined, "huge", 5_000]);
    cache.remember(state("x"), 1);
    cache.remember(state("y"), 1);
    cache.remember(state("z"), 1);
    expect([cache.size, cache.get("x"), cache.get("z")?.conversationId]).toEqual([2, undefined, "z"]);
    cache.delete("z");
    expect([cache.size, cache.keptBytes]).toEqual([1, 1]);
  });

  it("keeps the id index of a cached state and carries it to a newer state that extends it, not to one that does not", () => {
    const lineage = new MessageListLineage();
    const cache = new DecodedStateCache(10, 1_000_000, lineage);
    const text = (id: string) => create(MessageSchema, { id, role: Role.USER, parts: [{ kind: { case: "text", value: { text: id } } }] });
    const first = create(ConversationStateSchema, { conversationId: "c", version: 1n, history: Array.from({ length: indexedFromMessages }, (_, index) => text(`h${index}`)) });
    expect(cache.idIndex(first)).toBeUndefined(); // not cached yet
    cache.remember(first, 1_000);
    const index = cache.idIndex(first)!;
    expect(index.state).toBe(first);
    expect(cache.idIndex(first)).toBe(index);
    const history = first.history.concat(text("new"));
    lineage.appended(first.history, history);
    const second = { ...first, version: 2n, history };
    cache.remember(second, 1_001);
    expect(cache.idIndex(second)).toBe(index);
    expect(index.lookupFor(second, lineage)!.has("new")).toBe(true);
    const third = { ...second, version: 3n, history: second.history.slice(1) };
    cache.remember(third, 1_000);
    const rebuilt = cache.idIndex(third)!;
    expect(rebuilt).not.toBe(index);
    expect([rebuilt.lookupFor(third, lineage)!.has("h0"), rebuilt.lookupFor(third, lineage)!.has("h1")]).toEqual([false, true]);
  });

  it("weighs the messages a fork shares with its source once, to the first holder kept, and moves them to the next when that one leaves or cuts them", () => {
    const lineage = new MessageListLineage();
    const text = (id: string) => create(MessageSchema, { id, role: Role.USER, parts: [{ kind: { case: "text", value: { text: id } } }] });
    // 1,000 messages of 100 encoded bytes: weighed in full 1,000 * (100 + 640) + the 50-byte rest.
    const full = 1_000 * (100 + decodedMessageOverheadBytes) + 50;
    const source = create(ConversationStateSchema, { conversationId: "source", version: 7n, history: Array.from({ length: 1_000 }, (_, index) => text(`h${index}`)) });
    const history = source.history;
    const cache = new DecodedStateCache(10, full * 1.5, lineage);
    cache.remember(source, 100_050);
    expect(cache.keptBytes).toBe(full);
    const fork = { ...source, conversationId: "fork", version: 1n };
    expect(cache.rememberFork(source, fork, 100_050, 100_000)).toBe(true);
    // The fork weighs its rest and its list slots (8 bytes a message): both fit under 1.5 copies.
    expect(cache.keptBytes).toBe(full + 50 + 8_000);
    // A fork of the fork shares the same messages: 8,050 more.
    const second = { ...source, conversationId: "second", version: 1n };
    expect(cache.rememberFork(fork, second, 100_050, 100_000)).toBe(true);
    expect([cache.size, cache.keptBytes]).toEqual([3, full + 2 * 8_050]);

    // Newer states of each side still start with the shared messages: weighed as before, plus theirs.
    const sourceNext = history.concat(text("s"));
    lineage.appended(history, sourceNext);
    cache.remember({ ...source, version: 8n, history: sourceNext }, 100_150);
    const forkNext = history.concat(text("f"));
    lineage.appended(history, forkNext);
    cache.remember({ ...fork, version: 2n, history: forkNext }, 100_150);
    expect(cache.keptBytes).toBe(full + 740 + (8_050 + 740) + 8_050);

    // The source deleted: the fork, the first holder left, weighs the shared messages now.
    cache.delete("source");
    expect([cache.size, cache.keptBytes]).toEqual([2, full + 740 + 8_050]);
    // The fork rewound past them (a list not known to start with them): "second" weighs them.
    const cut = forkNext.slice(0, 10);
    cache.remember({ ...fork, version: 3n, history: cut }, 1_050);
    expect(cache.keptBytes).toBe(10 * 740 + 50 + full);
    // A bound pushing out the holder paying for them moves them too, and what they then weigh
    // counts against the bound at once: here it pushes out that next holder as well.
    const bounded = new DecodedStateCache(10, full * 1.5, lineage);
    bounded.remember(source, 100_050);
    bounded.rememberFork(source, fork, 100_050, 100_000);
    const other = create(ConversationStateSchema, { conversationId: "other", version: 1n });
    bounded.remember(other, full * 0.6);
    expect([bounded.get("source"), bounded.get("fork"), bounded.get("other")?.conversationId, bounded.keptBytes]).toEqual([undefined, undefined, "other", full * 0.6]);
    // Under a bound with room for the fork's messages, the fork stays, weighing them.
    const roomy = new DecodedStateCache(10, full * 1.6 + 4_000, lineage);
    roomy.remember(source, 100_050);
    roomy.rememberFork(source, fork, 100_050, 100_000);
    roomy.remember(other, full * 0.6);
    expect([roomy.get("source"), roomy.get("fork")?.conversationId, roomy.keptBytes]).toEqual([undefined, "fork", full + full * 0.6]);
  });

  it("does not keep a fork's copy that does not fit beside the states kept, and keeps the source weighed as it was", () => {
    const lineage = new MessageListLineage();
    const text = (id: string) => create(MessageSchema, { id, role: Role.USER, parts: [{ kind: { case: "text", value: { text: id } } }] });
    const history = Array.from({ length: 1_000 }, (_, index) => text(`h${index}`));
    const full = 1_000 * (100 + decodedMessageOverheadBytes) + 50;
    const source = create(ConversationStateSchema, { conversationId: "source", version: 1n, history });
    const cache = new DecodedStateCache(10, full + 4_000, lineage);
    cache.remember(source, 100_050);
    expect(cache.rememberFork(source, { ...source, conversationId: "fork" }, 100_050, 100_000)).toBe(false);
    expect([cache.size, cache.keptBytes, cache.get("fork")]).toEqual([1, full, undefined]);
    // Not a fork of the cached state (another version): weighed in full, so not kept either.
    const older = { ...source, version: 0n };
    expect(cache.rememberFork(older, { ...source, conversationId: "fork" }, 100_050, 100_000)).toBe(false);
    cache.delete("source");
    expect(cache.keptBytes).toBe(0);
  });
});
