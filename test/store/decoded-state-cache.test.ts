import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema } from "#gen/contextd/v1/state_pb";
import { MessageListLineage } from "../../src/core/model/message-list-lineage.js";
import { DecodedStateCache } from "../../src/store/decoded-state-cache.js";
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
});
