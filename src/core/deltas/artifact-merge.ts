import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ArtifactLifecycle, MergePolicy, type Artifact } from "#gen/contextd/v1/artifact_pb";
import { ToolPayloadSchema, type SourceRef } from "#gen/contextd/v1/message_pb";
import { toolPayloadText } from "../model/payload-text.js";

/**
 * Merges `incoming` into `artifacts` by the rules of semantics §2 (used for stored state and for
 * request artifacts alike) and returns the new list; neither input is mutated.
 *
 * - REPLACE_BY_ORIGIN first removes artifacts with another id and the same origin key.
 * - Same id: EPHEMERAL incoming replaces; APPEND (also unset) joins the payload texts with "\n";
 *   DEDUPLICATE_BY_LAYER keeps the existing one when they share a source ref; otherwise incoming
 *   replaces. A merged artifact keeps its position; a new one is appended.
 */
export function mergeArtifact(artifacts: readonly Artifact[], incoming: Artifact): Artifact[] {
  if (incoming.id === "") throw new ConnectError("artifact.id is required", Code.InvalidArgument);
  let result = [...artifacts];
  if (incoming.mergePolicy === MergePolicy.REPLACE_BY_ORIGIN) {
    const key = originKey(incoming);
    if (key !== undefined) result = result.filter((artifact) => artifact.id === incoming.id || originKey(artifact) !== key);
  }
  const index = result.findIndex((artifact) => artifact.id === incoming.id);
  if (index < 0) return [...result, incoming];
  result[index] = mergeSameId(result[index]!, incoming);
  return result;
}

function mergeSameId(existing: Artifact, incoming: Artifact): Artifact {
  if (incoming.lifecycle === ArtifactLifecycle.EPHEMERAL) return incoming;
  switch (incoming.mergePolicy) {
    case MergePolicy.UNSPECIFIED:
    case MergePolicy.APPEND:
      return {
        ...incoming,
        payload: create(ToolPayloadSchema, {
          text: toolPayloadText(existing.payload) + "\n" + toolPayloadText(incoming.payload),
        }),
      };
    case MergePolicy.DEDUPLICATE_BY_LAYER:
      return sharesSourceRef(existing, incoming) ? existing : incoming;
    default:
      return incoming;
  }
}

/**
 * kind + type_id + owner + sorted source_refs. An artifact with neither owner nor source refs has
 * no origin, so REPLACE_BY_ORIGIN never matches unrelated anonymous artifacts.
 */
function originKey(artifact: Artifact): string | undefined {
  if (!artifact.owner && artifact.sourceRefs.length === 0) return undefined;
  const refs = artifact.sourceRefs.map(sourceRefKey).sort();
  return JSON.stringify([artifact.kind, artifact.typeId, artifact.owner ? sourceRefKey(artifact.owner) : null, refs]);
}

function sourceRefKey(ref: SourceRef): string {
  return JSON.stringify([ref.namespace, ref.kind, ref.id, ref.checkpointId, ref.uri]);
}

function sharesSourceRef(a: Artifact, b: Artifact): boolean {
  const keys = new Set(a.sourceRefs.map(sourceRefKey));
  return b.sourceRefs.some((ref) => keys.has(sourceRefKey(ref)));
}
