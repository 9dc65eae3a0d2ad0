import { randomUUID } from "node:crypto";
import { create, equals } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ArtifactSchema } from "../../gen/ts/contextd/v1/artifact_pb.js";
import type { CompileRequest, CompileResult } from "../../gen/ts/contextd/v1/compile_pb.js";
import { MessageSchema, type Message } from "../../gen/ts/contextd/v1/message_pb.js";
import { Segment, type ConversationState, type Delta } from "../../gen/ts/contextd/v1/state_pb.js";
import { compile } from "../core/compile/compile.js";
import type { CompileContext, Summarizer } from "../core/compile/compile-context.js";
import type { CallDeadline } from "../core/compile/deadline.js";
import { summaryCompaction } from "../core/compile/summary-compaction.js";
import { segmentEnumerationOrder, segmentField } from "../core/model/segments.js";
import type { Observer } from "../core/observer.js";
import { TokenCountCache } from "../core/tokens/token-count-cache.js";
import type { ConversationStore } from "../store/conversation-store.js";
import { versionConflict } from "../store/store-errors.js";
import { compileRequestFingerprint, replayedCompileResult } from "./compile-commit.js";

export interface CompilerDependencies {
  store: ConversationStore;
  /** Per-message token counts shared by every compile and count of this server. */
  tokenCounts: TokenCountCache;
  /** Most UTF-8 bytes of text one compile may produce (see `CompileContext.maxCompileTextBytes`). */
  maxCompileTextBytes?: number;
}

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
    if (request.conversationId === "") {
      if (request.commit) throw new ConnectError("commit: a commit needs conversation_id (stateful compile)", Code.InvalidArgument);
      return compile(request, this.context(run));
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
        return replayedCompileResult(request, outcome);
      }
      throw versionConflict(request.conversationId, commit.expectedVersion, stored.version);
    }
    const result = await compile(request, { ...this.context(run), stored });
    if (request.commit) {
      const deltas = writebackDeltas(stored, result);
      // The summary replaces the prefix it stands for in the same atomic batch, after the writeback.
      const compaction = summaryCompaction(result, [...(run.remembered ?? [])]);
      if (compaction) deltas.push(compaction);
      if (deltas.length > 0) {
        const outcome = await store.commit(request.conversationId, request.commit.expectedVersion, deltas, request.commit.idempotencyKey, fingerprint);
        result.committedVersion = outcome.version;
      }
    }
    return request.omitSnapshots ? withoutSnapshots(result) : result;
  }

  private context(run: CompileRun): Omit<CompileContext, "stored"> {
    return {
      // 32 hex digits; randomUUID draws from a pooled entropy buffer, randomBytes(16) makes a system
      // call per id (measured ~20 µs per compile under load).
      randomId: () => `msg_${randomUUID().replaceAll("-", "")}`,
      now: () => Date.now(),
      monotonicNs: () => process.hrtime.bigint(),
      tokenCounts: this.dependencies.tokenCounts,
      observer: run.observer,
      summarize: run.summarize,
      stageBoundary: run.stageBoundary,
      deadline: run.deadline,
      maxCompileTextBytes: this.dependencies.maxCompileTextBytes,
    };
  }
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
