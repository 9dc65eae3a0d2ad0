import { TransformationAction, TransformationReason, type Transformation } from "#gen/contextd/v1/compile_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import type { BudgetReport } from "./budget.js";
import type { CompileEvents } from "./compile-events.js";
import type { ElidedHead } from "./elided-head.js";
import type { CompileWork } from "./working-set.js";

/**
 * The history the budget trimmed: the stored history's head the compile left out (if any), then
 * the history segment the budget stage received.
 */
export interface TrimmedHistory {
  head: ElidedHead | undefined;
  history: readonly Message[];
}

/**
 * The events that sum a compile up once its stages are done, before `pipeline_compiled`: the
 * tokens of each block, what was dropped and cleared, a summary's ratio and the budget's pressure.
 */
export function emitSummaryEvents(events: CompileEvents, budget: BudgetReport, work: CompileWork, { head, history }: TrimmedHistory): void {
  const blocks: [string, number][] = [
    ["system", budget.system],
    ["history", budget.history],
    ["memory", budget.memory],
    ["tools", budget.tools],
    ["tool_definitions", budget.toolDefinitions],
    ["pending", budget.pending],
    ["scratch", budget.scratch],
  ];
  for (const [block, count] of blocks) events.emit({ case: "tokensEstimated", value: { $typeName: "contextd.v1.TokensEstimated", block, count: BigInt(count) } });
  // One event per final DROPPED record, whatever dropped it (budget, alignment, summary, repairs):
  // the same set the records and the metric count. The run of budget-dropped messages at the start
  // of the history is one history_head_dropped event instead, so the events of a compile cost the
  // same at 100 and 100,000 stored messages; the elided head is the start of that run.
  if (!events.observed) return emitPressureEvents(events, budget);
  let tailRun = 0;
  while (tailRun < history.length && isBudgetDropped(work.records[history[tailRun]!.id])) tailRun++;
  const runCount = (head?.count ?? 0) + tailRun;
  if (runCount > 0) {
    const firstMessageId = head && head.count > 0 ? head.firstId : history[0]!.id;
    const lastMessageId = tailRun > 0 ? history[tailRun - 1]!.id : head!.lastId;
    events.emit({
      case: "historyHeadDropped",
      value: { $typeName: "contextd.v1.HistoryHeadDropped", count: BigInt(runCount), firstMessageId, lastMessageId },
    });
  }
  if (work.droppedIds) {
    const emitted = new Set<string>();
    for (let index = 0; index < tailRun; index++) emitted.add(history[index]!.id);
    for (const messageId of work.droppedIds) {
      const record = work.records[messageId]!;
      if (record.action !== TransformationAction.DROPPED || emitted.has(messageId)) continue;
      emitted.add(messageId);
      events.emit({ case: "messageDropped", value: { $typeName: "contextd.v1.MessageDropped", messageId, reason: record.reason } });
    }
  }
  // One event per message clearing changed whose final record is still the clearing's.
  if (budget.clearedMessages) {
    for (const [messageId, freedTokens] of budget.clearedMessages) {
      const record = work.records[messageId];
      if (record?.action !== TransformationAction.FORMATTED) continue;
      if (record.reason !== TransformationReason.TOOL_RESULT_CLEARED && record.reason !== TransformationReason.REASONING_CLEARED) continue;
      events.emit({ case: "messageCleared", value: { $typeName: "contextd.v1.MessageCleared", messageId, reason: record.reason, freedTokens: BigInt(freedTokens) } });
    }
  }
  emitPressureEvents(events, budget);
}

function isBudgetDropped(record: Transformation | undefined): boolean {
  return record !== undefined && record.action === TransformationAction.DROPPED && record.reason === TransformationReason.TOKEN_BUDGET_EXCEEDED;
}

function emitPressureEvents(events: CompileEvents, budget: BudgetReport): void {
  if (budget.summary) {
    const ratio = budget.summary.replacedTokens > 0 ? budget.summary.tokens / budget.summary.replacedTokens : 0;
    events.emit({ case: "contextSummarized", value: { $typeName: "contextd.v1.ContextSummarized", ratio } });
  }
  // Headroom: what the next turn may add before the request overflows.
  events.emit({
    case: "budgetPressure",
    value: {
      $typeName: "contextd.v1.BudgetPressure",
      total: BigInt(budget.total),
      limit: BigInt(budget.limit),
      ratio: budget.limit > 0 ? budget.total / budget.limit : 0,
      headroom: BigInt(budget.limit > 0 ? budget.limit - budget.total : 0),
    },
  });
}
