import { CurrentTurnPersistence, type CompiledPayload, type Persistence, type Snapshot } from "#gen/contextd/v1/compile_pb";
import type { Artifact } from "#gen/contextd/v1/artifact_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import type { ToolDefinition } from "#gen/contextd/v1/state_pb";
import type { SegmentHolder } from "../model/segments.js";
import { isArtifactPersisted } from "./artifacts.js";
import { isRemovedFromPersistence, type CompileWork, type NormalizedCurrentTurn } from "./working-set.js";

/** The current turn in the form its persistence policy stores, if any. */
export function persistedCurrentTurn(turn: NormalizedCurrentTurn | undefined): Message | undefined {
  if (!turn) return undefined;
  switch (turn.persistence) {
    case CurrentTurnPersistence.PERSIST_NONE:
      return undefined;
    case CurrentTurnPersistence.PERSIST_PROMPT_SAFE:
      return turn.promptSafe ?? turn.raw;
    default:
      return turn.raw ?? turn.promptSafe;
  }
}

/** The writeback snapshot: normalised segments, the current turn by its policy, persistent artifacts. */
export function writebackSnapshot(normalized: SegmentHolder, artifacts: readonly Artifact[], turn: NormalizedCurrentTurn | undefined): Snapshot {
  const current = persistedCurrentTurn(turn);
  return snapshotOf({ ...normalized, history: current ? [...normalized.history, current] : normalized.history }, artifacts.filter(isArtifactPersisted));
}

/**
 * The persistence projection (semantics §3): per segment, the originals as they stood after the
 * deferred stage (so hooks, role projection, formatters and text replacements never reach storage)
 * minus what the budget dropped or a deferred block replaced, plus payload-born messages that
 * persist (deferred messages, summaries, repairs), plus for history the current turn by its policy.
 * Artifact messages and the experiences block are derived views of state stored elsewhere.
 */
export function persistenceProjection(work: CompileWork, summary: Message | undefined): Persistence {
  const baseline = work.baseline!;
  const derived = new Set<string>(work.visibleArtifactIds.map((id) => `artifact:${id}`));
  derived.add("experiences");
  const kept = work.keptDespiteDrop;
  const keep = (messages: Message[]) =>
    messages.filter((message) => !derived.has(message.id) && (!isRemovedFromPersistence(work.records[message.id]) || kept?.has(message.id) === true));
  const history = keep(baseline.history);
  if (summary) history.unshift(summary);
  const current = persistedCurrentTurn(work.currentTurn);
  if (current) history.push(current);
  return {
    $typeName: "contextd.v1.Persistence",
    system: keep(baseline.system),
    history,
    memory: keep(baseline.memory),
    tools: keep(baseline.tools),
    artifacts: work.artifacts.filter(isArtifactPersisted),
  };
}

/**
 * A Snapshot of segments and artifacts. A literal with every field set equals `create(SnapshotSchema,
 * ...)` and skips its reflective walk over thousands of messages.
 */
export function snapshotOf(segments: SegmentHolder, artifacts: Artifact[]): Snapshot {
  return { $typeName: "contextd.v1.Snapshot", system: segments.system, history: segments.history, memory: segments.memory, tools: segments.tools, artifacts };
}

/** The compiled payload (a literal, as `snapshotOf`). */
export function payloadOf(segments: SegmentHolder, scratch: Message[], toolDefinitions: ToolDefinition[]): CompiledPayload {
  return {
    $typeName: "contextd.v1.CompiledPayload",
    system: segments.system,
    history: segments.history,
    tools: segments.tools,
    memory: segments.memory,
    scratch,
    toolDefinitions,
  };
}
