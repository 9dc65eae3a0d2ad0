import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  BudgetStrategy,
  ProjectionSchema,
  ToolRoundRepair,
  TransformationAction,
  TransformationReason,
  UsageSchema,
  type Budget,
  type CompileRequest,
  type Projection,
  type Target,
} from "#gen/contextd/v1/compile_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { renderRequestPaced } from "../providers/render.js";
import { segmentField, segmentRenderingOrder } from "../model/segments.js";
import { createEstimator } from "../tokens/estimator.js";
import { renderView } from "../views/views.js";
import { applyArtifacts, applyExperiences } from "./artifacts.js";
import { applySystemPrompt } from "./system-prompt.js";
import { applyBudget } from "./budget.js";
import { cutHistoryAtProviderCompaction } from "./provider-compaction-cut.js";
import { calibrationReport } from "./token-calibration.js";
import { prefixError } from "../model/error-details.js";
import { payloadOf } from "./persistence.js";
import type { CompileContext } from "./compile-context.js";
import { applyDeferredBlocks } from "./deferred-blocks.js";
import type { NormalizedExtras } from "./normalize.js";
import { sendLargeToolResultsAsPreviews } from "./large-tool-results.js";
import { applyHooks } from "./redaction.js";
import { applyRoleProjection } from "./role-projection.js";
import { applySegmentFormatters } from "./segment-formatters.js";
import { applyTextReplacements } from "./text-replacements.js";
import { showToolArgumentsAsString } from "./tool-arguments-repair.js";
import { repairToolRoundsForPrompt } from "./prompt-tool-round-repair.js";
import { newRecords, recordPassed, type CompileWork } from "./working-set.js";

/**
 * Target validation (stage 13): names required and unique, views known and not combined with
 * segments, budget, formatters or render, segments known. Runs before any stage so a bad target
 * fails fast.
 */
export function validateTargets(targets: readonly Target[]): void {
  const names = new Set<string>();
  targets.forEach((target, index) => {
    const path = `targets[${index}]`;
    if (target.name === "") throw new ConnectError(`${path}.name is required`, Code.InvalidArgument);
    if (names.has(target.name)) throw new ConnectError(`${path}.name: duplicate target name "${target.name}"`, Code.InvalidArgument);
    names.add(target.name);
    if (target.view !== "") {
      renderView(target.view, [], `${path}.view`);
      const combined = [
        target.segments.length > 0 && "segments",
        target.budget && "budget",
        target.formatters.length > 0 && "formatters",
        target.render && target.render.provider !== Provider.UNSPECIFIED && "render",
      ].filter(Boolean);
      if (combined.length > 0) {
        throw new ConnectError(`${path}: view "${target.view}" cannot be combined with ${combined.join(", ")}`, Code.InvalidArgument);
      }
    }
    target.segments.forEach((segment, segmentIndex) => segmentField(segment, `${path}.segments[${segmentIndex}]`));
  });
}

/**
 * Computes every target from the same normalised input as the main payload, with records of its
 * own. A view renders the normalised segments (never the current turn or pending). A segment
 * projection runs artifacts, experiences, deferred blocks, hooks, role projection, its own
 * formatters, text replacements and its own budget over the chosen segments.
 */
export async function computeTargets(
  request: CompileRequest,
  normalized: CompileWork,
  extras: NormalizedExtras,
  context: CompileContext,
): Promise<Projection[]> {
  const projections: Projection[] = [];
  for (const [index, target] of request.targets.entries()) {
    const path = `targets[${index}]`;
    if (target.view !== "") {
      const messages = [];
      const transformations: Projection["transformations"] = {};
      for (const segment of segmentRenderingOrder) {
        for (const message of normalized.segments[segmentField(segment, "segment")]) {
          messages.push(message);
          transformations[message.id] = {
            $typeName: "contextd.v1.Transformation",
            action: TransformationAction.PASSED,
            reason: TransformationReason.UNCHANGED,
            segment,
          };
        }
      }
      projections.push(create(ProjectionSchema, { name: target.name, text: renderView(target.view, messages, `${path}.view`), transformations }));
      continue;
    }
    projections.push(await segmentProjection(request, target, path, normalized, extras, context));
  }
  return projections;
}

async function segmentProjection(
  request: CompileRequest,
  target: Target,
  path: string,
  normalized: CompileWork,
  extras: NormalizedExtras,
  context: CompileContext,
): Promise<Projection> {
  const included = new Set(target.segments.length === 0 ? segmentRenderingOrder : target.segments);
  const pick = (segment: Segment) => (included.has(segment) ? normalized.segments[segmentField(segment, "segment")] : []);
  const budget = target.budget ?? inheritedBudget(request.budget);
  const targetRequest: CompileRequest = {
    ...request,
    budget,
    formatters: target.formatters,
    pending: [],
    currentTurn: undefined,
    scratch: [],
    textReplacements: request.textReplacements.filter((replacement) => included.has(replacement.segment)),
  };
  const renderProvider = target.render?.provider ?? Provider.UNSPECIFIED;
  const estimatorPath = target.budget ? `${path}.budget.estimator` : "budget.estimator";
  const estimator = await createEstimator(budget?.estimator, renderProvider, estimatorPath, context.tokenCounts, target.render?.model ?? "", normalized.deadline);
  const work: CompileWork = {
    request: targetRequest,
    estimator,
    textAllowance: normalized.textAllowance,
    deadline: normalized.deadline,
    segments: { system: pick(Segment.SYSTEM), history: pick(Segment.HISTORY), memory: pick(Segment.MEMORY), tools: pick(Segment.TOOLS) },
    pending: [],
    artifacts: included.has(Segment.MEMORY) ? normalized.artifacts : [],
    experiences: included.has(Segment.SYSTEM) ? normalized.experiences : [],
    toolDefinitions: normalized.toolDefinitions,
    records: newRecords(),
    introduced: [],
    persistedIntroducedIds: new Set(),
    visibleArtifactIds: [],
    warnings: [],
    writebackMessages: [],
    argumentsShownAsString: normalized.argumentsShownAsString,
  };
  for (const segment of included) recordPassed(work, work.segments[segmentField(segment, "segment")], segment);
  applyArtifacts(work, context.tokenCounts);
  applyExperiences(work);
  // A target repeats the presentation stages: between them the event loop gets its turn when due.
  const clock = work.deadline;
  await applyDeferredBlocks(work, extras.deferredBlocks.filter((block) => included.has(block.segment)));
  // The default tool-round repair, where the main payload gets it: after the deferred blocks.
  if (request.repair === ToolRoundRepair.UNSPECIFIED) repairToolRoundsForPrompt(work, context.randomId);
  if (included.has(Segment.SYSTEM)) await applySystemPrompt(work);
  if (clock.checkNow("targets")) await clock.pause("targets");
  showToolArgumentsAsString(work);
  sendLargeToolResultsAsPreviews(work);
  await applyHooks(work, context.searchRegexOffThread);
  if (clock.checkNow("targets")) await clock.pause("targets");
  applyRoleProjection(work);
  await applySegmentFormatters(work, target.formatters, `${path}.formatters`);
  if (clock.checkNow("targets")) await clock.pause("targets");
  await applyTextReplacements(work);
  cutHistoryAtProviderCompaction(work, renderProvider);
  // The target's budget refuses in its own words (`budget.max_tokens ...`, `context full ...`);
  // the prefix says which target, own budget or inherited.
  // The target's own calibration key: its render provider and model, its budget's estimator.
  const calibrationKey = renderProvider !== Provider.UNSPECIFIED && context.calibration ? { provider: renderProvider, model: target.render!.model, estimator: estimator.kind } : undefined;
  const correction = calibrationKey && (await context.calibration!(calibrationKey));
  const report = await applyBudget(work, [], context, correction?.factor ?? 1).catch((error: unknown) => {
    throw error instanceof ConnectError ? prefixError(error, `${path} ("${target.name}")${target.budget ? "" : " with the request's budget"}`) : error;
  });
  if (clock.checkNow("targets")) await clock.pause("targets");
  const messages = segmentRenderingOrder.flatMap((segment) => work.segments[segmentField(segment, "segment")]);
  const transformations: Projection["transformations"] = work.records;
  const payload = payloadOf(work.segments, [], work.toolDefinitions);
  return create(ProjectionSchema, {
    name: target.name,
    messages,
    transformations,
    artifactIds: work.visibleArtifactIds,
    rendered: renderProvider !== Provider.UNSPECIFIED ? await renderRequestPaced(payload, target.render!, normalized.deadline) : undefined,
    usage: create(UsageSchema, {
      system: BigInt(report.system),
      history: BigInt(report.history),
      memory: BigInt(report.memory),
      tools: BigInt(report.tools),
      toolDefinitions: BigInt(report.toolDefinitions),
      reserved: BigInt(report.reserved),
      limit: BigInt(report.limit),
      total: BigInt(report.total),
      estimator: estimator.kind,
      historyBeforeTrim: BigInt(report.historyBeforeTrim),
      replyPriming: BigInt(report.perRequest),
      clearedTokens: BigInt(report.clearedTokens),
    }),
    calibration: calibrationKey && correction ? calibrationReport(calibrationKey, correction, report.total, report.requestedLimit) : undefined,
  });
}

/**
 * The budget of a target that sets none: the main one, so a target rendered for another provider
 * is held to the same limit as the main payload (it used to be unlimited, and an Anthropic target
 * rendered 5,775 tokens against a 2,500 limit). A target never asks for a summary of its own (the
 * session has one summarizer round per compile, for the main payload), so SUMMARIZE and
 * auto_compact trim with DROP_HEAD to the same limit.
 */
function inheritedBudget(main: Budget | undefined): Budget | undefined {
  if (!main) return undefined;
  const summarizes = main.strategy === BudgetStrategy.SUMMARIZE || (main.autoCompact && main.maxTokens === 0n && main.contextWindow > 0n);
  if (!summarizes) return main;
  const limit = main.maxTokens > 0n ? main.maxTokens : main.contextWindow > 0n ? main.contextWindow - main.outputReserve : 0n;
  return { ...main, strategy: BudgetStrategy.DROP_HEAD, autoCompact: false, maxTokens: limit, contextWindow: 0n, outputReserve: 0n };
}
