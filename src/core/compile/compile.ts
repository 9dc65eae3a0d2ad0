import { create } from "@bufbuild/protobuf";
import {
  CompileResultPart,
  CompileResultSchema,
  CurrentTurnSchema,
  ToolRoundRepair,
  TransformationAction,
  TransformationReason,
  type CompileRequest,
  type CompileResult,
  type CompileSource,
  type Transformation,
  type Usage,
  type Writeback,
} from "#gen/contextd/v1/compile_pb";
import { Provider, type Message } from "#gen/contextd/v1/message_pb";
import { renderRequestPaced } from "../providers/render.js";
import { createEstimator } from "../tokens/estimator.js";
import { applyArtifacts, applyExperiences } from "./artifacts.js";
import { applyBudget } from "./budget.js";
import type { CompileContext } from "./compile-context.js";
import { CompileEvents } from "./compile-events.js";
import { applyDeferredBlocks } from "./deferred-blocks.js";
import type { ElidedHead } from "./elided-head.js";
import { elideHistoryHead } from "./history-head.js";
import { normalize } from "./normalize.js";
import { payloadOf, persistenceProjection, snapshotOf, writebackSnapshot } from "./persistence.js";
import { cacheImpact } from "./cache-impact.js";
import { calibrationReport } from "./token-calibration.js";
import { prefixFingerprint } from "./prefix-fingerprint.js";
import { sendLargeToolResultsAsPreviews } from "./large-tool-results.js";
import { applyHooks } from "./redaction.js";
import { resolveCompileInputs } from "./request-inputs.js";
import { applyRoleProjection } from "./role-projection.js";
import { scratchMessages } from "./scratch.js";
import { checkToolDefinitionTexts } from "../deltas/tool-definitions.js";
import { applySystemPrompt, toolDefinitionTextCharacters } from "./system-prompt.js";
import { applySegmentFormatters } from "./segment-formatters.js";
import { computeTargets, validateTargets } from "./targets.js";
import { applyTextReplacements } from "./text-replacements.js";
import { checkToolArguments, showToolArgumentsAsString } from "./tool-arguments-repair.js";
import { validateAndRepairToolRounds } from "./tool-round-repair.js";
import { cutHistoryAtProviderCompaction } from "./provider-compaction-cut.js";
import { repairToolRoundsForPrompt } from "./prompt-tool-round-repair.js";
import { DeadlineCheck } from "./deadline.js";
import { TextAllowance, textCharacters } from "./text-allowance.js";
import type { CompileInputs } from "./request-inputs.js";
import type { CompileWork } from "./working-set.js";

/**
 * Compiles a request into a provider-ready payload (semantics §3), stages in order. Pure apart from
 * what `context` supplies; errors are `ConnectError`s with the gRPC code of semantics §5, and
 * nothing is returned unless every stage succeeded.
 */
export async function compile(request: CompileRequest, context: CompileContext): Promise<CompileResult> {
  const events = new CompileEvents(context, request.conversationId);
  validateTargets(request.targets);
  const renderProvider = request.render?.provider ?? Provider.UNSPECIFIED;
  const deadline = context.deadline || context.yieldToEventLoop ? new DeadlineCheck(context.deadline, context.now, context.yieldToEventLoop) : DeadlineCheck.none;
  const estimator = await createEstimator(request.budget?.estimator, renderProvider, "budget.estimator", context.tokenCounts, request.render?.model ?? "", deadline);
  // The calibration correction for what is rendered, applied to the budget's limit (stage 10).
  const correction = renderProvider !== Provider.UNSPECIFIED && context.calibration
    ? await context.calibration({ provider: renderProvider, model: request.render!.model, estimator: estimator.kind })
    : undefined;

  // 1. Normalize + identity, tool-argument and tool-round validation and repair. A stored history's
  // head that the budget is certain to drop is left out, its figures added back (history-head.ts).
  const inputs = resolveCompileInputs(request, context.stored);
  checkToolDefinitionTexts(inputs.toolDefinitions, "tool_definitions");
  const head = await elideHistoryHead(request, inputs, context, estimator, deadline, correction?.factor ?? 1);
  const textAllowance = new TextAllowance(requestTextCharacters(request, inputs) + (head?.characters ?? 0), context.maxCompileTextBytes);
  const { work, extras } = normalize(request, inputs, estimator, context.randomId, { textAllowance, deadline });
  if (head) work.historyCounts = { history: work.segments.history, counts: head.tailCounts, offset: head.count };
  // What the whole history normalises to: with a head left out, the stored history itself (a clean
  // history is passed through as the same array).
  // (A head planned from the stored tail has no history: the compile then builds no part that copies it.)
  const normalizedSegments = head?.history ? { ...work.segments, history: head.history as Message[] } : work.segments;
  checkToolArguments(work, inputs, extras, request.toolArgumentsRepair);
  validateAndRepairToolRounds(work, request.repair, context.randomId);
  const repairedSegments = head?.history ? { ...work.segments, history: head.history as Message[] } : work.segments;
  if (deadline.checkNow("normalize")) await deadline.pause("normalize");
  await events.stageDone("normalize");

  // 2. Freeze source. Messages are never mutated by later stages, so sharing them is a frozen copy.
  // Literals with every field set: equal to `create(...)` without its reflective walk of 1,000s of messages.
  // Only the parts `context.parts` asks for are built.
  const wanted = (part: CompileResultPart) => context.parts === undefined || context.parts.has(part);
  const source: CompileSource | undefined = wanted(CompileResultPart.SOURCE)
    ? {
        $typeName: "contextd.v1.CompileSource",
        snapshot: snapshotOf(normalizedSegments, work.artifacts),
        pending: work.pending,
        currentTurn: work.currentTurn && create(CurrentTurnSchema, work.currentTurn),
      }
    : undefined;
  const normalizedSnapshot = wanted(CompileResultPart.NORMALIZED_SNAPSHOT) ? snapshotOf(repairedSegments, work.artifacts) : undefined;
  const writeback: Writeback = {
    $typeName: "contextd.v1.Writeback",
    messages: work.writebackMessages,
    snapshot: wanted(CompileResultPart.WRITEBACK_SNAPSHOT) ? writebackSnapshot(repairedSegments, work.artifacts, work.currentTurn) : undefined,
  };
  if (deadline.checkNow("freeze_source")) await deadline.pause("freeze_source");
  await events.stageDone("freeze_source");

  // Built only when named (not with `parts` absent, unlike the parts above): an entry per message.
  if (context.parts?.has(CompileResultPart.MESSAGE_TOKENS)) work.messageTokens = Object.create(null) as Record<string, bigint>;

  // 3. Artifacts and the experiences block.
  applyArtifacts(work, context.tokenCounts);
  applyExperiences(work);
  if (deadline.checkNow("artifacts")) await deadline.pause("artifacts");
  await events.stageDone("artifacts");

  // 4. Deferred blocks; what stands after them is the baseline persistence saves.
  if (extras.deferredBlocks.length > 0) await applyDeferredBlocks(work, extras.deferredBlocks);
  work.baseline = work.segments;
  // The default tool-round repair changes the prompt only, so it runs after the baseline.
  if (request.repair === ToolRoundRepair.UNSPECIFIED) repairToolRoundsForPrompt(work, context.randomId);
  if (deadline.checkNow("deferred_blocks")) await deadline.pause("deferred_blocks");
  await events.stageDone("deferred_blocks");

  // 5. System-prompt assembly: the tool guidance and tool-call rules blocks, compile-only (after
  // the baseline, so persistence never sees them; before presentation, which treats them as any
  // system message).
  await applySystemPrompt(work);
  if (deadline.checkNow("system_prompt")) await deadline.pause("system_prompt");
  await events.stageDone("system_prompt");

  // 6.–9. Presentation: stored tool arguments shown as a string, large tool results as previews,
  // hooks, role projection, formatters, text replacements.
  showToolArgumentsAsString(work);
  sendLargeToolResultsAsPreviews(work);
  if (request.hooks.length > 0) await applyHooks(work, context.searchRegexOffThread);
  if (deadline.checkNow("hooks")) await deadline.pause("hooks");
  await events.stageDone("hooks");
  applyRoleProjection(work);
  if (deadline.checkNow("role_projection")) await deadline.pause("role_projection");
  await events.stageDone("role_projection");
  if (request.formatters.length > 0) await applySegmentFormatters(work, request.formatters, "formatters");
  if (deadline.checkNow("segment_formatters")) await deadline.pause("segment_formatters");
  await events.stageDone("segment_formatters");
  if (request.textReplacements.length > 0) await applyTextReplacements(work);
  if (deadline.checkNow("text_replacements")) await deadline.pause("text_replacements");
  await events.stageDone("text_replacements");

  // What a provider compaction part stands for is not sent, so the budget never weighs it.
  cutHistoryAtProviderCompaction(work, renderProvider);
  // 10. Budget (appends pending and the current turn). 11. Scratch goes last in the payload but is
  // prepared first: the budget reserves its tokens.
  const scratch = scratchMessages(work, extras.scratch);
  const historyBeforeBudget = work.segments.history;
  const budget = await applyBudget(work, scratch, context, correction?.factor ?? 1);
  if (deadline.checkNow("budget")) await deadline.pause("budget");
  await events.stageDone("budget");

  // 12. Payload and provider render.
  const payload = payloadOf(work.segments, scratch, work.toolDefinitions);
  const rendered = renderProvider !== Provider.UNSPECIFIED ? await renderRequestPaced(payload, request.render!, deadline) : undefined;
  if (rendered) work.warnings.push(...rendered.warnings);
  if (deadline.checkNow("render")) await deadline.pause("render");
  await events.stageDone("render");

  // 13. Targets.
  const projections = await computeTargets(request, { ...work, segments: repairedSegments }, extras, context);
  if (deadline.checkNow("targets")) await deadline.pause("targets");
  await events.stageDone("targets");

  // 14. Result.
  const summary = budget.summary ? work.segments.history[0] : undefined;
  // A literal with every field set, in declaration order: equal to `create(UsageSchema, ...)`
  // without its reflective walk, which is a noticeable part of a small compile.
  const usage: Usage = {
    $typeName: "contextd.v1.Usage",
    system: BigInt(budget.system + budget.scratch),
    history: BigInt(budget.history),
    memory: BigInt(budget.memory),
    tools: BigInt(budget.tools),
    toolDefinitions: BigInt(budget.toolDefinitions),
    pending: BigInt(budget.pending),
    reserved: BigInt(budget.reserved),
    limit: BigInt(budget.limit),
    total: BigInt(budget.total),
    estimator: estimator.kind,
    historyBeforeTrim: BigInt(budget.historyBeforeTrim + (head?.tokens ?? 0)),
    replyPriming: BigInt(budget.perRequest),
    clearedTokens: BigInt(budget.clearedTokens),
  };
  // Big containers are filled by assignment: `create` with an init object walks every field
  // reflectively, which costs milliseconds at a thousand messages.
  const result = create(CompileResultSchema);
  result.payload = payload;
  result.rendered = rendered;
  result.source = source;
  result.normalizedSnapshot = normalizedSnapshot;
  result.writeback = writeback;
  result.introduced = work.introduced;
  result.transformations = work.records;
  if (work.messageTokens) result.messageTokens = work.messageTokens;
  result.projections = projections;
  result.persistence = wanted(CompileResultPart.PERSISTENCE) ? persistenceProjection(work, summary) : undefined;
  result.usage = usage;
  result.warnings = work.warnings;
  result.prefixFingerprint = prefixFingerprint(payload);
  result.version = inputs.version;
  if (context.compileMemory && request.conversationId !== "") {
    // Per provider and model, as providers cache: an inspector's or a side model's compile of the
    // same conversation is not the previous compile of the agent's model.
    const key = JSON.stringify([request.conversationId, renderProvider, request.render?.model ?? ""]);
    const compared = cacheImpact(payload, estimator, context.tokenCounts, inputs.version, context.compileMemory.previous(key));
    context.compileMemory.remember(key, compared.prefix);
    result.cacheImpact = compared.impact;
  }
  result.budgetDroppedMessages = budgetDroppedMessages(work, head);
  if (correction) {
    result.calibration = calibrationReport({ provider: renderProvider, model: request.render!.model, estimator: estimator.kind }, correction, budget.total, budget.requestedLimit);
  }
  await events.stageDone("result");
  result.stageTimings = events.timings;

  emitSummaryEvents(events, budget, work, { head, history: historyBeforeBudget });
  events.emit({ case: "pipelineCompiled", value: { $typeName: "contextd.v1.PipelineCompiled", totalCost: BigInt(budget.total), durationNs: events.elapsedNs() } });
  return result;
}

/** The text a compile starts from, which its text allowance is relative to. */
function requestTextCharacters(request: CompileRequest, inputs: CompileInputs): number {
  const { system, history, memory, tools } = inputs.segments;
  let total = textCharacters(system) + textCharacters(history) + textCharacters(memory) + textCharacters(tools) + textCharacters(request.pending) + textCharacters(request.scratch);
  for (const block of request.deferredBlocks) total += textCharacters(block.messages);
  if (request.systemPrompt?.toolGuidance) total += toolDefinitionTextCharacters(inputs.toolDefinitions);
  const turn = request.currentTurn;
  if (turn?.raw) total += textCharacters([turn.raw]);
  if (turn?.promptSafe) total += textCharacters([turn.promptSafe]);
  return total;
}

/** Messages the budget dropped (DROPPED, TOKEN_BUDGET_EXCEEDED), the elided head's included. */
function budgetDroppedMessages(work: CompileWork, head: ElidedHead | undefined): bigint {
  let dropped = head?.count ?? 0;
  for (const id in work.records) if (work.records[id]!.reason === TransformationReason.TOKEN_BUDGET_EXCEEDED) dropped++;
  return BigInt(dropped);
}

/**
 * The history the budget trimmed: the stored history's head the compile left out (if any), then
 * the history segment the budget stage received.
 */
interface TrimmedHistory {
  head: ElidedHead | undefined;
  history: readonly Message[];
}

function emitSummaryEvents(events: CompileEvents, budget: Awaited<ReturnType<typeof applyBudget>>, work: CompileWork, { head, history }: TrimmedHistory): void {
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

function emitPressureEvents(events: CompileEvents, budget: Awaited<ReturnType<typeof applyBudget>>): void {
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
