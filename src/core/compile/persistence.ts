import { create } from "@bufbuild/protobuf";
import { CurrentTurnPersistence, PersistenceSchema, SnapshotSchema, type Persistence, type Snapshot } from "../../../gen/ts/contextd/v1/compile_pb.js";
import type { Artifact } from "../../../gen/ts/contextd/v1/artifact_pb.js";
import type { Message } from "../../../gen/ts/contextd/v1/message_pb.js";
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
  return create(SnapshotSchema, {
    system: normalized.system,
    history: current ? [...normalized.history, current] : normalized.history,
    memory: normalized.memory,
    tools: normalized.tools,
    artifacts: artifacts.filter(isArtifactPersisted),
  });
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
  const keep = (messages: Message[]) => messages.filter((message) => !derived.has(message.id) && !isRemovedFromPersistence(work.records.get(message.id)));
  const history = keep(baseline.history);
  if (summary) history.unshift(summary);
  const current = persistedCurrentTurn(work.currentTurn);
  if (current) history.push(current);
  return create(PersistenceSchema, {
    system: keep(baseline.system),
    history,
    memory: keep(baseline.memory),
    tools: keep(baseline.tools),
    artifacts: work.artifacts.filter(isArtifactPersisted),
  });
}
