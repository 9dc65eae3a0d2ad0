import { describe, expect, it } from "vitest";
import { costUnits } from "../../src/core/compile/history-trimming.js";
import type { HistoryUnit } from "../../src/core/model/tool-rounds.js";

/** Unit costs as they were computed before: differences of a prefix-sum array. */
function referenceCosts(units: readonly HistoryUnit[], counts: readonly number[]): number[] {
  const prefix = new Float64Array(counts.length + 1);
  for (let index = 0; index < counts.length; index++) prefix[index + 1] = prefix[index]! + counts[index]!;
  return units.map((unit) => prefix[unit.end]! - prefix[unit.start]!);
}

describe("costUnits", () => {
  it("costs consecutive units as the prefix sums did, keeping each unit's fields and protection", () => {
    let state = 5;
    const random = () => ((state = (state * 1103515245 + 12345) >>> 0) / 2 ** 32);
    for (let round = 0; round < 500; round++) {
      const length = Math.floor(random() * 60);
      const counts = Array.from({ length }, () => Math.floor(random() * (random() < 0.1 ? 1e9 : 500)));
      const units: HistoryUnit[] = [];
      for (let start = 0; start < length; ) {
        const end = Math.min(length, start + 1 + Math.floor(random() * 4));
        units.push(end - start > 1 ? { start, end, round: { callIds: ["c"], callNames: new Map([["c", "f"]]), missingCallIds: [], open: false } } : { start, end });
        start = end;
      }
      const protectedStarts = new Set(units.filter(() => random() < 0.2).map((unit) => unit.start));
      const costed = costUnits(units, counts, (unit) => protectedStarts.has(unit.start));
      expect(costed.map((unit) => unit.tokens), `round ${round}`).toEqual(referenceCosts(units, counts));
      expect(costed.map((unit) => unit.protected)).toEqual(units.map((unit) => protectedStarts.has(unit.start)));
      expect(costed.map(({ start, end, round: shape }) => ({ start, end, round: shape }))).toEqual(units.map(({ start, end, round: shape }) => ({ start, end, round: shape })));
      costed.forEach((unit, index) => expect(unit.round).toBe(units[index]!.round));
    }
  });
});
