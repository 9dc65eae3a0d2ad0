import { randomUUID } from "node:crypto";
import { setImmediate as nextTurn } from "node:timers/promises";
import { create, equals } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ArtifactSchema } from "#gen/contextd/v1/artifact_pb";
import {
  CompileResultPart,
  TransformationAction,
  TransformationReason,
  type CompileRequest,
  type CompileResult,
  type Transformation,
} from "#gen/contextd/v1/compile_pb";
import { MessageSchema, Provider, type Message } from "#gen/contextd/v1/message_pb";
import { Segment, type ConversationState, type Delta } from "#gen/contextd/v1/state_pb";
import { compile } from "../core/compile/compile.js";
import type { CompileMemory } from "../core/compile/cache-impact.js";
import type { CompileContext, RegexSearch, Summarizer } from "../core/compile/compile-context.js";
import type { CallDeadline } from "../core/compile/deadline.js";
import type { DeltaContext } from "../core/deltas/delta-context.js";
import { summaryCompaction } from "../core/compile/summary-compaction.js";
import { applyDeltas } from "../core/deltas/apply-deltas.js";
import { segmentEnumerationOrder, segmentField } from "../core/model/segments.js";
import type { Observer } from "../core/observer.js";
import { TokenCountCache } from "../core/tokens/token-count-cache.js";
import { createEstimator, type TokenEstimator } from "../core/tokens/estimator.js";
import { headElisionAllowed } from "../core/compile/history-head.js";
import { planStoredHead, type StoredTail } from "../core/compile/stored-head.js";
import { calibratedLimit } from "../core/compile/token-calibration.js";
import type { SegmentWindow } from "../store/segment-window.js";
import type { CommitOutcome, ConversationStore } from "../store/conversation-store.js";
import { versionConflict } from "../store/store-errors.js";
import { HistoryFactsCache } from "./history-facts-cache.js";
import type { UsageCalibration } from "./usage-calibration.js";
import { compileRequestFingerprint, replayedCompileResult, replayWarning } from "./compile-commit.js";
import { ErrorReason, withErrorDetails } from "../core/model/error-details.js";

export interface CompilerDependencies {
  store: ConversationStore;
  /** Per-message token counts shared by every compile and count of this server. */
  tokenCounts: TokenCountCache;
  /** Most UTF-8 bytes of text one compile may produce (see `CompileContext.maxCompileTextBytes`). */
  maxCompileTextBytes?: number;
  /** Where long texts' built-in redaction patterns are searched (`RegexSearchThread`); in place without it. */
  searchRegexOffThread?: RegexSearch;
  /** Each conversation's last compile, for `cache_impact` (`RecentCompiles`); none without it. */
  compileMemory?: CompileMemory;
  /** The facts of stored histories kept between compiles (`CompileContext.historyFacts`); without it every compile walks its whole history. */
  historyFacts?: HistoryFactsCache;
  /** The corrections learnt from provider usage reports (`UsageCalibration`); none without it. */
  calibration?: UsageCalibration;
}

/** The longest window of the stored tail a compile reads before it reads the whole state instead. */
export const maxTailWindow = 65_536;

/** How one compile runs: where its events go, and what a CompileSession adds. */
export interface CompileRun {
  observer: Observer;
  /** Asks the caller for summaries (CompileSession); their facts to remember come back in `remembered`. */
  summarize?: Summarizer;
  remembered?: readonly string[];
  /** Awaited between stages (a streaming call yields to its event loop there). */
  stageBoundary?: () => Promise<void>;
  /** The call's deadline and abort signal: the stages are synchronous, so only they can notice the call is over. */
  deadline?: CallDeadline;
  /** The caller's tenant ("" = unscoped): whose calibration corrections apply. */
  tenant?: string;
}

/**
 * The compile use case, whatever RPC asks for it: stateless, or stateful on the stored
 * conversation, optionally committing the writeback (and a session's summary) atomically in the
 * same call. Transport-free: the services call `compileAndCommit` and shape the answer.
 */
export class Compiler {
  constructor(private readonly dependencies: CompilerDependencies) {}

  get tokenCounts(): TokenCountCache {
    return this.dependencies.tokenCounts;
  }

  async compileAndCommit(request: CompileRequest, run: CompileRun): Promise<CompileResult> {
    const { store } = this.dependencies;
    const parts = requestedParts(request.include);
    if (request.conversationId === "") {
      if (request.commit) throw new ConnectError("commit: a commit needs conversation_id (stateful compile)", Code.InvalidArgument);
      return leanResult(await compile(request, { ...this.context(run), parts }), parts);
    }
    // A conversation whose history facts this process does not hold (never compiled here, or
    // forgotten) is compiled from its stored tail when the head can be planned from it.
    if (!request.commit && this.dependencies.historyFacts && !this.dependencies.historyFacts.has(request.conversationId)) {
      const fromTail = await this.compileFromTail(request, run, parts);
      if (fromTail) return fromTail;
    }
    // A conversation never written loads as an empty state at version 0: compiling it compiles
    // nothing stored, and a commit expecting version 0 creates it.
    const stored = await store.load(request.conversationId);
    const commit = request.commit;
    const fingerprint = commit && commit.idempotencyKey !== "" ? compileRequestFingerprint(request) : undefined;
    if (commit && stored.version !== commit.expectedVersion) {
      if (fingerprint !== undefined && stored.version > commit.expectedVersion) {
        // Perhaps a retry whose first attempt committed: the store answers from the key's record
        // before comparing versions, and with ABORTED when there is none (the version only grows,
        // so this empty batch can never apply).
        const outcome = await store.commit(request.conversationId, commit.expectedVersion, [], commit.idempotencyKey, fingerprint);
        return this.replay(request, outcome, run, parts);
      }
      throw versionConflict(request.conversationId, commit.expectedVersion, stored.version);
    }
    // The compile runs on the state the deltas produce before anything is stored, so a compile
    // that fails commits nothing; the ids the deltas give messages are recorded and handed to the
    // store, which draws them in the same order from the same base, so what was compiled is what
    // is stored.
    const messageIds: string[] = [];
    const base = commit && commit.deltas.length > 0 ? applyTurnDeltas(stored, commit.deltas, messageIds, { strictToolRounds: store.strictToolRounds, ...store.idLookupsFor?.(request.conversationId, stored) }) : stored;
    // The compiled history is the stored one followed by the batch's messages (known now, before
    // the store's own commit records its history): what `adopt` need not compare.
    const appendedToStored = store.lineage?.extends(base.history, stored.history) ?? false;
    assertSomethingToRender(request, base);
    // A commit stores the writeback snapshot's difference, so it is built whether asked for or not.
    const lender = this.dependencies.historyFacts?.lend(request.conversationId);
    try {
      const result = await compile(request, { ...this.context(run), stored: base, parts: commit ? withWritebackSnapshot(parts) : parts, historyFacts: lender?.facts });
      if (commit) {
        const deltas = [...commit.deltas, ...writebackDeltas(base, result)];
        // The summary replaces the prefix it stands for in the same atomic batch, after the writeback.
        const compaction = summaryCompaction(result, [...(run.remembered ?? [])]);
        if (compaction) deltas.push(compaction);
        if (deltas.length > 0) {
          const outcome = await store.commit(request.conversationId, commit.expectedVersion, deltas, commit.idempotencyKey, fingerprint, messageIds);
          result.committedVersion = outcome.version;
          if (outcome.state) {
            const sharedWithStored = appendedToStored && store.lineage!.extends(outcome.state.history, stored.history) ? stored.history.length : 0;
            lender?.adopt(outcome.state.history, sharedWithStored);
          }
        }
      }
      return leanResult(result, parts);
    } finally {
      lender?.giveBack();
    }
  }

  /**
   * A compile that reads and counts only the tail its budget may keep (docs/incremental-compile.md,
   * "A cold compile"): windows of the stored history read back from its end, each pinned to the
   * first one's version and 4x longer than the last, until `planStoredHead` finds the head
   * `elideHistoryHead` would leave out of the whole history. Undefined (the caller loads the whole
   * state) when the plan says the whole history is needed, the store's entries cannot say (no
   * stored facts, another estimator), the window would pass `maxTailWindow`, or the conversation
   * moved between two windows.
   */
  private async compileFromTail(request: CompileRequest, run: CompileRun, parts: ReadonlySet<CompileResultPart>): Promise<CompileResult | undefined> {
    const { store, tokenCounts } = this.dependencies;
    const known = tokenCounts.known;
    if (known?.cacheKey === undefined || !headElisionAllowed(request, parts)) return undefined;
    const provider = request.render?.provider ?? Provider.UNSPECIFIED;
    const model = request.render?.model ?? "";
    let estimator: TokenEstimator;
    try {
      estimator = await createEstimator(request.budget?.estimator, provider, "budget.estimator", tokenCounts, model);
    } catch {
      // The compile on the whole state reports it.
      return undefined;
    }
    if (estimator.cacheKey !== known.cacheKey) return undefined;
    const context = this.context(run);
    const correction = provider !== Provider.UNSPECIFIED && context.calibration ? await context.calibration({ provider, model, estimator: estimator.kind }) : undefined;
    const limit = calibratedLimit(Number(request.budget!.maxTokens), correction?.factor ?? 1);
    // ~64 tokens a message is a long one: most budgets' tails fit in the first window.
    let count = Math.min(maxTailWindow, Math.max(32, Math.ceil(limit / 64) + 16));
    let atVersion: bigint | undefined;
    for (;;) {
      let window: SegmentWindow;
      try {
        window = await store.readWindow(request.conversationId, { segment: "history", count, withRest: true, atVersion });
      } catch (error) {
        if (atVersion !== undefined && error instanceof ConnectError && error.code === Code.Aborted) return undefined;
        throw error;
      }
      if (!window.stored) return undefined;
      const tail: StoredTail = { messages: window.state.history, start: window.start, length: window.length, ...window.stored };
      const plan = planStoredHead(request, parts, window.state, tail, estimator.cacheKey, known.cacheKey, (message) => known.countOf(message, estimator.cacheKey), limit);
      if (plan === "wider" && window.start > 0 && count < maxTailWindow) {
        count = Math.min(maxTailWindow, count * 4);
        atVersion = window.state.version;
        continue;
      }
      if (plan === undefined || plan === "wider") return undefined;
      this.tailCompiles++;
      return leanResult(await compile(request, { ...context, stored: window.state, parts, storedHead: plan }), parts);
    }
  }

  /** Compiles answered from the stored tail (`compileFromTail`), for tests and gauges. */
  tailCompiles = 0;

  /**
   * The answer to a retry whose first attempt committed. When the conversation is still at the
   * version that attempt wrote, and compiling that state with the same request writes nothing back
   * (the request committed only its deltas, which the state now holds), that compile is exactly
   * the lost answer and is returned. Otherwise (a current turn or pending messages are stored now
   * and would be compiled twice, or the conversation moved on) only the versions are.
   */
  private async replay(request: CompileRequest, outcome: CommitOutcome, run: CompileRun, parts: ReadonlySet<CompileResultPart>): Promise<CompileResult> {
    const replayed = replayedCompileResult(request, outcome);
    if (!outcome.state || !writesOnlyItsDeltas(request)) return replayed;
    const result = await compile(request, { ...this.context(run), stored: outcome.state, parts: withWritebackSnapshot(parts) });
    if (writebackDeltas(outcome.state, result).length > 0 || summaryCompaction(result, []) !== undefined) return replayed;
    result.committedVersion = outcome.version;
    result.warnings.push(replayWarning(request, outcome, true));
    return leanResult(result, parts);
  }

  private context(run: CompileRun): Omit<CompileContext, "stored" | "parts" | "historyFacts"> {
    const { calibration } = this.dependencies;
    return {
      // A UUID, the form commits assign too (one id format, compile.proto IDENTITY_POLICY_RANDOM);
      // randomUUID draws from a pooled entropy buffer, randomBytes(16) makes a system call per id
      // (measured ~20 µs per compile under load).
      randomId: () => randomUUID(),
      now: () => Date.now(),
      monotonicNs: () => process.hrtime.bigint(),
      tokenCounts: this.dependencies.tokenCounts,
      observer: run.observer,
      summarize: run.summarize,
      stageBoundary: run.stageBoundary,
      // Every compile shares the event loop with other calls and health checks: long stages give it
      // a turn every ~20 ms of work (see `DeadlineCheck`).
      yieldToEventLoop: () => nextTurn(),
      deadline: run.deadline,
      maxCompileTextBytes: this.dependencies.maxCompileTextBytes,
      searchRegexOffThread: this.dependencies.searchRegexOffThread,
      compileMemory: this.dependencies.compileMemory,
      calibration: calibration && ((key) => calibration.correction(run.tenant ?? "", key)),
    };
  }
}

/**
 * A rendered compile of a conversation with no messages at all — never written, cleared, or an id
 * with a typo — would fail on the provider's "no message to send" rule, which does not say why;
 * this says which conversation and version are empty. Without `render` an empty compile is valid.
 */
function assertSomethingToRender(request: CompileRequest, state: ConversationState): void {
  if (request.render === undefined || request.pending.length > 0 || request.currentTurn !== undefined) return;
  for (const segment of segmentEnumerationOrder) {
    const field = segmentField(segment, "segment");
    const messages = request[field]?.messages ?? state[field];
    if (messages.length > 0) return;
  }
  throw withErrorDetails(
    new ConnectError(
      `conversation "${request.conversationId}" has no messages at version ${state.version}: commit some first (ConversationService.Commit, or commit.deltas on this compile) or send them in the request`,
      Code.FailedPrecondition,
    ),
    ErrorReason.conversationEmpty,
    { metadata: { conversation_id: request.conversationId, version: String(state.version) } },
  );
}

/**
 * The deltas that make the stored state equal the compile's writeback snapshot, as one batch:
 * replace_segment for each segment that changed, and for each persistent artifact that is new or
 * different, remove_artifacts + upsert_artifact (the writeback holds the merged artifact, so it must
 * replace, not merge again).
 */
function writebackDeltas(stored: ConversationState, result: CompileResult): Delta[] {
  const snapshot = result.writeback!.snapshot!;
  const deltas: Delta[] = [];
  for (const segment of segmentEnumerationOrder) {
    const field = segmentField(segment, "segment");
    if (sameMessages(stored[field], snapshot[field])) continue;
    deltas.push({
      $typeName: "contextd.v1.Delta",
      operation: { case: "replaceSegment", value: { $typeName: "contextd.v1.ReplaceSegment", segment: segment as Segment, messages: snapshot[field] } },
    });
  }
  for (const artifact of snapshot.artifacts) {
    const existing = stored.artifacts.find((candidate) => candidate.id === artifact.id);
    if (existing && equals(ArtifactSchema, existing, artifact)) continue;
    if (existing) {
      deltas.push({ $typeName: "contextd.v1.Delta", operation: { case: "removeArtifacts", value: { $typeName: "contextd.v1.RemoveArtifacts", ids: [artifact.id] } } });
    }
    deltas.push({
      $typeName: "contextd.v1.Delta",
      operation: { case: "upsertArtifact", value: { $typeName: "contextd.v1.UpsertArtifact", artifact: create(ArtifactSchema, artifact) } },
    });
  }
  return deltas;
}

/** The compile passes stored messages through as the same objects, so identity is the fast path. */
function sameMessages(a: readonly Message[], b: readonly Message[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let index = 0; index < a.length; index++) {
    if (a[index] !== b[index] && !equals(MessageSchema, a[index]!, b[index]!)) return false;
  }
  return true;
}

/** Whether the request brings no messages of its own that its writeback would store. */
function writesOnlyItsDeltas(request: CompileRequest): boolean {
  return (
    request.currentTurn === undefined &&
    request.pending.length === 0 &&
    request.deferredBlocks.length === 0 &&
    request.artifacts.length === 0 &&
    request.system === undefined &&
    request.history === undefined &&
    request.memory === undefined &&
    request.tools === undefined
  );
}

/**
 * `commit.deltas` applied to the stored state as the store will apply them, at the version they
 * will produce; the ids drawn for messages without one are pushed to `drawn`.
 */
function applyTurnDeltas(stored: ConversationState, deltas: readonly Delta[], drawn: string[], idLookups: Pick<DeltaContext, "lineage" | "messageIds" | "toolCallIds" | "strictToolRounds"> = {}): ConversationState {
  const applied = applyDeltas(stored, deltas, {
    newMessageId: () => {
      const id = randomUUID();
      drawn.push(id);
      return id;
    },
    ...idLookups,
  });
  return { ...applied, conversationId: stored.conversationId, version: stored.version + 1n };
}

/** `CompileRequest.include` as a set; unset and unknown values are INVALID_ARGUMENT. */
function requestedParts(include: readonly CompileResultPart[]): ReadonlySet<CompileResultPart> {
  include.forEach((part, index) => {
    if (part === CompileResultPart.UNSPECIFIED || CompileResultPart[part] === undefined) {
      throw new ConnectError(`include[${index}]: ${part === CompileResultPart.UNSPECIFIED ? "COMPILE_RESULT_PART_UNSPECIFIED is not a part" : `unknown part ${part}`} (valid: SOURCE, NORMALIZED_SNAPSHOT, WRITEBACK_SNAPSHOT, PERSISTENCE, ALL_TRANSFORMATIONS, PAYLOAD, MESSAGE_TOKENS)`, Code.InvalidArgument);
    }
  });
  return new Set(include);
}

function withWritebackSnapshot(parts: ReadonlySet<CompileResultPart>): ReadonlySet<CompileResultPart> {
  return parts.has(CompileResultPart.WRITEBACK_SNAPSHOT) ? parts : new Set([...parts, CompileResultPart.WRITEBACK_SNAPSHOT]);
}

/**
 * The result as the caller asked for it: the heavy parts (each a copy of the conversation, or a
 * record per message of it) only when `include` names them. A 825 KB conversation used to answer
 * with 2.8 MB, five copies of the history; by default the answer now follows the prompt. Beside a
 * rendered body the typed payload is a second copy of the prompt (at 10,000 stored messages a
 * 33.2 KB body came with a 68.0 KB answer): it goes only with PAYLOAD. The compile still builds
 * it, since the render, the usage, the prefix fingerprint and the cache impact are made from it;
 * only the answer leaves it out.
 */
function leanResult(result: CompileResult, parts: ReadonlySet<CompileResultPart>): CompileResult {
  if (!parts.has(CompileResultPart.PAYLOAD)) {
    if (result.rendered) result.payload = undefined;
    for (const projection of result.projections) if (projection.rendered) projection.messages = [];
  }
  if (!parts.has(CompileResultPart.SOURCE)) result.source = undefined;
  if (!parts.has(CompileResultPart.NORMALIZED_SNAPSHOT)) result.normalizedSnapshot = undefined;
  if (!parts.has(CompileResultPart.PERSISTENCE)) result.persistence = undefined;
  if (!parts.has(CompileResultPart.WRITEBACK_SNAPSHOT) && result.writeback) result.writeback.snapshot = undefined;
  if (!parts.has(CompileResultPart.ALL_TRANSFORMATIONS)) {
    result.transformations = notableRecords(result.transformations);
    for (const projection of result.projections) projection.transformations = notableRecords(projection.transformations);
  }
  return result;
}

/**
 * The records of messages that were changed or removed for a reason other than the budget, and of
 * the system-prompt blocks the compile built (PASSED, SYSTEM_PROMPT_ASSEMBLY: at most two).
 */
function notableRecords(records: { [id: string]: Transformation }): { [id: string]: Transformation } {
  const kept: { [id: string]: Transformation } = {};
  for (const id in records) {
    const record = records[id]!;
    if (record.reason === TransformationReason.TOKEN_BUDGET_EXCEEDED) continue;
    if (record.action === TransformationAction.PASSED && record.reason !== TransformationReason.SYSTEM_PROMPT_ASSEMBLY) continue;
    kept[id] = record;
  }
  return kept;
}
