import { create } from "@bufbuild/protobuf";
import { ArtifactLifecycle, ArtifactPersistence, type Artifact } from "#gen/contextd/v1/artifact_pb";
import { IntroducedMessageSchema } from "#gen/contextd/v1/compile_pb";
import { MessageSchema, PartSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { toolPayloadText } from "../model/payload-text.js";
import type { TokenCountCache } from "../tokens/token-count-cache.js";
import { addWarning, recordPassed, type CompileWork } from "./working-set.js";

/** TURN_BOUND artifacts belong to one turn; every other lifecycle is visible in every compile. */
export function isArtifactVisible(artifact: Artifact, turnId: string): boolean {
  if (artifact.lifecycle === ArtifactLifecycle.TURN_BOUND) return turnId !== "" && artifact.boundTurnId === turnId;
  return true;
}

/** Whether a writeback stores the artifact: STORE always, SKIP never, else all but EPHEMERAL. */
export function isArtifactPersisted(artifact: Artifact): boolean {
  if (artifact.persistence === ArtifactPersistence.STORE) return true;
  if (artifact.persistence === ArtifactPersistence.SKIP) return false;
  return artifact.lifecycle !== ArtifactLifecycle.EPHEMERAL;
}

/** The memory message an artifact is shown as. */
export function artifactMessage(artifact: Artifact): Message {
  return create(MessageSchema, {
    id: `artifact:${artifact.id}`,
    role: Role.SYSTEM,
    parts: [create(PartSchema, { kind: { case: "text", value: { text: toolPayloadText(artifact.payload) } } })],
  });
}

/**
 * Stage 3: visible artifacts that fit their own `budget.token_limit` are appended to memory as
 * `artifact:<id>` messages (introduced, never persisted as messages: the artifact itself is what
 * persists). An artifact over its own limit is left out with an `artifact_over_budget` warning.
 */
export function applyArtifacts(work: CompileWork, tokenCounts: TokenCountCache): void {
  const added: Message[] = [];
  for (const artifact of work.artifacts) {
    if (!isArtifactVisible(artifact, work.request.turnId)) continue;
    const message = artifactMessage(artifact);
    const limit = artifact.budget?.tokenLimit ?? 0n;
    if (limit > 0n) {
      const tokens = tokenCounts.count(work.estimator, message);
      if (BigInt(tokens) > limit) {
        addWarning(work, "artifact_over_budget", `artifact "${artifact.id}" has ${tokens} tokens, over its budget.token_limit ${limit}; left out`);
        continue;
      }
    }
    added.push(message);
    work.visibleArtifactIds.push(artifact.id);
    work.introduced.push(create(IntroducedMessageSchema, { segment: Segment.MEMORY, message }));
  }
  if (added.length === 0) return;
  work.segments = { ...work.segments, memory: [...work.segments.memory, ...added] };
  recordPassed(work, added, Segment.MEMORY);
}

/** The system message experiences are shown as: "<experience>" then one "- [exp_n] text" line each. */
export function experiencesMessage(work: CompileWork): Message | undefined {
  if (work.experiences.length === 0) return undefined;
  const lines = ["<experience>", ...work.experiences.map((experience) => `- [${experience.id}] ${experience.text}`)];
  return create(MessageSchema, {
    id: "experiences",
    role: Role.SYSTEM,
    parts: [create(PartSchema, { kind: { case: "text", value: { text: lines.join("\n") } } })],
  });
}

/** Stage 3, second half: the experiences block goes at the end of the system segment. */
export function applyExperiences(work: CompileWork): void {
  const message = experiencesMessage(work);
  if (!message) return;
  work.segments = { ...work.segments, system: [...work.segments.system, message] };
  work.introduced.push(create(IntroducedMessageSchema, { segment: Segment.SYSTEM, message }));
  recordPassed(work, [message], Segment.SYSTEM);
}
