import { Role, type Message } from "#gen/contextd/v1/message_pb";
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

/**
 * `selectUnitsToDrop` from the head with the overflow rounded up to whole `step`s
 * (`Budget.trim_step_tokens`). The head's units do not change as history grows at its tail, so the
 * units that add up to k steps are the same from turn to turn: the cut moves only when the overflow
 * crosses the next step.
 */
export function selectHeadUnitsInSteps(units: readonly CostedUnit[], available: number, step: number): Set<number> {
  let total = 0;
  for (const unit of units) total += unit.tokens;
  const overflow = total - available;
  if (overflow <= 0) return new Set();
  return selectUnitsToDrop(units, total - Math.ceil(overflow / step) * step, "head");
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

/** What aligning kept history to a user turn adds to the units already dropped. */
export interface Alignment {
  /** Indices of further units to drop, in history order. */
  drops: number[];
  /** The protected unit history starts with instead of a user turn, when one stood in the way. */
  blockedBy?: number;
}

/**
 * The units to drop after `dropped` so that kept history starts where every provider and a model
 * can start: a USER message, or a summary. Trimming by units keeps rounds whole but not exchanges:
 * dropping the oldest units one at a time can leave an answer whose question is gone, or a tool
 * round, at the head (the OpenAI body then goes system → assistant, the Anthropic and Gemini ones
 * start on assistant / model). The scan stops at the first unit that may start history, or at a
 * protected unit (never dropped for alignment), and reads each unit at most once.
 */
export function alignToUserTurn(units: readonly CostedUnit[], history: readonly Message[], dropped: ReadonlySet<number>): Alignment {
  const drops: number[] = [];
  for (let index = 0; index < units.length; index++) {
    if (dropped.has(index)) continue;
    const unit = units[index]!;
    if (mayStartHistory(unit, history)) return { drops };
    if (unit.protected) return { drops, blockedBy: index };
    drops.push(index);
  }
  return { drops };
}

/** A USER message or a summary (a stored `compact`, or one the compile asked for). */
export function mayStartHistory(unit: HistoryUnit, history: readonly Message[]): boolean {
  if (unit.round) return false;
  const message = history[unit.start]!;
  return message.role === Role.USER || message.provenance?.kind.case === "summary";
}
