import { Code, ConnectError } from "@connectrpc/connect";
import type { Artifact } from "#gen/contextd/v1/artifact_pb";
import type { CompileRequest } from "#gen/contextd/v1/compile_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import type { ConversationState, Experience, ToolDefinition } from "#gen/contextd/v1/state_pb";
import { mergeArtifact } from "../deltas/artifact-merge.js";
import type { SegmentField, SegmentHolder } from "../model/segments.js";

/** What a compile starts from: request segments over the stored state, by presence. */
export interface CompileInputs {
  segments: SegmentHolder;
  toolDefinitions: ToolDefinition[];
  experiences: Experience[];
  /** Stored artifacts with the request's merged over them by their merge policy. */
  artifacts: Artifact[];
  /** The stored version compiled; 0 for stateless compiles. */
  version: bigint;
  /** The segments inherited from the stored state (not given in the request). */
  storedSegments: ReadonlySet<SegmentField>;
}

/**
 * Resolves the inputs of a compile. A present request list overrides the stored one even when it
 * is empty (clearing it for this compile); an absent one inherits. Stateless compiles have no
 * stored state, so absent means empty.
 */
export function resolveCompileInputs(request: CompileRequest, stored: ConversationState | undefined): CompileInputs {
  const pick = (override: { messages: Message[] } | undefined, inherited: Message[] | undefined) =>
    override ? override.messages : (inherited ?? []);
  let artifacts: Artifact[] = stored ? stored.artifacts : [];
  request.artifacts.forEach((artifact, index) => {
    if (artifact.id === "") throw new ConnectError(`artifacts[${index}].id is required`, Code.InvalidArgument);
    artifacts = mergeArtifact(artifacts, artifact);
  });
  const storedSegments = new Set<SegmentField>();
  if (stored) for (const field of ["system", "history", "memory", "tools"] as const) if (!request[field]) storedSegments.add(field);
  return {
    storedSegments,
    segments: {
      system: pick(request.system, stored?.system),
      history: pick(request.history, stored?.history),
      memory: pick(request.memory, stored?.memory),
      tools: pick(request.tools, stored?.tools),
    },
    toolDefinitions: request.toolDefinitions ? request.toolDefinitions.toolDefinitions : (stored?.toolDefinitions ?? []),
    experiences: request.experiences ? request.experiences.experiences : (stored?.experiences ?? []),
    artifacts,
    version: stored?.version ?? 0n,
  };
}
