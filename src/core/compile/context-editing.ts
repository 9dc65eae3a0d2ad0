import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { TransformationAction, TransformationReason, TrimStep, type Budget, type ToolResultClearing } from "#gen/contextd/v1/compile_pb";
import { Role, ToolPayloadSchema, type Message, type Part } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import type { TokenCountCache } from "../tokens/token-count-cache.js";
import { setRecord, type CompileWork } from "./working-set.js";
import { calibratedLimit } from "./token-calibration.js";
import { applyEditGroups, type EditGroup, type MinTrimGain } from "./min-trim-gain.js";

/**
 * Why it exists: dropping whole rounds from the head is the bluntest way to fit a budget. Coding
 * agents' contexts are mostly old tool results (file reads, searches, test logs) that the model no
 * longer needs word for word, and old reasoning that providers do not need back. Clearing them
 * first keeps the conversation's shape — every call, every answer, in order — and frees the most
 * tokens for the least meaning lost. Clearing moves its cut in steps (`clear_at_least_tokens`) so
 * that a provider's prompt cache sees the same prefix turn after turn instead of a prefix that
 * changes every turn.
 *
 * Both edits are what this compile sends; the stored conversation is never changed.
 */

/** The most tool names `exclude_tools` may list, and the most bytes of a placeholder. */
export const maxExcludedTools = 256;
export const maxPlaceholderBytes = 4_096;
const defaultKeepRecent = 3;
const defaultPlaceholder = "[result of {name} cleared to save context]";

/** History after clearing, its per-message counts, and the tokens clearing freed. */
export interface ClearedHistory {
  history: Message[];
  counts: number[];
  freedTokens: number;
  /** The tokens freed per message id (for the `message_cleared` events); absent when nothing was cleared. */
  freedByMessage?: Map<string, number>;
}

/** Adds `freed` tokens to `id`'s share in `cleared` (a message may be cleared by both kinds). */
function addFreed(cleared: Map<string, number>, id: string, freed: number): void {
  cleared.set(id, (cleared.get(id) ?? 0) + freed);
}

/** INVALID_ARGUMENT naming the field when a clearing option is out of range; checked on every compile that sets one. */
export function validateClearing(budget: Budget | undefined, path: string, maxTokens: number): void {
  const clearing = budget?.toolResultClearing;
  if (!clearing) return;
  const where = `${path}.tool_result_clearing`;
  const tokens = (value: bigint, name: string) => {
    if (value < 0n || value > BigInt(maxTokens)) throw new ConnectError(`${where}.${name} must be from 0 to ${maxTokens}, got ${value}`, Code.InvalidArgument);
  };
  tokens(clearing.triggerTokens, "trigger_tokens");
  tokens(clearing.clearAtLeastTokens, "clear_at_least_tokens");
  if (clearing.excludeTools.length > maxExcludedTools) {
    throw new ConnectError(`${where}.exclude_tools lists ${clearing.excludeTools.length} names, at most ${maxExcludedTools} are allowed`, Code.InvalidArgument);
  }
  const placeholderBytes = Buffer.byteLength(clearing.placeholder, "utf8");
  if (placeholderBytes > maxPlaceholderBytes) {
    throw new ConnectError(`${where}.placeholder has ${placeholderBytes} bytes, at most ${maxPlaceholderBytes} are allowed`, Code.InvalidArgument);
  }
}

/**
 * Reasoning clearing, then tool-result clearing, over `history` whose counts are `counts`;
 * `reserved` is everything else the request holds and `limitTokens` the budget's limit (0 = none),
 * already corrected by `correction`, which corrects an explicit `trigger_tokens` and
 * `clear_at_least_tokens` the same way (`calibratedLimit`). Both are planned first (tool-result
 * clearing on the history reasoning clearing leaves), then weighed together by the minimum-gain
 * rule when one is given, then recorded. Returns the inputs themselves when nothing changed.
 */
export async function clearHistory(
  work: CompileWork,
  history: Message[],
  counts: number[],
  reserved: number,
  limitTokens: number,
  cache: TokenCountCache,
  correction = 1,
  gain?: MinTrimGain,
): Promise<ClearedHistory> {
  const budget = work.request.budget;
  const reasoning = budget?.reasoningClearing ? await planReasoningClearing(work, history, counts, budget.reasoningClearing.keepRecentTurns, cache) : [];
  const afterReasoning = reasoning.length > 0 ? applyEditGroups(history, counts, reasoning) : { history, counts, freed: 0 };
  const results = budget?.toolResultClearing
    ? await planToolResultClearing(work, afterReasoning.history, afterReasoning.counts, budget.toolResultClearing, reserved, limitTokens, budget.retainedIds, cache, correction)
    : [];
  if (reasoning.length === 0 && results.length === 0) return { history, counts, freedTokens: 0 };
  const [reasoningRuns, resultRuns] = gain
    ? (gain.weighClearing(history, counts, [{ step: TrimStep.REASONING_CLEARING, groups: reasoning }, { step: TrimStep.TOOL_RESULT_CLEARING, groups: results }], { reserved, limit: limitTokens }) as [EditGroup[], PlannedClearing[]])
    : [reasoning, results];
  if (reasoningRuns.length === 0 && resultRuns.length === 0) return { history, counts, freedTokens: 0 };
  const freedByMessage = new Map<string, number>();
  for (const { changes } of reasoningRuns) {
    for (const change of changes) {
      addFreed(freedByMessage, change.after.id, change.countBefore - change.countAfter);
      setRecord(work, change.after.id, TransformationAction.FORMATTED, TransformationReason.REASONING_CLEARED, Segment.HISTORY);
    }
  }
  for (const group of resultRuns) {
    work.textAllowance.charge(group.placeholderChars, "budget (tool result clearing)");
    for (const change of group.changes) {
      setRecord(work, change.after.id, TransformationAction.FORMATTED, TransformationReason.TOOL_RESULT_CLEARED, Segment.HISTORY);
      addFreed(freedByMessage, change.after.id, change.countBefore - change.countAfter);
    }
  }
  const applied = applyEditGroups(history, counts, [...reasoningRuns, ...resultRuns]);
  return { history: applied.history, counts: applied.counts, freedTokens: applied.freed, freedByMessage };
}

/** One group per assistant message whose reasoning goes, oldest first. */
async function planReasoningClearing(work: CompileWork, history: readonly Message[], counts: readonly number[], keepRecentTurns: number, cache: TokenCountCache): Promise<EditGroup[]> {
  // Where the kept turns start: the keep-th USER message from the end (the last one at least).
  let keptFrom = history.length;
  let turns = 0;
  for (let index = history.length - 1; index >= 0 && turns < Math.max(1, keepRecentTurns); index--) {
    if (history[index]!.role === Role.USER) {
      keptFrom = index;
      turns++;
    }
  }
  // Fewer turns than kept, or no USER message at all: everything is recent.
  if (turns < Math.max(1, keepRecentTurns)) return [];
  const groups: EditGroup[] = [];
  for (let index = 0; index < keptFrom; index++) {
    const message = history[index]!;
    if (message.role !== Role.ASSISTANT) continue;
    const parts = message.parts.filter((part) => part.kind.case !== "reasoning");
    if (parts.length === message.parts.length || parts.length === 0) continue;
    const stripped: Message = { ...message, parts };
    const count = await cache.countPaced(work.estimator, stripped, work.deadline);
    groups.push({ changes: [{ index, after: stripped, countBefore: counts[index]!, countAfter: count }] });
  }
  return groups;
}

/** A cleared result (with its call when `clear_inputs`) and the placeholder text it adds. */
interface PlannedClearing extends EditGroup {
  placeholderChars: number;
}

/** One TOOL message clearing would change: where it is and which of its result parts go. */
interface Candidate {
  index: number;
  parts: ReadonlySet<number>;
}

async function planToolResultClearing(
  work: CompileWork,
  history: readonly Message[],
  historyCounts: readonly number[],
  options: ToolResultClearing,
  reserved: number,
  limitTokens: number,
  retainedIds: readonly string[],
  cache: TokenCountCache,
  correction: number,
): Promise<PlannedClearing[]> {
  // An explicit trigger and step are provider tokens, as the limit is: corrected alike.
  const trigger = options.triggerTokens > 0n ? calibratedLimit(Number(options.triggerTokens), correction) : limitTokens;
  if (trigger === 0) return [];
  let historyTokens = 0;
  for (const count of historyCounts) historyTokens += count;
  const overflow = reserved + historyTokens - trigger;
  if (overflow <= 0) return [];
  const step = calibratedLimit(Number(options.clearAtLeastTokens), correction);
  // Rounded up to whole steps: the cut stays where it is until the overflow crosses a step.
  const need = step > 0 ? Math.ceil(overflow / step) * step : overflow;

  const candidates = clearableResults(history, options, new Set(retainedIds));
  if (candidates.length === 0) return [];
  const placeholder = options.placeholder === "" ? defaultPlaceholder : options.placeholder;
  const callers = options.clearInputs ? callingMessages(history) : undefined;

  const edited = [...history];
  const counts = [...historyCounts];
  // Every change in order, one group per cleared result (with its call when `clear_inputs`):
  // what is charged and recorded once clearing is decided, and what the minimum-gain rule weighs.
  const groups: PlannedClearing[] = [];
  const change = (index: number, message: Message, count: number) => {
    groups.at(-1)!.changes.push({ index, after: message, countBefore: counts[index]!, countAfter: count });
    freed += counts[index]! - count;
    edited[index] = message;
    counts[index] = count;
  };
  let freed = 0;
  for (const candidate of candidates) {
    if (freed >= need) break;
    const message = edited[candidate.index]!;
    const clearedCalls: string[] = [];
    let placeholderChars = 0;
    const parts = message.parts.map((part, partIndex): Part => {
      if (!candidate.parts.has(partIndex) || part.kind.case !== "toolResult") return part;
      const result = part.kind.value;
      clearedCalls.push(result.toolCallId);
      const text = placeholder.replaceAll("{name}", result.name === "" ? "tool" : result.name);
      placeholderChars += text.length;
      return { ...part, kind: { case: "toolResult", value: { ...result, payload: create(ToolPayloadSchema, { text }), contentParts: [] } } };
    });
    const replaced: Message = { ...message, parts };
    const count = await cache.countPaced(work.estimator, replaced, work.deadline);
    // A result shorter than its placeholder stays: clearing it would cost tokens.
    if (count >= counts[candidate.index]!) continue;
    groups.push({ changes: [], placeholderChars });
    change(candidate.index, replaced, count);
    for (const callId of clearedCalls) {
      const callerIndex = callers?.get(callId);
      if (callerIndex === undefined) continue;
      const caller = edited[callerIndex]!;
      const withoutArguments: Message = {
        ...caller,
        parts: caller.parts.map((part): Part => (part.kind.case === "toolCall" && part.kind.value.id === callId ? { ...part, kind: { case: "toolCall", value: { ...part.kind.value, arguments: create(ToolPayloadSchema) } } } : part)),
      };
      change(callerIndex, withoutArguments, await cache.countPaced(work.estimator, withoutArguments, work.deadline));
    }
  }
  // Short of the need, every clearable result is cleared and the budget drops rounds for the rest.
  // (Stopping at the last whole step instead left the newest, largest results whole, and the
  // budget then dropped everything before them: the cut swung by hundreds of messages from turn to
  // turn in `npm run bench:editing`.) Clearing that cannot free one whole step is not worth the
  // cache it breaks.
  if (step > 0 && freed < step) return [];
  if (freed <= 0) return [];
  return groups;
}

/**
 * TOOL messages with results clearing may replace, oldest first: not among the `keep_recent`
 * most recent results, not of an excluded tool, not a retained id, and with a payload or extra
 * content to clear.
 */
function clearableResults(history: readonly Message[], options: ToolResultClearing, retained: ReadonlySet<string>): Candidate[] {
  const excluded = new Set(options.excludeTools);
  let recentLeft = options.keepRecent ?? defaultKeepRecent;
  const candidates: Candidate[] = [];
  for (let index = history.length - 1; index >= 0; index--) {
    const message = history[index]!;
    if (message.role !== Role.TOOL) continue;
    const parts = new Set<number>();
    for (let partIndex = message.parts.length - 1; partIndex >= 0; partIndex--) {
      const kind = message.parts[partIndex]!.kind;
      if (kind.case !== "toolResult") continue;
      if (recentLeft > 0) {
        recentLeft--;
        continue;
      }
      if (excluded.has(kind.value.name) || retained.has(message.id)) continue;
      parts.add(partIndex);
    }
    if (parts.size > 0) candidates.push({ index, parts });
  }
  return candidates.reverse();
}

/** Call id → index of the assistant message that made the call. */
function callingMessages(history: readonly Message[]): Map<string, number> {
  const callers = new Map<string, number>();
  history.forEach((message, index) => {
    if (message.role !== Role.ASSISTANT) return;
    for (const part of message.parts) if (part.kind.case === "toolCall") callers.set(part.kind.value.id, index);
  });
  return callers;
}
