import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { TrimStep, TrimStepForecastSchema, type Budget, type TrimStepForecast } from "#gen/contextd/v1/compile_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import type { CachedPrompt } from "./cache-impact.js";
import type { CostedUnit } from "./history-trimming.js";

/**
 * Why it exists: a trim saves tokens on every later request, but the provider's prompt cache
 * keys on exact bytes, so a trim also re-writes every cached token after its first change, and a
 * cache write costs more than a plain input token while a cache read costs a tenth of one. A
 * trim that frees 150 tokens of old reasoning two turns from the end re-writes those two turns
 * (tens of thousands of tokens with tool output) for a saving that takes a hundred requests to
 * pay back. `Budget.min_trim_gain` skips such a step unless the limit needs it: the step runs only
 * when freed >= min_trim_gain × invalidated, invalidated measured against the previous compile the
 * cache-impact report compares with. Deterministic (the request and that previous compile decide)
 * and linear: each step weighed walks the history twice.
 */

/** The largest `min_trim_gain` accepted: a step freeing a thousandth of what it re-writes. */
export const maxMinTrimGain = 1_000;

/** INVALID_ARGUMENT naming the field when `min_trim_gain` is not a finite number from 0 to 1000. */
export function validateMinTrimGain(budget: Budget | undefined, path: string): void {
  const ratio = budget?.minTrimGain ?? 0;
  if (!Number.isFinite(ratio) || ratio < 0 || ratio > maxMinTrimGain) {
    throw new ConnectError(`${path}.min_trim_gain must be a finite number from 0 to ${maxMinTrimGain}, got ${ratio}`, Code.InvalidArgument);
  }
}

/** One message an edit of a clearing step changes: where, to what, and the counts before and after. */
export interface EditChange {
  index: number;
  after: Message;
  countBefore: number;
  countAfter: number;
}

/**
 * What a clearing step does to one result or one message, in the order the step makes them
 * (oldest first): the edits up to some point are what the cached prompt may already have.
 */
export interface EditGroup {
  changes: EditChange[];
}

/** History with `groups` applied, in their order, and the tokens they free. */
export function applyEditGroups(history: readonly Message[], counts: readonly number[], groups: readonly EditGroup[]): { history: Message[]; counts: number[]; freed: number } {
  const edited = [...history];
  const editedCounts = [...counts];
  let freed = 0;
  for (const group of groups) {
    for (const change of group.changes) {
      edited[change.index] = change.after;
      editedCounts[change.index] = change.countAfter;
      freed += change.countBefore - change.countAfter;
    }
  }
  return { history: edited, counts: editedCounts, freed };
}

/** The request's figures a step is weighed against. */
export interface BudgetRoom {
  /** Everything but history (system, memory, tools, pending, ...). */
  reserved: number;
  /** The budget's limit as corrected; 0 = none (then no step is ever needed). */
  limit: number;
}

/**
 * The minimum-gain rule of one compile: the ratio, the previous compile's prompt and what it
 * decided, step by step (`CacheImpact.trim_steps`).
 */
export class MinTrimGain {
  readonly forecasts: TrimStepForecast[] = [];

  constructor(
    private readonly ratio: number,
    private readonly cached: CachedPrompt,
  ) {}

  /**
   * Which groups of each clearing step run (`steps` in the order the budget plans them, each
   * planned on the history the earlier ones leave): all, or only those the cached prompt already
   * has, when the rest is not needed for the limit and frees less than the ratio of what it
   * re-writes. A step is weighed with the later ones as decided so far (all of them running), so
   * that reasoning clearing sees past results the cached prompt has cleared. "Already has" means
   * the group's changes lie where the history with the step matches the cached prompt, from where
   * the cached prompt's history starts; changes before that start are left out with the rest (the
   * cached prompt dropped those messages, and clearing them would shrink the head the budget
   * drops, so that trimming in steps could move the cut back and re-write everything). The cut is
   * assumed to stay at that start, as the budget keeps it when it can. Two applications and two
   * walks of history per step.
   */
  weighClearing(history: readonly Message[], counts: readonly number[], steps: readonly { step: TrimStep; groups: readonly EditGroup[] }[], room: BudgetRoom): EditGroup[][] {
    const decided = steps.map(({ groups }) => [...groups]);
    const start = this.cached.historyStartIn(history);
    if (start < 0) return decided;
    steps.forEach(({ step, groups }, at) => {
      if (groups.length === 0) return;
      const full = applyEditGroups(history, counts, decided.flat());
      const fullMatch = this.cached.match(full.history, full.counts, start);
      const beyond = groups.find((group) => group.changes.some((change) => change.index >= fullMatch.end));
      if (beyond === undefined) return;
      const held = groups.filter((group) => group.changes.every((change) => change.index >= start && change.index < fullMatch.end));
      const without = applyEditGroups(history, counts, decided.flatMap((runs, other) => (other === at ? held : runs)));
      const withoutMatch = this.cached.match(without.history, without.counts, start);
      // What the prompt with the step sends again of what the cache held: every message from its
      // first change to where the prompt without it stops matching, as the step leaves them.
      let rewritten = 0;
      for (let index = fullMatch.end; index < withoutMatch.end; index++) rewritten += full.counts[index]!;
      let kept = room.reserved;
      for (let index = start; index < without.counts.length; index++) kept += without.counts[index]!;
      const firstChange = Math.min(...beyond.changes.map((change) => change.index));
      if (this.decide(step, full.freed - without.freed, rewritten, room.limit > 0 && kept > room.limit, history[firstChange]!.id)) decided[at] = held;
    });
    // A later step's change of a message was planned on what the earlier one made of it (a call
    // whose arguments go, in a message whose reasoning went): that earlier change stays with it.
    const later = new Set<number>();
    for (let at = steps.length - 1; at >= 0; at--) {
      const running = new Set(decided[at]);
      const restored = new Set(steps[at]!.groups.filter((group) => !running.has(group) && group.changes.some((change) => later.has(change.index))));
      if (restored.size > 0) decided[at] = steps[at]!.groups.filter((group) => running.has(group) || restored.has(group));
      for (const group of decided[at]!) for (const change of group.changes) later.add(change.index);
    }
    return decided;
  }

  /**
   * DROP_HEAD's drop when it drops rounds at or after where the cached prompt's history starts
   * while dropping only those before it fits `available` (the `trim_step_tokens` rounding): the
   * rounds before that start when the extra ones free less than the ratio of what they re-write,
   * otherwise undefined (the strategy's drop stands). Weighed, and reported, only while that cut
   * fits. Weighed only when every round before the start is droppable and the
   * start begins a round; otherwise the cached prompt is not a cut this budget could hold.
   */
  weighHeadDrop(history: readonly Message[], counts: readonly number[], units: readonly CostedUnit[], drop: ReadonlySet<number>, available: number): Set<number> | undefined {
    const start = this.cached.historyStartIn(history);
    if (start < 0) return undefined;
    const held = new Set<number>();
    let beyond = false;
    let keptTokens = 0;
    let extraTokens = 0;
    let firstExtra = -1;
    for (let index = 0; index < units.length; index++) {
      const unit = units[index]!;
      if (unit.start < start) {
        if (unit.end > start || unit.protected) return undefined;
        held.add(index);
        continue;
      }
      keptTokens += unit.tokens;
      if (drop.has(index)) {
        beyond = true;
        extraTokens += unit.tokens;
        if (firstExtra < 0) firstExtra = unit.start;
      }
    }
    // A cut the limit moves past is not the budget's to hold: nothing to weigh (and nothing to
    // report, so a compile that left the stored head out reports the same).
    if (!beyond || keptTokens > available) return undefined;
    const heldMatch = this.cached.match(history, counts, start);
    const keptMessages: Message[] = [];
    const keptCounts: number[] = [];
    units.forEach((unit, index) => {
      if (drop.has(index)) return;
      for (let at = unit.start; at < unit.end; at++) {
        keptMessages.push(history[at]!);
        keptCounts.push(counts[at]!);
      }
    });
    // What the prompt with the drop sends again of what the cache held: the kept messages of the
    // cached range (all of it moves once the head moves), less what still matches.
    let rewritten = -this.cached.match(keptMessages, keptCounts, 0).tokens;
    units.forEach((unit, index) => {
      if (drop.has(index) || unit.start < start) return;
      for (let at = unit.start; at < Math.min(unit.end, heldMatch.end); at++) rewritten += counts[at]!;
    });
    const skipped = this.decide(TrimStep.HEAD_ROUNDING, extraTokens, rewritten, false, history[firstExtra]!.id);
    return skipped ? held : undefined;
  }

  /** Records the forecast; true when the step is skipped. */
  private decide(step: TrimStep, freed: number, invalidated: number, needed: boolean, firstMessageId: string): boolean {
    const rewritten = Math.max(0, invalidated);
    const skipped = !needed && freed < this.ratio * rewritten;
    this.forecasts.push(
      create(TrimStepForecastSchema, { step, freedTokens: BigInt(freed), invalidatedTokens: BigInt(rewritten), needed, skipped, firstMessageId }),
    );
    return skipped;
  }
}
