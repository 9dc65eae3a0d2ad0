import type { HistoryUnit } from "../model/tool-rounds.js";

/** History units with their token costs, from prefix sums over per-message counts. */
export interface CostedUnit extends HistoryUnit {
  tokens: number;
  /** Never dropped: protected role, retained id, or an open round of the turn in progress. */
  protected: boolean;
}

/** Which units to drop so the rest fits `available`, oldest (`head`) or newest (`tail`) first. */
export function selectUnitsToDrop(units: readonly CostedUnit[], available: number, from: "head" | "tail"): Set<number> {
  let total = 0;
  for (const unit of units) total += unit.tokens;
  const dropped = new Set<number>();
  for (let step = 0; step < units.length && total > available; step++) {
    const index = from === "head" ? step : units.length - 1 - step;
    const unit = units[index]!;
    if (unit.protected) continue;
    dropped.add(index);
    total -= unit.tokens;
  }
  return dropped;
}

/** Every unprotected unit (DROP, and DROP_HEAD's `min_messages` rule). */
export function selectAllUnprotected(units: readonly CostedUnit[]): Set<number> {
  const dropped = new Set<number>();
  units.forEach((unit, index) => !unit.protected && dropped.add(index));
  return dropped;
}

/**
 * Per-message counts folded into unit costs: each unit sums its own messages' counts, which for
 * the units of an analysis (consecutive, non-overlapping) reads every count once. Cheaper than a
 * prefix-sum array, whose off-heap typed array costs more to allocate than the sums themselves.
 */
export function costUnits(units: readonly HistoryUnit[], counts: readonly number[], isProtected: (unit: HistoryUnit) => boolean): CostedUnit[] {
  const costed = new Array<CostedUnit>(units.length);
  for (let index = 0; index < units.length; index++) {
    const unit = units[index]!;
    let tokens = 0;
    for (let at = unit.start; at < unit.end; at++) tokens += counts[at]!;
    costed[index] = { start: unit.start, end: unit.end, round: unit.round, tokens, protected: isProtected(unit) };
  }
  return costed;
}
