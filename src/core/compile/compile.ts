import { create } from "@bufbuild/protobuf";
import {
  CompileResultPart,
  CurrentTurnSchema,
  ToolRoundRepair,
  type CompileRequest,
  type CompileResult,
  type CompileSource,
  type Snapshot,
  type Writeback,
} from "#gen/contextd/v1/compile_pb";
import { Provider, type Message } from "#gen/contextd/v1/message_pb";
import type { ToolDefinition } from "#gen/contextd/v1/state_pb";
import type { SegmentHolder } from "../model/segments.js";
import { renderRequestPaced } from "../providers/render.js";
import { createEstimator, type TokenEstimator } from "../tokens/estimator.js";
import { applyArtifacts, applyExperiences } from "./artifacts.js";
import { applyBudget } from "./budget.js";
import { CachedPrompt, compileMemoryKey } from "./cache-impact.js";
import type { CompileContext } from "./compile-context.js";
import { CompileEvents } from "./compile-events.js";
import { compileResult, wantsPart } from "./compile-result.js";
import { applyDeferredBlocks } from "./deferred-blocks.js";
import type { ElidedHead } from "./elided-head.js";
import { elideHistoryHead } from "./history-head.js";
import { normalize } from "./normalize.js";
import { payloadOf, snapshotOf, writebackSnapshot } from "./persistence.js";
import type { TokenCorrection } from "./token-calibration.js";
import { sendLargeToolResultsAsPreviews } from "./large-tool-results.js";
import { withRecallTools } from "../recall/recall-tools.js";
import { applyHooks } from "./redaction.js";
import { resolveCompileInputs } from "./request-inputs.js";
import { applyRoleProjection } from "./role-projection.js";
import { scratchMessages } from "./scratch.js";
import { checkToolDefinitionTexts } from "../deltas/tool-definitions.js";
import { applySystemPrompt, toolDefinitionTextCharacters } from "./system-prompt.js";
import { applySegmentFormatters } from "./segment-formatters.js";
import { StageRunner } from "./stage-runner.js";
import { emitSummaryEvents } from "./summary-events.js";
import { computeTargets, validateTargets } from "./targets.js";
import { applyTextReplacements } from "./text-replacements.js";
import { checkToolArguments, showToolArgumentsAsString } from "./tool-arguments-repair.js";
import { validateAndRepairToolRounds } from "./tool-round-repair.js";
import { cutHistoryAtProviderCompaction } from "./provider-compaction-cut.js";
import { repairToolRoundsForPrompt } from "./prompt-tool-round-repair.js";
import { DeadlineCheck } from "./deadline.js";
import { TextAllowance, textCharacters } from "./text-allowance.js";
import type { CompileInputs } from "./request-inputs.js";

/** What the stages start from: the request, its context, and what is settled before stage 1. */
interface CompileStart {
  request: CompileRequest;
  context: CompileContext;
  renderProvider: Provider;
  deadline: DeadlineCheck;
  estimator: TokenEstimator;
  /** The calibration correction for what is rendered, applied to the budget's limit (stage 10). */
  correction: TokenCorrection | undefined;
}

/**
 * The stages in order; each names what it reads, changes (`work`, the working set) and produces.
 * Between two stages `StageRunner` times them, checks the deadline and lends the event loop a turn.
 */
const stages = StageRunner.over<CompileStart>()
  // 1. Normalize + identity, tool-argument and tool-round validation and repair. A stored history's
  // head that the budget is certain to drop is left out, its figures added back (history-head.ts).
  .stage({
    name: "normalize",
    reads: ["request", "context", "estimator", "deadline", "correction"],
    produces: ["inputs", "head", "work", "extras", "normalizedSegments", "repairedSegments"],
    run: async ({ request, context, estimator, deadline, correction }) => {
      const inputs = resolveCompileInputs(request, context.stored);
      checkToolDefinitionTexts(inputs.toolDefinitions, "tool_definitions");
      const head = await elideHistoryHead(request, inputs, context, estimator, deadline, correction?.factor ?? 1);
      const textAllowance = new TextAllowance(requestTextCharacters(request, inputs) + (head?.characters ?? 0), context.maxCompileTextBytes);
      const { work, extras } = normalize(request, inputs, estimator, context.randomId, { textAllowance, deadline });
      if (head) work.historyCounts = { history: work.segments.history, counts: head.tailCounts, offset: head.count };
      const normalizedSegments = wholeHistory(work.segments, head);
      checkToolArguments(work, inputs, extras, request.toolArgumentsRepair);
      validateAndRepairToolRounds(work, request.repair, context.randomId);
      return { inputs, head, work, extras, normalizedSegments, repairedSegments: wholeHistory(work.segments, head) };
    },
  })
  // 2. Freeze source. Messages are never mutated by later stages, so sharing them is a frozen copy.
  // Literals with every field set: equal to `create(...)` without its reflective walk of 1,000s of messages.
  // Only the parts `context.parts` asks for are built.
  .stage({
    name: "freeze_source",
    reads: ["context", "work", "normalizedSegments", "repairedSegments"],
    produces: ["source", "normalizedSnapshot", "writeback"],
    run: ({ context, work, normalizedSegments, repairedSegments }) => {
      const source: CompileSource | undefined = wantsPart(context, CompileResultPart.SOURCE)
        ? {
            $typeName: "contextd.v1.CompileSource",
            snapshot: snapshotOf(normalizedSegments, work.artifacts),
            pending: work.pending,
            currentTurn: work.currentTurn && create(CurrentTurnSchema, work.currentTurn),
          }
        : undefined;
      const normalizedSnapshot: Snapshot | undefined = wantsPart(context, CompileResultPart.NORMALIZED_SNAPSHOT) ? snapshotOf(repairedSegments, work.artifacts) : undefined;
      const writeback: Writeback = {
        $typeName: "contextd.v1.Writeback",
        messages: work.writebackMessages,
        snapshot: wantsPart(context, CompileResultPart.WRITEBACK_SNAPSHOT) ? writebackSnapshot(repairedSegments, work.artifacts, work.currentTurn) : undefined,
      };
      return { source, normalizedSnapshot, writeback };
    },
  })
  // 3. Artifacts and the experiences block.
  .stage({
    name: "artifacts",
    reads: ["context"],
    changes: ["work"],
    run: ({ context, work }) => {
      // Built only when named (not with `parts` absent, unlike the parts above): an entry per message.
      if (context.parts?.has(CompileResultPart.MESSAGE_TOKENS)) work.messageTokens = Object.create(null) as Record<string, bigint>;
      applyArtifacts(work, context.tokenCounts);
      applyExperiences(work);
    },
  })
  // 4. Deferred blocks; what stands after them is the baseline persistence saves.
  .stage({
    name: "deferred_blocks",
    reads: ["request", "context", "extras"],
    changes: ["work"],
    run: async ({ request, context, extras, work }) => {
      if (extras.deferredBlocks.length > 0) await applyDeferredBlocks(work, extras.deferredBlocks);
      work.baseline = work.segments;
      // The default tool-round repair changes the prompt only, so it runs after the baseline.
      if (request.repair === ToolRoundRepair.UNSPECIFIED) repairToolRoundsForPrompt(work, context.randomId);
    },
  })
  // 5. System-prompt assembly: the tool guidance and tool-call rules blocks, compile-only (after
  // the baseline, so persistence never sees them; before presentation, which treats them as any
  // system message).
  .stage({ name: "system_prompt", changes: ["work"], run: ({ work }) => applySystemPrompt(work) })
  // 6.–9. Presentation. 6. Stored tool arguments shown as a string, large tool results as
  // previews, the recall tools, hooks.
  .stage({
    name: "hooks",
    reads: ["request", "context"],
    changes: ["work"],
    run: ({ request, context, work }) => {
      showToolArgumentsAsString(work);
      sendLargeToolResultsAsPreviews(work);
      if (request.recallTools) work.toolDefinitions = withRecallTools(work.toolDefinitions, request.conversationId);
      if (request.hooks.length > 0) return applyHooks(work, context.searchRegexOffThread);
    },
  })
  // 7. Role projection.
  .stage({ name: "role_projection", changes: ["work"], run: ({ work }) => applyRoleProjection(work) })
  // 8. Formatters.
  .stage({
    name: "segment_formatters",
    reads: ["request"],
    changes: ["work"],
    run: ({ request, work }) => {
      if (request.formatters.length > 0) return applySegmentFormatters(work, request.formatters, "formatters");
    },
  })
  // 9. Text replacements.
  .stage({
    name: "text_replacements",
    reads: ["request"],
    changes: ["work"],
    run: ({ request, work }) => {
      if (request.textReplacements.length > 0) return applyTextReplacements(work);
    },
  })
  // 10. Budget (appends pending and the current turn). 11. Scratch goes last in the payload but is
  // prepared first: the budget reserves its tokens. What a provider compaction part stands for is
  // not sent, so the budget never weighs it.
  .stage({
    name: "budget",
    reads: ["context", "extras", "correction", "renderProvider"],
    changes: ["work"],
    produces: ["scratch", "historyBeforeBudget", "budget"],
    run: async ({ context, extras, correction, renderProvider, work }) => {
      cutHistoryAtProviderCompaction(work, renderProvider);
      const scratch = scratchMessages(work, extras.scratch);
      const historyBeforeBudget = work.segments.history;
      return { scratch, historyBeforeBudget, budget: await applyBudget(work, scratch, context, correction?.factor ?? 1, cachedPrompt(work.request, context, work)) };
    },
  })
  // 12. Payload and provider render.
  .stage({
    name: "render",
    reads: ["request", "renderProvider", "deadline", "scratch"],
    changes: ["work"],
    produces: ["payload", "rendered"],
    run: async ({ request, renderProvider, deadline, scratch, work }) => {
      const payload = payloadOf(work.segments, scratch, work.toolDefinitions);
      const rendered = renderProvider !== Provider.UNSPECIFIED ? await renderRequestPaced(payload, request.render!, deadline) : undefined;
      if (rendered) work.warnings.push(...rendered.warnings);
      return { payload, rendered };
    },
  })
  // 13. Targets.
  .stage({
    name: "targets",
    reads: ["request", "context", "extras", "work", "repairedSegments"],
    produces: ["projections"],
    run: async ({ request, context, extras, work, repairedSegments }) => ({
      projections: await computeTargets(request, { ...work, segments: repairedSegments }, extras, context),
    }),
  })
  // 14. Result.
  .stage({
    name: "result",
    reads: ["request", "context", "renderProvider", "estimator", "correction", "inputs", "head", "work", "source", "normalizedSnapshot", "writeback", "budget", "payload", "rendered", "projections"],
    produces: ["result"],
    run: (products) => ({ result: compileResult(products) }),
  });

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
  const correction = renderProvider !== Provider.UNSPECIFIED && context.calibration
    ? await context.calibration({ provider: renderProvider, model: request.render!.model, estimator: estimator.kind })
    : undefined;

  const { state, timings } = await stages.run({ request, context, renderProvider, deadline, estimator, correction }, { context, deadline, events });
  const { result, budget, work, head, historyBeforeBudget } = state;
  result.stageTimings = timings;
  emitSummaryEvents(events, budget, work, { head, history: historyBeforeBudget });
  events.emit({ case: "pipelineCompiled", value: { $typeName: "contextd.v1.PipelineCompiled", totalCost: BigInt(budget.total), durationNs: events.elapsedNs() } });
  return result;
}

/**
 * The previous compile's prompt, when the minimum-gain rule needs it (`Budget.min_trim_gain`): a
 * stateful compile with the memory the cache-impact report compares with.
 */
function cachedPrompt(request: CompileRequest, context: CompileContext, work: { toolDefinitions: ToolDefinition[]; segments: SegmentHolder }): CachedPrompt | undefined {
  if (!(request.budget?.minTrimGain ?? 0) || !context.compileMemory || request.conversationId === "") return undefined;
  return CachedPrompt.of(context.compileMemory.previous(compileMemoryKey(request)), work.toolDefinitions, work.segments.system);
}

/**
 * What the whole history normalises to: with a head left out, the stored history itself (a clean
 * history is passed through as the same array). A head planned from the stored tail has no
 * history: the compile then builds no part that copies it.
 */
function wholeHistory(segments: SegmentHolder, head: ElidedHead | undefined): SegmentHolder {
  return head?.history ? { ...segments, history: head.history as Message[] } : segments;
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
