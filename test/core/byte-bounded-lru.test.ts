import { describe, expect, it } from "vitest";
import { ByteBoundedLru } from "../../src/core/byte-bounded-lru.js";

function keys<K, V>(lru: ByteBoundedLru<K, V>): K[] {
  return [...lru.oldestFirst()].map(([key]) => key);
}

describe("ByteBoundedLru", () => {
  it("evicts the least recently set while over the bytes, and counts what it keeps", () => {
    const lru = new ByteBoundedLru<string, number>({ maxBytes: 10 });
    expect([lru.set("a", 1, 4), lru.set("b", 2, 4)]).toEqual([true, true]);
    expect([lru.size, lru.bytes]).toEqual([2, 8]);
    lru.set("c", 3, 4);
    expect(keys(lru)).toEqual(["b", "c"]);
    expect([lru.get("a"), lru.get("c"), lru.bytes, lru.bytesOf("c"), lru.bytesOf("a")]).toEqual([undefined, 3, 8, 4, undefined]);
  });

  it("refuses an entry alone over the bytes, and forgets the key's previous value anyway", () => {
    const lru = new ByteBoundedLru<string, string>({ maxBytes: 10 });
    lru.set("a", "old", 3);
    lru.set("b", "kept", 3);
    expect(lru.set("a", "too big", 11)).toBe(false);
    expect([lru.has("a"), lru.get("b"), lru.size, lru.bytes]).toEqual([false, "kept", 1, 3]);
    // Exactly at the bound is kept, alone.
    expect(lru.set("c", "full", 10)).toBe(true);
    expect([keys(lru), lru.bytes]).toEqual([["c"], 10]);
  });

  it("keepNewest keeps the newest even when it alone is over a bound, the others leaving first", () => {
    const lru = new ByteBoundedLru<string, number>({ maxBytes: 10, maxEntries: 2, keepNewest: true });
    lru.set("a", 1, 4);
    lru.set("b", 2, 4);
    expect(lru.set("huge", 3, 50)).toBe(true);
    expect([keys(lru), lru.bytes]).toEqual([["huge"], 50]);
    lru.set("d", 4, 1);
    expect([keys(lru), lru.bytes]).toEqual([["d"], 1]);
    const none = new ByteBoundedLru<string, number>({ maxBytes: 10, maxEntries: 0, keepNewest: true });
    none.set("only", 1, 1);
    expect(keys(none)).toEqual(["only"]);
  });

  it("bounds the count beside the bytes; nothing is kept at maxEntries 0 without keepNewest", () => {
    const lru = new ByteBoundedLru<string, number>({ maxBytes: 100, maxEntries: 2 });
    lru.set("a", 1, 1);
    lru.set("b", 2, 1);
    lru.set("c", 3, 1);
    expect([keys(lru), lru.bytes]).toEqual([["b", "c"], 2]);
    const none = new ByteBoundedLru<string, number>({ maxBytes: 100, maxEntries: 0 });
    expect(none.set("a", 1, 1)).toBe(false);
    expect([none.size, none.bytes]).toEqual([0, 0]);
  });

  it("get leaves the use order alone; use marks the entry most recently used; set of a kept key moves it last", () => {
    const lru = new ByteBoundedLru<string, number>({ maxBytes: 3 });
    for (const key of ["a", "b", "c"]) lru.set(key, key.charCodeAt(0), 1);
    expect(lru.get("a")).toBe(97);
    expect(keys(lru)).toEqual(["a", "b", "c"]);
    expect(lru.use("a")).toBe(97);
    expect(keys(lru)).toEqual(["b", "c", "a"]);
    expect(lru.use("missing")).toBeUndefined();
    lru.set("b", 0, 1);
    expect([keys(lru), lru.bytes]).toEqual([["c", "a", "b"], 3]);
    lru.set("d", 100, 1);
    expect(keys(lru)).toEqual(["a", "b", "d"]);
  });

  it("delete returns the value it forgot; clear forgets all; deleting while iterating oldest first is safe", () => {
    const lru = new ByteBoundedLru<object, string>({ maxBytes: 100 });
    const [x, y, z] = [{}, {}, {}];
    lru.set(x, "x", 5);
    lru.set(y, "y", 6);
    lru.set(z, "z", 7);
    expect([lru.delete(y), lru.delete(y), lru.bytes]).toEqual(["y", undefined, 12]);
    const seen: string[] = [];
    for (const [key, value] of lru.oldestFirst()) {
      seen.push(value);
      lru.delete(key);
    }
    expect([seen, lru.size, lru.bytes]).toEqual([["x", "z"], 0, 0]);
    lru.set(x, "x", 5);
    lru.clear();
    expect([lru.size, lru.bytes, lru.get(x)]).toEqual([0, 0, undefined]);
  });

  it("reports what a bound pushed out (not what was deleted or replaced); reweigh keeps the use order and evicts what it puts over, also from inside evicted", () => {
    const evicted: string[] = [];
    const lru: ByteBoundedLru<string, number> = new ByteBoundedLru<string, number>({
      maxBytes: 10,
      keepNewest: true,
      // What "a" leaving costs another entry: "c" weighs 5 more from then on.
      evicted: (key) => {
        evicted.push(key);
        if (key === "a") lru.reweigh("c", 8);
      },
    });
    lru.set("a", 1, 3);
    lru.set("b", 2, 3);
    lru.set("c", 3, 3);
    lru.set("b", 20, 3); // replaced: not reported
    lru.delete("b"); // deleted: not reported
    expect(evicted).toEqual([]);
    lru.set("d", 4, 3);
    expect([keys(lru), lru.bytes]).toEqual([["a", "c", "d"], 9]);
    // "a" pushed out by "e" puts "c" at 8: over again, so "c" goes too, inside the one set.
    lru.set("e", 5, 3);
    expect([evicted, keys(lru), lru.bytes]).toEqual([["a", "c"], ["d", "e"], 6]);
    lru.set("f", 6, 1);
    expect([lru.reweigh("d", 2), lru.bytesOf("d"), keys(lru), lru.bytes]).toEqual([true, 2, ["d", "e", "f"], 6]);
    expect(lru.reweigh("e", 10)).toBe(false); // over: "d" goes, and then "e" itself
    expect([evicted, keys(lru), lru.bytes]).toEqual([["a", "c", "d", "e"], ["f"], 1]);
    expect(lru.reweigh("f", 19)).toBe(true); // the newest stays, alone over the bound
    expect([keys(lru), lru.bytes, lru.reweigh("gone", 1)]).toEqual([["f"], 19, false]);
  });

  it("keeps the last 1,000 of 100,000 sets over a bound of 1,000, evicting as it goes", () => {
    const lru = new ByteBoundedLru<number, number>({ maxBytes: 1_000 });
    for (let index = 0; index < 100_000; index++) lru.set(index, index, 1);
    expect([lru.size, lru.bytes, lru.get(98_999), lru.get(99_000), lru.get(99_999)]).toEqual([1_000, 1_000, undefined, 99_000, 99_999]);
  });
});
