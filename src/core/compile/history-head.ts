import { BudgetStrategy, CompileResultPart, type CompileRequest } from "#gen/contextd/v1/compile_pb";
import { calibratedLimit } from "./token-calibration.js";
import type { Message } from "#gen/contextd/v1/message_pb";
import type { TokenEstimator } from "../tokens/estimator.js";
import { maxBudgetTokens } from "./max-budget-tokens.js";
import type { CompileContext } from "./compile-context.js";
import type { ElidedHead } from "./elided-head.js";
import type { DeadlineCheck } from "./deadline.js";
import type { CompileInputs } from "./request-inputs.js";

/**
 * Leaves out the head of the stored history when every message of it would get exactly one fate
 * in the full pipeline: DROPPED for the token budget. That holds when
 * - the compile is stateful on the stored history (no `history` in the request) and the caller
 *   wants neither every record, persistence nor per-message tokens (each lists the head message by message);
 * - no stage before the budget could change a history message or its tokens: no pending, deferred
 *   blocks, hooks, formatters, text replacements, role projection or targets;
 * - the budget is `max_tokens` with DROP_HEAD (or DROP), no protected roles or retained ids, and
 *   the stored history is clean (`HistoryFacts.clean`: nothing for stage 1 to reject or repair);
 * - no other message of the compile shares an id with a history message (the full path's error
 *   names the history index);
 * - the tail left has more tokens than the whole limit, so the budget trims it and drops every
 *   unit before it (it drops from the head until the rest fits), and the latest user message,
 *   which the budget protects, is in the tail.
 * Then `inputs.segments.history` becomes the tail (a copy of it) and the head's figures come back.
 */
export async function elideHistoryHead(
  request: CompileRequest,
  inputs: CompileInputs,
  context: CompileContext,
  estimator: TokenEstimator,
  clock: DeadlineCheck,
  /** The calibration correction the budget will apply to the limit (`calibratedLimit`). */
  correction = 1,
): Promise<ElidedHead | undefined> {
  if (context.storedHead) {
    // Planned from the stored tail (`planStoredHead`): the stored state holds the window only.
    const { head, tailFrom } = context.storedHead;
    inputs.segments = { ...inputs.segments, history: inputs.segments.history.slice(tailFrom) };
    return head;
  }
  if (!context.historyFacts || !context.parts || !inputs.storedSegments.has("history")) return undefined;
  if (!headElisionAllowed(request, context.parts)) return undefined;
  const budget = request.budget!;
  const history = inputs.segments.history;
  if (history.length < 2) return undefined;

  const facts = context.historyFacts(history);
  if (!facts || !facts.clean || facts.history !== history) return undefined;
  const turn = request.currentTurn;
  const turnGiven = turn !== undefined && (turn.raw !== undefined || turn.promptSafe !== undefined);
  if (turnGiven && (turn.raw?.id ?? "") === "" && (turn.promptSafe?.id ?? "") === "") return undefined;
  const otherIds = [turn?.raw?.id ?? "", turn?.promptSafe?.id ?? "", "experiences"];
  for (const field of ["system", "memory", "tools"] as const) for (const message of inputs.segments[field]) otherIds.push(message.id);
  request.scratch.forEach((message, index) => otherIds.push(message.id === "" ? `scratch:${index}` : message.id));
  for (const artifact of inputs.artifacts) otherIds.push(`artifact:${artifact.id}`);
  for (const id of otherIds) if (id !== "" && facts.hasId(id)) return undefined;

  const { counts, prefix } = await facts.tokenPrefix(estimator, context.tokenCounts, clock);
  const limit = calibratedLimit(Number(budget.maxTokens), correction);
  const total = prefix[history.length]!;
  // The last unit start whose tail has more tokens than the limit (tails shrink as the start grows).
  const starts = facts.unitStarts;
  let low = -1;
  let high = starts.length - 1;
  while (low < high) {
    const middle = (low + high + 1) >> 1;
    if (total - prefix[starts[middle]!]! > limit) low = middle;
    else high = middle - 1;
  }
  if (low < 0) return undefined;
  let cut = starts[low]!;
  const latestUserProtected = !turnGiven && !budget.trimLatestUserMessage;
  if (latestUserProtected && facts.lastUser >= 0) cut = Math.min(cut, facts.unitStartOf(facts.lastUser));
  if (cut <= 0) return undefined;
  inputs.segments = { ...inputs.segments, history: history.slice(cut) };
  return {
    history,
    firstId: history[0]!.id,
    lastId: history[cut - 1]!.id,
    count: cut,
    tokens: prefix[cut]!,
    characters: facts.characters[cut]!,
    tailCounts: counts.slice(cut),
  };
}

/**
 * Whether the request lets the head be left out at all (what `elideHistoryHead` checks of the
 * request before it looks at the history): no part that lists the head, nothing before the budget
 * that changes a history message, a `max_tokens` budget that drops from the head.
 */
export function headElisionAllowed(request: CompileRequest, parts: ReadonlySet<CompileResultPart>): boolean {
  // Each of these lists the head message by message.
  if (parts.has(CompileResultPart.ALL_TRANSFORMATIONS) || parts.has(CompileResultPart.PERSISTENCE) || parts.has(CompileResultPart.MESSAGE_TOKENS)) return false;
  if (
    request.pending.length > 0 ||
    request.deferredBlocks.length > 0 ||
    request.hooks.length > 0 ||
    request.formatters.length > 0 ||
    request.textReplacements.length > 0 ||
    request.targets.length > 0 ||
    (request.roleProjection?.rules.length ?? 0) > 0 ||
    // Previews change the head's token counts before the budget sees them.
    request.largeToolResults !== undefined
  ) {
    return false;
  }
  const budget = request.budget;
  if (!budget || budget.maxTokens <= 0n || budget.maxTokens > BigInt(maxBudgetTokens)) return false;
  if (budget.strategy !== BudgetStrategy.UNSPECIFIED && budget.strategy !== BudgetStrategy.DROP_HEAD && budget.strategy !== BudgetStrategy.DROP) return false;
  if (budget.protectedRoles.length > 0 || budget.retainedIds.length > 0) return false;
  // Clearing frees tokens instead of dropping the head, and steps round the overflow of the whole
  // history: with either, the head is not certain to go.
  if (budget.toolResultClearing || budget.reasoningClearing || budget.trimStepTokens > 0n) return false;
  return true;
}

