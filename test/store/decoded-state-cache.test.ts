import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ConversationStateSchema } from "../../gen/ts/contextd/v1/state_pb.js";
import { DecodedStateCache } from "../../src/store/decoded-state-cache.js";

const state = (conversationId: string) => create(ConversationStateSchema, { conversationId, version: 1n });

describe("DecodedStateCache", () => {
  it("lets the least recently used states go beyond its byte bound, counting each state once", () => {
    const cache = new DecodedStateCache(100, 250);
    cache.remember(state("a"), 100);
    cache.remember(state("b"), 100);
    cache.remember(state("a"), 100); // a newer version of a: replaces, and is now the most recent
    expect([cache.size, cache.keptEncodedBytes]).toEqual([2, 200]);
    cache.remember(state("c"), 100);
    expect([cache.get("a"), cache.get("b"), cache.get("c")].map((kept) => kept?.conversationId)).toEqual(["a", undefined, "c"]);
    cache.touch("a");
    cache.remember(state("d"), 100);
    expect([cache.get("a"), cache.get("c"), cache.get("d")].map((kept) => kept?.conversationId)).toEqual(["a", undefined, "d"]);
    expect(cache.keptEncodedBytes).toBe(200);
  });

  it("keeps the newest state even when it alone is over the bound, and holds to the count bound", () => {
    const cache = new DecodedStateCache(2, 1_000);
    cache.remember(state("small"), 10);
    cache.remember(state("huge"), 5_000);
    expect([cache.get("small"), cache.get("huge")?.conversationId, cache.keptEncodedBytes]).toEqual([undefined, "huge", 5_000]);
    cache.remember(state("x"), 1);
    cache.remember(state("y"), 1);
    cache.remember(state("z"), 1);
    expect([cache.size, cache.get("x"), cache.get("z")?.conversationId]).toEqual([2, undefined, "z"]);
    cache.delete("z");
    expect([cache.size, cache.keptEncodedBytes]).toEqual([1, 1]);
  });
});
