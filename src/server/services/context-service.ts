import { randomUUID } from "node:crypto";
import { create, equals } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { ArtifactSchema } from "../../../gen/ts/contextd/v1/artifact_pb.js";
import type { CompileRequest, CompileResult } from "../../../gen/ts/contextd/v1/compile_pb.js";
import { ContextService } from "../../../gen/ts/contextd/v1/context_service_pb.js";
import { MessageSchema, type Message } from "../../../gen/ts/contextd/v1/message_pb.js";
import { Segment, type ConversationState, type Delta } from "../../../gen/ts/contextd/v1/state_pb.js";
import type { ObserverEvent } from "../../../gen/ts/contextd/v1/telemetry_pb.js";
import { compile } from "../../core/compile/compile.js";
import { summaryCompaction } from "../../core/compile/summary-compaction.js";
import type { CompileContext } from "../../core/compile/compile-context.js";
import { DeadlineCheck, type CallDeadline } from "../../core/compile/deadline.js";
import { segmentEnumerationOrder, segmentField, segmentRenderingOrder } from "../../core/model/segments.js";
import type { Observer } from "../../core/observer.js";
import { createEstimator } from "../../core/tokens/estimator.js";
import { TokenCountCache } from "../../core/tokens/token-count-cache.js";
import { renderView } from "../../core/views/views.js";
import type { ConversationStore } from "../../store/conversation-store.js";
import { versionConflict } from "../../store/store-errors.js";
import { retainStoredState } from "../retained-encodings.js";
import { compileRequestFingerprint, replayedCompileResult } from "./compile-commit.js";
import { whileRunning, yieldToEventLoop } from "./live-stream.js";
import { runCompileSession, type SessionCompile } from "./compile-session.js";

export interface ContextServiceDependencies {
  store: ConversationStore;
  /** Every compile's observer events go here too (TelemetryService fan-out). */
  publish: Observer;
  /** How long a CompileSession waits for each summarize_response (the call's deadline also holds). */
  summarizeTimeoutMs: number;
  /** Most text one compile may produce; the core's default when absent. */
  maxCompileTextBytes?: number;
}

/**
 * ContextService: Compile (stateless or stateful, optionally committing the writeback in the same
 * call), CompileStream (observer events, then the result), CompileSession (the caller writes the
 * summaries the budget asks for), CountTokens and Render.
 */
export function contextService(dependencies: ContextServiceDependencies): Partial<ServiceImpl<typeof ContextService>> {
  const { store, publish, summarizeTimeoutMs, maxCompileTextBytes } = dependencies;
  // One cache per server: a conversation is tokenized once, whichever RPC counts it.
  const tokenCounts = new TokenCountCache();
  // `call` lends the compile its deadline and abort signal: the stages are synchronous, so only
  // they can notice that the call is over.
  const compileContext = (call: HandlerContext, observer: Observer, session?: SessionCompile, stageBoundary?: () => Promise<void>): Omit<CompileContext, "stored"> => ({
    // 32 hex digits; randomUUID draws from a pooled entropy buffer, randomBytes(16) makes a system
    // call per id (measured ~20 µs per compile under load).
    randomId: () => `msg_${randomUUID().replaceAll("-", "")}`,
    now: () => Date.now(),
    monotonicNs: () => process.hrtime.bigint(),
    tokenCounts,
    observer,
    summarize: session?.summarize,
    stageBoundary,
    deadline: callDeadline(call),
    maxCompileTextBytes,
  });

  /** `session` connects a CompileSession's summarizer; its summary is committed as a `compact` delta. */
  async function compileAndCommit(call: HandlerContext, request: CompileRequest, observer: Observer, session?: SessionCompile, stageBoundary?: () => Promise<void>): Promise<CompileResult> {
    if (request.conversationId === "") {
      if (request.commit) throw new ConnectError("commit: a commit needs conversation_id (stateful compile)", Code.InvalidArgument);
      return compile(request, compileContext(call, observer, session, stageBoundary));
    }
    // A conversation never written loads as an empty state at version 0: compiling it compiles
    // nothing stored, and a commit expecting version 0 creates it.
    const stored = await store.load(request.conversationId);
    // The result passes stored messages through as the same objects: their bytes can be kept.
    retainStoredState(stored);
    const commit = request.commit;
    const fingerprint = commit && commit.idempotencyKey !== "" ? compileRequestFingerprint(request) : undefined;
    if (commit && stored.version !== commit.expectedVersion) {
      if (fingerprint !== undefined && stored.version > commit.expectedVersion) {
        // Perhaps a retry whose first attempt committed: the store answers from the key's record
        // before comparing versions, and with ABORTED when there is none (the version only grows,
        // so this empty batch can never apply).
        const outcome = await store.commit(request.conversationId, commit.expectedVersion, [], commit.idempotencyKey, fingerprint);
        return replayedCompileResult(request, outcome);
      }
      throw versionConflict(request.conversationId, commit.expectedVersion, stored.version);
    }
    const result = await compile(request, { ...compileContext(call, observer, session, stageBoundary), stored });
    if (request.commit) {
      const deltas = writebackDeltas(stored, result);
      // The summary replaces the prefix it stands for in the same atomic batch, after the writeback.
      const compaction = summaryCompaction(result, session?.remembered ?? []);
      if (compaction) deltas.push(compaction);
      if (deltas.length > 0) {
        const outcome = await store.commit(request.conversationId, request.commit.expectedVersion, deltas, request.commit.idempotencyKey, fingerprint);
        result.committedVersion = outcome.version;
      }
    }
    return request.omitSnapshots ? withoutSnapshots(result) : result;
  }

  const fanOut = (extra?: Observer): Observer => (event) => {
    publish(event);
    extra?.(event);
  };

  return {
    async compile(request, call) {
      return { result: await compileAndCommit(call, request, fanOut()) };
    },

    async *compileStream(request, call) {
      if (!request.request) throw new ConnectError("request is required", Code.InvalidArgument);
      // Events leave as the stages emit them: the pipeline yields to the event loop between stages.
      const compileRequest = request.request;
      const items = whileRunning<ObserverEvent, CompileResult>((send) => compileAndCommit(call, compileRequest, fanOut(send), undefined, yieldToEventLoop));
      for await (const item of items) {
        yield "sent" in item ? { kind: { case: "event", value: item.sent } } : { kind: { case: "result", value: item.result } };
      }
    },

    compileSession(requests, context) {
      return runCompileSession(requests, context.signal, summarizeTimeoutMs, (session) =>
        compileAndCommit(context, session.request, fanOut(session.observer), session, yieldToEventLoop),
      );
    },

    async countTokens(request, call) {
      const estimator = await createEstimator(request.estimator, 0, "estimator", tokenCounts, new DeadlineCheck(callDeadline(call), Date.now));
      const perMessage = tokenCounts.countAll(estimator, request.messages).map(BigInt);
      const toolDefinitions = BigInt(tokenCounts.countToolDefinitions(estimator, request.toolDefinitions));
      const total = perMessage.reduce((sum, count) => sum + count, toolDefinitions);
      return { total, perMessage, toolDefinitions };
    },

    async render(request) {
      if ((request.conversationId === "") === (request.snapshot === undefined)) {
        throw new ConnectError("render: set exactly one of conversation_id and snapshot", Code.InvalidArgument);
      }
      renderView(request.view, [], "view");
      request.segments.forEach((segment, index) => segmentField(segment, `segments[${index}]`));
      const source = request.snapshot ?? (await store.load(request.conversationId));
      const wanted = request.segments.length === 0 ? segmentRenderingOrder : segmentRenderingOrder.filter((segment) => request.segments.includes(segment));
      const messages = wanted.flatMap((segment) => source[segmentField(segment, "segment")]);
      return { text: renderView(request.view, messages, "view") };
    },
  };
}

/**
 * The call's abort signal and, when it has one, the wall-clock time of its deadline. The service
 * called directly, without a call (tests do), has none.
 */
function callDeadline(call: HandlerContext | undefined): CallDeadline | undefined {
  if (!call) return undefined;
  const remainingMs = call.timeoutMs();
  return { signal: call.signal, atMs: remainingMs === undefined ? undefined : Date.now() + remainingMs };
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
  if (a.length !== b.length) return false;
  for (let index = 0; index < a.length; index++) {
    if (a[index] !== b[index] && !equals(MessageSchema, a[index]!, b[index]!)) return false;
  }
  return true;
}

/** The result without its copies of the input (`CompileRequest.omit_snapshots`). */
function withoutSnapshots(result: CompileResult): CompileResult {
  result.source = undefined;
  result.normalizedSnapshot = undefined;
  result.persistence = undefined;
  if (result.writeback) result.writeback.snapshot = undefined;
  return result;
}
