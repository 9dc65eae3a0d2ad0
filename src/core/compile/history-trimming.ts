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

/** Per-message counts folded into unit costs through prefix sums: no message is counted twice. */
export function costUnits(units: readonly HistoryUnit[], counts: readonly number[], isProtected: (unit: HistoryUnit) => boolean): CostedUnit[] {
  const prefix = new Float64Array(counts.length + 1);
  for (let index = 0; index < counts.length; index++) prefix[index + 1] = prefix[index]! + counts[index]!;
  return units.map((unit) => ({
    start: unit.start,
    end: unit.end,
    round: unit.round,
    tokens: prefix[unit.end]! - prefix[unit.start]!,
    protected: isProtected(unit),
  }));
}
