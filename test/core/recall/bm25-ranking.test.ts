import { describe, expect, it } from "vitest";
import { Bm25Ranking } from "../../../src/core/recall/bm25-ranking.js";
import { termCounts } from "../../../src/core/recall/recall-terms.js";

describe("BM25 ranking", () => {
  it("ranks a rare term above a common one, a shorter message above a longer one with the same matches", () => {
    const documents = ["cat src/a.ts", "the note", "the src/b.ts", "a long note about src/a.ts and many other words of no interest to anyone", "the"];
    const ranking = new Bm25Ranking(["src/a.ts", "the"]);
    documents.forEach((text, index) => ranking.add(index, termCounts(text)));
    const top = ranking.top(5);
    const rank = (index: number) => top.findIndex((hit) => hit.index === index);
    expect(top).toHaveLength(5);
    expect(rank(0)).toBe(0);
    expect(top[0]!.score).toBeGreaterThan(top[1]!.score);
    // The same term, the same frequency: the shorter message first.
    expect(rank(0)).toBeLessThan(rank(3));
    expect(rank(4)).toBeLessThan(rank(1));
    expect(rank(1)).toBeLessThan(rank(2));
    expect(ranking.size).toBe(5);
  });

  it("returns only documents holding a query term, at most `count`, ties in the order added", () => {
    const ranking = new Bm25Ranking(["x"]);
    for (let index = 0; index < 10; index++) ranking.add(index, termCounts(index % 2 === 0 ? "x y" : "y z"));
    expect(ranking.top(3).map((hit) => hit.index)).toEqual([0, 2, 4]);
    expect(ranking.top(0)).toEqual([]);
    expect(new Bm25Ranking(["q"]).top(5)).toEqual([]);
  });
});
