import { create } from "@bufbuild/protobuf";
import {
  CompileResultPart,
  CompileResultSchema,
  TransformationReason,
  type CompileRequest,
  type CompileResult,
  type CompileSource,
  type CompiledPayload,
  type Projection,
  type RenderedRequest,
  type Snapshot,
  type Usage,
  type Writeback,
} from "#gen/contextd/v1/compile_pb";
import type { Provider } from "#gen/contextd/v1/message_pb";
import type { TokenEstimator } from "../tokens/estimator.js";
import type { BudgetReport } from "./budget.js";
import { cacheImpact, compileMemoryKey } from "./cache-impact.js";
import type { CompileContext } from "./compile-context.js";
import type { ElidedHead } from "./elided-head.js";
import { persistenceProjection } from "./persistence.js";
import { prefixFingerprint } from "./prefix-fingerprint.js";
import type { CompileInputs } from "./request-inputs.js";
import { calibrationReport, type TokenCorrection } from "./token-calibration.js";
import type { CompileWork } from "./working-set.js";

/** What the result is made of: what the request brought and what the stages before produced. */
export interface ResultInputs {
  request: CompileRequest;
  context: CompileContext;
  renderProvider: Provider;
  estimator: TokenEstimator;
  correction: TokenCorrection | undefined;
  inputs: CompileInputs;
  head: ElidedHead | undefined;
  work: CompileWork;
  source: CompileSource | undefined;
  normalizedSnapshot: Snapshot | undefined;
  writeback: Writeback;
  budget: BudgetReport;
  payload: CompiledPayload;
  rendered: RenderedRequest | undefined;
  projections: Projection[];
}

/** Whether `context.parts` asks for `part` (all parts when it is absent). */
export function wantsPart(context: CompileContext, part: CompileResultPart): boolean {
  return context.parts === undefined || context.parts.has(part);
}

/**
 * Stage 14: the result (without its stage timings, which include this stage's): usage, persistence
 * projection, prefix fingerprint, cache impact, the budget's drops and the calibration report.
 */
export function compileResult({
  request, context, renderProvider, estimator, correction, inputs, head, work, source, normalizedSnapshot, writeback, budget, payload, rendered, projections,
}: ResultInputs): CompileResult {
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
  result.persistence = wantsPart(context, CompileResultPart.PERSISTENCE) ? persistenceProjection(work, summary) : undefined;
  result.usage = usage;
  result.warnings = work.warnings;
  result.prefixFingerprint = prefixFingerprint(payload);
  result.version = inputs.version;
  if (context.compileMemory && request.conversationId !== "") {
    const key = compileMemoryKey(request);
    const compared = cacheImpact(payload, estimator, context.tokenCounts, inputs.version, context.compileMemory.previous(key));
    context.compileMemory.remember(key, compared.prefix);
    result.cacheImpact = compared.impact;
    if (budget.trimSteps) result.cacheImpact.trimSteps = budget.trimSteps;
  }
  result.budgetDroppedMessages = budgetDroppedMessages(work, head);
  if (correction) {
    result.calibration = calibrationReport({ provider: renderProvider, model: request.render!.model, estimator: estimator.kind }, correction, budget.total, budget.requestedLimit);
  }
  return result;
}

/** Messages the budget dropped (DROPPED, TOKEN_BUDGET_EXCEEDED), the elided head's included. */
function budgetDroppedMessages(work: CompileWork, head: ElidedHead | undefined): bigint {
  let dropped = head?.count ?? 0;
  for (const id in work.records) if (work.records[id]!.reason === TransformationReason.TOKEN_BUDGET_EXCEEDED) dropped++;
  return BigInt(dropped);
}
