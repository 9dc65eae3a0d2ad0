import { create, equals } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  BudgetStrategy,
  type Budget,
  HistoryStart,
  IntroducedMessageSchema,
  TransformationAction,
  TransformationReason,
  type TrimStepForecast,
} from "#gen/contextd/v1/compile_pb";
import { SummarizeRequestSchema } from "#gen/contextd/v1/context_service_pb";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { assertSummaryContent, summaryCoverage } from "../deltas/compact.js";
import { extractSummaryFacts, summaryTemplate } from "./summary-evidence.js";
import { analyzeToolRounds } from "../model/tool-rounds.js";
import type { CompileContext } from "./compile-context.js";
import { alignToUserTurn, costUnits, selectAllUnprotected, selectHeadUnitsInSteps, selectUnitsToDrop, type Alignment, type CostedUnit } from "./history-trimming.js";
import { clearHistory, validateClearing } from "./context-editing.js";
import type { CachedPrompt } from "./cache-impact.js";
import { MinTrimGain, validateMinTrimGain } from "./min-trim-gain.js";
import { calibratedLimit } from "./token-calibration.js";
import { maxBudgetTokens } from "./max-budget-tokens.js";
import { assertWellFormedMessage } from "./message-validation.js";
import { addWarning, recordPassed, setRecord, type CompileWork } from "./working-set.js";
import { ErrorReason, withErrorDetails } from "../model/error-details.js";

/** Token figures of the budgeted payload; the usage block and events are built from it. */
export interface BudgetReport {
  system: number;
  history: number;
  historyBeforeTrim: number;
  /** Tokens freed by tool-result and reasoning clearing (`context-editing.ts`). */
  clearedTokens: number;
  /** Tokens freed per cleared message id; absent when nothing was cleared. */
  clearedMessages?: ReadonlyMap<string, number>;
  memory: number;
  tools: number;
  toolDefinitions: number;
  pending: number;
  scratch: number;
  /** The provider's per-request framing (TOKENIZER), part of reserved. */
  perRequest: number;
  reserved: number;
  /** The limit the estimates were held to: `requestedLimit` divided by the correction. */
  limit: number;
  /** The budget's own limit, before the calibration correction. */
  requestedLimit: number;
  total: number;
  summary?: { tokens: number; replacedTokens: number };
  /** The steps the minimum-gain rule weighed (`Budget.min_trim_gain`); absent when none. */
  trimSteps?: TrimStepForecast[];
}

interface Limit {
  tokens: number;
  /** True when derived from context_window - output_reserve (auto_compact / "context full" apply). */
  fromWindow: boolean;
}


function resolveLimit(work: CompileWork): Limit {
  const budget = work.request.budget;
  if (!budget) return { tokens: 0, fromWindow: false };
  const check = (value: bigint, name: string) => {
    if (value < 0n || value > BigInt(maxBudgetTokens)) {
      throw new ConnectError(`budget.${name} must be from 0 to ${maxBudgetTokens}, got ${value}`, Code.InvalidArgument);
    }
  };
  check(budget.maxTokens, "max_tokens");
  check(budget.contextWindow, "context_window");
  check(budget.outputReserve, "output_reserve");
  check(budget.minMessages, "min_messages");
  check(budget.trimStepTokens, "trim_step_tokens");
  if (BudgetStrategy[budget.strategy] === undefined) {
    throw new ConnectError(`budget.strategy: unknown strategy ${budget.strategy}`, Code.InvalidArgument);
  }
  validateClearing(budget, "budget", maxBudgetTokens);
  validateMinTrimGain(budget, "budget");
  budget.protectedRoles.forEach((role, index) => {
    if (Role[role] === undefined || role === Role.UNSPECIFIED) {
      throw new ConnectError(`budget.protected_roles[${index}]: a known role is required`, Code.InvalidArgument);
    }
  });
  if (budget.maxTokens > 0n) return { tokens: Number(budget.maxTokens), fromWindow: false };
  if (budget.contextWindow > 0n) {
    if (budget.outputReserve >= budget.contextWindow) {
      throw new ConnectError(
        `budget.output_reserve (${budget.outputReserve}) must be smaller than budget.context_window (${budget.contextWindow})`,
        Code.InvalidArgument,
      );
    }
    return { tokens: Number(budget.contextWindow - budget.outputReserve), fromWindow: true };
  }
  return { tokens: 0, fromWindow: false };
}

function sum(counts: readonly number[]): number {
  let total = 0;
  for (const count of counts) total += count;
  return total;
}

/**
 * Stage 10: one whole-request estimate; only history is trimmed, to `limit - reserved`, by the
 * strategy, tool rounds as whole units, pending and the current turn protected and appended after
 * history. The final payload is re-estimated; a compile is never silently over budget.
 */
export async function applyBudget(work: CompileWork, scratch: readonly Message[], context: CompileContext, correction = 1, cached?: CachedPrompt): Promise<BudgetReport> {
  const { estimator } = work;
  const cache = context.tokenCounts;
  const requested = resolveLimit(work);
  // A calibrated budget holds estimates to floor(limit / correction) (token-calibration.ts).
  const limit: Limit = { tokens: calibratedLimit(requested.tokens, correction), fromWindow: requested.fromWindow };
  const budget = work.request.budget;
  // The minimum-gain rule weighs steps against the previous compile's prompt (min-trim-gain.ts).
  const gain = cached && budget && budget.minTrimGain > 0 ? new MinTrimGain(budget.minTrimGain, cached) : undefined;
  const turn = work.currentTurn;
  const turnMessage = turn ? (turn.promptSafe ?? turn.raw)! : undefined;

  // Counting is the longest work a compile can do (16 MiB gpt-tokenizer has not seen: seconds), so
  // it gives the event loop turns as it goes (`work.deadline`).
  const clock = work.deadline;
  // `await` only a promise: a warm compile's counts are all known, and each await is a microtask.
  const totals: number[] = [];
  for (const messages of [work.segments.system, work.segments.memory, work.segments.tools, work.pending, scratch]) {
    const counted = cache.countAll(estimator, messages, clock);
    const counts = counted instanceof Promise ? await counted : counted;
    noteMessageTokens(work, messages, counts);
    totals.push(sum(counts));
  }
  const [system, memory, tools, pendingMessages, scratchTokens] = totals as [number, number, number, number, number];
  const toolDefinitions = cache.countToolDefinitions(estimator, work.toolDefinitions);
  const turnTokens = turnMessage ? await cache.countPaced(estimator, turnMessage, clock) : 0;
  if (turnMessage) noteMessageTokens(work, [turnMessage], [turnTokens]);
  const pending = pendingMessages + turnTokens;
  const perRequest = estimator.perRequest;
  const reserved = system + memory + tools + toolDefinitions + pending + scratchTokens + perRequest;

  let history = work.segments.history;
  const known = work.historyCounts?.history === history ? work.historyCounts : undefined;
  const historyCounted = known ? known.counts : cache.countAll(estimator, history, clock);
  let historyCounts = historyCounted instanceof Promise ? await historyCounted : historyCounted;
  const historyBeforeTrim = sum(historyCounts);
  let summary: BudgetReport["summary"];
  // Clearing old tool results and reasoning comes before any round is dropped.
  let clearedTokens = 0;
  let clearedMessages: ReadonlyMap<string, number> | undefined;
  if (budget?.toolResultClearing || budget?.reasoningClearing) {
    const cleared = await clearHistory(work, history, [...historyCounts], reserved, limit.tokens, cache, correction, gain);
    history = cleared.history;
    historyCounts = cleared.counts;
    clearedTokens = cleared.freedTokens;
    clearedMessages = cleared.freedByMessage;
  }
  const historyBeforeDropping = historyBeforeTrim - clearedTokens;
  // As the budget weighs them: after clearing, before dropping (a dropped one costs what it would have).
  noteMessageTokens(work, history, historyCounts);

  if (limit.tokens > 0) {
    const figures = `system ${system}, memory ${memory}, tools ${tools}, tool definitions ${toolDefinitions}, pending and current turn ${pending}, scratch ${scratchTokens}, framing ${perRequest}`;
    if (pending + perRequest > limit.tokens) {
      throw budgetExceeded(`pending exceeds budget: pending messages and the current turn need ${pending + perRequest} tokens, the limit is ${limit.tokens}`, limit.tokens);
    }
    if (reserved > limit.tokens) {
      throw budgetExceeded(`budget exceeded: ${reserved} tokens are reserved before any history (${figures}), the limit is ${limit.tokens}`, limit.tokens);
    }
    const available = limit.tokens - reserved;
    if (historyBeforeDropping > available) {
      const strategy = budget?.strategy ?? BudgetStrategy.UNSPECIFIED;
      if (limit.fromWindow && !budget!.autoCompact) {
        throw budgetExceeded(`context full: the request needs ${reserved + historyBeforeDropping} tokens, the context window ${budget!.contextWindow} minus output reserve ${budget!.outputReserve} leaves ${limit.tokens}; enable budget.auto_compact or compact the history`, limit.tokens);
      }
      if (strategy === BudgetStrategy.STRICT) {
        throw budgetExceeded(`budget exceeded (STRICT): history needs ${historyBeforeDropping} tokens, ${available} are left after ${reserved} reserved (${figures}), limit ${limit.tokens}`, limit.tokens);
      }
      const protectedRoles = new Set(budget?.protectedRoles ?? []);
      const retained = new Set(budget?.retainedIds ?? []);
      const protectsMessages = protectedRoles.size > 0 || retained.size > 0;
      // Without a current turn or a user message in pending, the latest user message of history is
      // the one being answered. With either, that is the question, and history's last user message
      // is an older one: protecting it would keep it without its answer. Unless pending starts with
      // a round in progress (an assistant or tool message): that round answers history's latest
      // user message, and dropping it would leave the body starting on a tool call.
      const tail = [...work.pending, ...(turnMessage ? [turnMessage] : [])];
      const answeredAfterHistory = tail.some((message) => message.role === Role.USER) && !isRoundInProgress(tail[0]!);
      const latestUser = !answeredAfterHistory && !budget?.trimLatestUserMessage ? lastUserMessageIndex(history) : -1;
      if (latestUser >= 0 && historyCounts[latestUser]! > available) {
        throw budgetExceeded(`budget exceeded: the latest user message "${history[latestUser]!.id}" (history[${latestUser + (known?.offset ?? 0)}]) needs ${historyCounts[latestUser]} tokens and is protected like the current turn (set budget.trim_latest_user_message to let the budget drop it); ${available} are left after ${reserved} reserved (${figures}), the limit is ${limit.tokens}`, limit.tokens);
      }
      const analysis = work.historyRounds?.history === history ? work.historyRounds.analysis : analyzeToolRounds(history, { allowOpenTail: true });
      const units = costUnits(analysis.units, historyCounts, (unit) => {
        if (unit.round?.open) return true;
        if (unit.start === latestUser) return true;
        if (!protectsMessages) return false;
        for (let index = unit.start; index < unit.end; index++) {
          const message = history[index]!;
          if (protectedRoles.has(message.role) || retained.has(message.id)) return true;
        }
        return false;
      });
      const aligns = (budget?.historyStart ?? HistoryStart.UNSPECIFIED) !== HistoryStart.ANY;
      // Units dropped only so that history starts on a user turn; recorded apart from the budget's.
      let alignmentDrops: ReadonlySet<number> = new Set<number>();
      // The protected message history starts with instead of a user turn, when one is in the way.
      let unaligned: Message | undefined;
      /** Adds the alignment's units to `selected`; returns them (a few) apart from the budget's. */
      const align = (selected: Set<number>, candidates: readonly CostedUnit[]): Alignment => {
        if (!aligns || selected.size === 0) return { drops: [] };
        const alignment = alignToUserTurn(candidates, history, selected);
        for (const index of alignment.drops) selected.add(index);
        unaligned = alignment.blockedBy === undefined ? undefined : history[candidates[alignment.blockedBy]!.start];
        return alignment;
      };

      let summarize = strategy === BudgetStrategy.SUMMARIZE || (limit.fromWindow && budget!.autoCompact);
      if (summarize && !context.summarize) {
        addWarning(work, "summarize_fallback", "no summarizer is connected (use CompileSession); history was trimmed with DROP_HEAD instead");
        summarize = false;
      }
      // A summary (SUMMARIZE, or auto_compact over the window) replaces the oldest prefix whatever
      // the strategy; without one the strategy trims.
      const reason = TransformationReason.TOKEN_BUDGET_EXCEEDED;
      const action = TransformationAction.DROPPED;
      // Keep a quarter of the available tokens free for the summary that replaces the prefix.
      const summaryUnits = summarize ? summarizablePrefix(units, history) : undefined;
      let drop = summaryUnits ? selectUnitsToDrop(summaryUnits, available - summaryReserve(available), "head") : undefined;
      if (drop?.size === 0) {
        // A protected unit at the very head leaves nothing to summarise: the strategy trims instead.
        summarize = false;
        drop = undefined;
      }
      if (drop !== undefined) {
        // The summary covers the prefix up to the next user turn, so no orphaned answer follows it
        // (never past what a summary may stand in for).
        align(drop, summaryUnits!);
      } else {
        if (strategy === BudgetStrategy.DROP) {
          drop = selectAllUnprotected(units);
        } else if (strategy === BudgetStrategy.DROP_TAIL) {
          drop = selectUnitsToDrop(units, available, "tail");
        } else {
          // The step is in provider tokens like the limit: corrected the same way.
          const step = calibratedLimit(Number(budget?.trimStepTokens ?? 0n), correction);
          drop = step > 0 ? selectHeadUnitsInSteps(units, available, step) : selectUnitsToDrop(units, available, "head");
          // Rounds dropped beyond the cached prompt's cut that the limit does not need may stay.
          if (gain) drop = gain.weighHeadDrop(history, historyCounts, units, drop, available) ?? drop;
        }
        alignmentDrops = new Set(align(drop, units).drops);
        const minMessages = Number(budget?.minMessages ?? 0n);
        const selected = drop;
        if (strategy !== BudgetStrategy.DROP && strategy !== BudgetStrategy.DROP_TAIL && minMessages > 0 && selected.size > 0) {
          const remaining = units.reduce((count, unit, index) => (selected.has(index) ? count : count + unit.end - unit.start), 0);
          if (remaining < minMessages) {
            // All of history goes for the budget's own rule; nothing is left to align.
            drop = selectAllUnprotected(units);
            alignmentDrops = new Set();
            unaligned = undefined;
          }
        }
      }
      const dropSet: Set<number> = drop;
      if (!summarize && strategy !== BudgetStrategy.DROP && strategy !== BudgetStrategy.DROP_TAIL) warnOversizedUnit(work, units, dropSet, history, known?.offset ?? 0, available, budget);

      const kept: Message[] = [];
      const keptCounts: number[] = [];
      const droppedMessages: Message[] = [];
      const alignedMessages: Message[] = [];
      units.forEach((unit, index) => {
        for (let at = unit.start; at < unit.end; at++) {
          if (alignmentDrops.has(index)) alignedMessages.push(history[at]!);
          else if (dropSet.has(index)) droppedMessages.push(history[at]!);
          else {
            kept.push(history[at]!);
            keptCounts.push(historyCounts[at]!);
          }
        }
      });
      if (summarize && droppedMessages.length > 0) {
        const summaryMessage = await requestSummary(work, context, droppedMessages, available - sum(keptCounts), strategy === BudgetStrategy.SUMMARIZE ? "summarize_strategy" : "auto_compact");
        const summaryTokens = await cache.countPaced(estimator, summaryMessage, clock);
        noteMessageTokens(work, [summaryMessage], [summaryTokens]);
        summary = { tokens: summaryTokens, replacedTokens: unitsTokens(units, dropSet) };
        for (const message of droppedMessages) {
          setRecord(work, message.id, action, TransformationReason.SUMMARIZED, Segment.HISTORY);
        }
        droppedMessages.length = 0;
        // A summary longer than asked for pushes out more of the oldest kept units (not summarised).
        const remaining = units.filter((_, index) => !dropSet.has(index));
        const overflow = selectUnitsToDrop(remaining, available - summaryTokens, "head");
        if (overflow.size > 0) {
          addWarning(work, "summary_over_target", `the summary has ${summaryTokens} tokens; ${overflow.size} more history unit(s) were dropped to fit`);
          const alignedOverflow = new Set(align(overflow, remaining).drops);
          kept.length = 0;
          keptCounts.length = 0;
          remaining.forEach((unit, index) => {
            for (let at = unit.start; at < unit.end; at++) {
              if (alignedOverflow.has(index)) alignedMessages.push(history[at]!);
              else if (overflow.has(index)) droppedMessages.push(history[at]!);
              else {
                kept.push(history[at]!);
                keptCounts.push(historyCounts[at]!);
              }
            }
          });
        }
        kept.unshift(summaryMessage);
        keptCounts.unshift(summaryTokens);
        // History starts on the summary, whatever protected unit follows it.
        unaligned = undefined;
      }
      for (const message of droppedMessages) {
        setRecord(work, message.id, action, reason, Segment.HISTORY);
      }
      if (alignedMessages.length > 0) {
        for (const message of alignedMessages) {
          setRecord(work, message.id, TransformationAction.DROPPED, TransformationReason.HISTORY_ALIGNMENT, Segment.HISTORY);
        }
        const next = kept.find((message) => message.provenance?.kind.case !== "summary");
        addWarning(
          work,
          "history_aligned",
          `after trimming, history must start on a user turn: ${alignedMessages.length} more message(s) were dropped (${quoteIds(alignedMessages)})${next ? `, so it continues at message "${next.id}"` : ", which left no history"}; set budget.history_start to HISTORY_START_ANY to keep them`,
        );
      }
      if (unaligned !== undefined) {
        addWarning(work, "history_unaligned", `after trimming, history starts with the protected message "${unaligned.id}" (${Role[unaligned.role]}), not a user turn: protected messages are never dropped for alignment`);
      }
      history = kept;
      historyCounts = keptCounts;
    }
  }

  const historyTokens = sum(historyCounts);
  const total = reserved + historyTokens;
  if (limit.tokens > 0 && total > limit.tokens) {
    throw budgetExceeded(`budget exceeded: ${total} tokens after trimming history to ${historyTokens} tokens of protected messages (protected roles, retained ids, open tool round, latest user message${summary ? ", summary" : ""}), the limit is ${limit.tokens}`, limit.tokens);
  }

  // Pending and the current turn go after history, untouched by every earlier stage.
  for (const message of work.pending) setRecord(work, message.id, TransformationAction.PASSED, TransformationReason.PROTECTED_PENDING, Segment.HISTORY);
  const appended = [...work.pending];
  if (turn && turnMessage) {
    appended.push(turnMessage);
    const projected = turn.promptSafe !== undefined && turn.raw !== undefined && !sameContent(turn.raw, turn.promptSafe);
    setRecord(
      work,
      turnMessage.id,
      projected ? TransformationAction.FORMATTED : TransformationAction.PASSED,
      projected ? TransformationReason.CURRENT_TURN_PROJECTION : TransformationReason.UNCHANGED,
      Segment.HISTORY,
    );
  }
  work.segments = { ...work.segments, history: appended.length === 0 ? history : [...history, ...appended] };

  return {
    system,
    history: historyTokens,
    historyBeforeTrim,
    clearedTokens,
    clearedMessages,
    memory,
    tools,
    toolDefinitions,
    pending,
    scratch: scratchTokens,
    perRequest,
    reserved,
    limit: limit.tokens,
    requestedLimit: requested.tokens,
    total,
    summary,
    trimSteps: gain && gain.forecasts.length > 0 ? gain.forecasts : undefined,
  };
}

/** Records each message's count in `work.messageTokens`, when the caller asked for them. */
function noteMessageTokens(work: CompileWork, messages: readonly Message[], counts: readonly number[]): void {
  const table = work.messageTokens;
  if (!table) return;
  for (let index = 0; index < messages.length; index++) table[messages[index]!.id] = BigInt(counts[index]!);
}

/**
 * The units a summary may stand in for: the run before the first protected unit or the first
 * message holding a provider compaction part, the rest marked protected. A summary sits at the
 * head of history, so it can only replace a contiguous prefix (the stored `compact` delta covers
 * exactly that prefix); an open round is always protected. A compaction part is never covered: a
 * stored summary replaces what it covers, and the provider's encrypted content would be gone from
 * the store (trimming drops it from the prompt only).
 */
function summarizablePrefix(units: readonly CostedUnit[], history: readonly Message[]): CostedUnit[] {
  const holdsCompaction = (unit: CostedUnit) => {
    for (let index = unit.start; index < unit.end; index++) if (history[index]!.parts.some((part) => part.kind.case === "providerCompaction")) return true;
    return false;
  };
  const firstProtected = units.findIndex((unit) => unit.protected || holdsCompaction(unit));
  if (firstProtected < 0) return [...units];
  return units.map((unit, index) => (index < firstProtected ? unit : { ...unit, protected: true }));
}

/** Tokens kept free for a requested summary: a quarter of what history may use, at least one. */
function summaryReserve(available: number): number {
  return Math.max(1, Math.floor(available / 4));
}

function unitsTokens(units: readonly CostedUnit[], selected: ReadonlySet<number>): number {
  let total = 0;
  selected.forEach((index) => (total += units[index]!.tokens));
  return total;
}

function sameContent(a: Message, b: Message): boolean {
  return equals(MessageSchema, a, b);
}

/**
 * Asks the connected summarizer for a summary of the dropped units and returns it as the new head
 * of history: provenance summary covering every dropped id plus whatever an earlier summary
 * covered, introduced and persisted (it replaces the dropped prefix in storage).
 */
async function requestSummary(
  work: CompileWork,
  context: CompileContext,
  droppedMessages: Message[],
  targetTokens: number,
  reason: string,
): Promise<Message> {
  const previous = droppedMessages[0]!.provenance?.kind.case === "summary" ? droppedMessages[0] : undefined;
  const facts = extractSummaryFacts(droppedMessages);
  const response = await context.summarize!(
    create(SummarizeRequestSchema, {
      requestId: context.randomId(),
      messages: droppedMessages,
      targetTokens: BigInt(Math.max(1, targetTokens)),
      previousSummary: previous,
      reason,
      template: summaryTemplate,
      facts: facts.facts,
      factsTruncated: facts.truncated,
    }),
  );
  if (!response.summary) throw new ConnectError("summarize_response.summary is required", Code.InvalidArgument);
  assertSummaryContent(response.summary, "summarize_response.summary");
  const coverage = summaryCoverage(droppedMessages);
  const summary: Message = {
    ...response.summary,
    role: response.summary.role === Role.UNSPECIFIED ? Role.ASSISTANT : response.summary.role,
    id: response.summary.id === "" ? `summary:${context.randomId()}` : response.summary.id,
    provenance: {
      $typeName: "contextd.v1.Provenance",
      kind: { case: "summary", value: { $typeName: "contextd.v1.Provenance.Summary", ...coverage } },
    },
  };
  assertWellFormedMessage(summary, "summarize_response.summary");
  if (summary.id in work.records) {
    throw new ConnectError(`summarize_response.summary.id: "${summary.id}" is already the id of a message in this compile`, Code.InvalidArgument);
  }
  work.introduced.push(create(IntroducedMessageSchema, { segment: Segment.HISTORY, message: summary }));
  work.persistedIntroducedIds.add(summary.id);
  recordPassed(work, [summary], Segment.HISTORY);
  return summary;
}

/** Index of the last USER message of history, or -1. */
function lastUserMessageIndex(history: readonly Message[]): number {
  for (let index = history.length - 1; index >= 0; index--) if (history[index]!.role === Role.USER) return index;
  return -1;
}

/**
 * Says so when one unit larger than all the room history has made the head-first trim drop
 * everything older with it ("oversized_unit"). Dropping oldest first keeps a contiguous tail, so a
 * single 2,700-token tool round under a 2,000-token budget took the whole history with it and kept
 * 63 tokens, silently. The trim is right — the unit can never fit — but the caller can fix what it
 * cost: clearing old tool results (`tool_result_clearing`) shrinks the unit instead.
 */
function warnOversizedUnit(
  work: CompileWork,
  units: readonly CostedUnit[],
  dropped: ReadonlySet<number>,
  history: readonly Message[],
  headLeftOut: number,
  available: number,
  budget: Budget | undefined,
): void {
  // A compile that leaves out the stored head (incremental compile) must say exactly what the
  // full one says: the older messages are counted by position (the head left out plus the walked
  // ones before the unit), never by what they cost.
  let newest = -1;
  for (const index of dropped) if (index > newest) newest = index;
  const olderMessages = units[newest] === undefined ? 0 : units[newest]!.start + headLeftOut;
  if (newest < 0 || units[newest]!.tokens <= available || olderMessages === 0) return;
  const unit = units[newest]!;
  const fix = budget?.toolResultClearing ? "a larger budget" : "tool_result_clearing (old tool results cleared instead of rounds dropped) or a larger budget";
  addWarning(
    work,
    "oversized_unit",
    `history unit at message "${history[unit.start]!.id}" (${unit.end - unit.start} message(s)) needs ${unit.tokens} tokens, more than the ${available} history may use: trimming oldest first dropped it and the ${olderMessages} older message(s) with it; ${fix} would keep them`,
  );
}

/** Message ids for a warning: all of them up to 10, then how many more. */
function quoteIds(messages: readonly Message[]): string {
  const shown = messages.slice(0, 10).map((message) => `"${message.id}"`).join(", ");
  return messages.length > 10 ? `${shown} and ${messages.length - 10} more` : shown;
}

/** RESOURCE_EXHAUSTED, reason BUDGET_EXCEEDED, with the limit in the metadata (`limit_tokens`). */
function budgetExceeded(message: string, limitTokens: number): ConnectError {
  return withErrorDetails(new ConnectError(message, Code.ResourceExhausted), ErrorReason.budgetExceeded, { metadata: { limit_tokens: String(limitTokens) } });
}

/** True for a message that continues a turn rather than asking: an assistant turn or a tool result. */
function isRoundInProgress(message: Message): boolean {
  return message.role === Role.ASSISTANT || message.role === Role.TOOL;
}
