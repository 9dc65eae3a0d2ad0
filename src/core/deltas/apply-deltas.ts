import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ConversationStateSchema, type ConversationState, type Delta } from "#gen/contextd/v1/state_pb";
import { appendAssistant, appendToolResult, appendToolRound, appendUser, cancelToolCalls, truncateAssistant } from "./agent-mutations.js";
import { mergeArtifact } from "./artifact-merge.js";
import { compact } from "./compact.js";
import type { DeltaContext } from "./delta-context.js";
import { forget, remember } from "./experiences.js";
import { appendProviderResponse } from "./provider-response.js";
import { appendProviderStream } from "./provider-stream.js";
import { appendMessages, clearSegment, removeMessages, replaceSegment } from "./segment-operations.js";
import { setToolDefinitions } from "./tool-definitions.js";
import { setMetadata } from "./conversation-metadata.js";
import { pruneHistory } from "./prune-history.js";
import { prefixError } from "../model/error-details.js";
import { maxStreamEvents } from "../providers/stream-events.js";

/**
 * Applies a batch in order and returns the resulting state; the version is left as it was (the
 * store assigns one new version per committed batch). The input state and deltas are never
 * mutated, so a failed batch leaves nothing half-applied. An invalid delta is INVALID_ARGUMENT
 * naming its index, its operation and the rule: `deltas[2].append_user: tool round still open, ...`.
 */
export function applyDeltas(state: ConversationState, deltas: readonly Delta[], context: DeltaContext): ConversationState {
  assertStreamEventsPerCommit(deltas);
  let current = state;
  deltas.forEach((delta, index) => {
    try {
      current = applyDelta(current, delta, context, index);
    } catch (error) {
      if (!(error instanceof ConnectError)) throw error;
      const operation = delta.operation.case === undefined ? "" : `.${snakeCase(delta.operation.case)}`;
      throw prefixError(error, `deltas[${index}]${operation}`);
    }
  });
  return current;
}

/**
 * The events of every `append_provider_stream` of one batch together are at most `maxStreamEvents`:
 * the limit was per delta, so 9 deltas of 100,000 events each were merged in one go and held the
 * event loop 1.06 to 1.49 s (issue 29 #9). RESOURCE_EXHAUSTED before any event is decoded. The
 * binary decoder counts them too, while it reads a request (codec/protobuf-decoder.ts).
 */
function assertStreamEventsPerCommit(deltas: readonly Delta[]): void {
  let events = 0;
  for (const delta of deltas) if (delta.operation.case === "appendProviderStream") events += delta.operation.value.events.length;
  if (events > maxStreamEvents) throw streamEventsOverLimit(events);
}

/** RESOURCE_EXHAUSTED for a batch whose provider streams carry `events` events, over `maxStreamEvents`. */
export function streamEventsOverLimit(events: number): ConnectError {
  return new ConnectError(
    `deltas: the append_provider_stream deltas carry ${events} events, more than the limit of ${maxStreamEvents} per commit`,
    Code.ResourceExhausted,
  );
}

/**
 * Applies one delta (see `applyDeltas`), the `index`-th of its batch; errors name the rule but not
 * the batch index.
 */
export function applyDelta(state: ConversationState, delta: Delta, context: DeltaContext, index: number): ConversationState {
  const operation = delta.operation;
  switch (operation.case) {
    case "appendMessages":
      return appendMessages(state, operation.value, context);
    case "replaceSegment":
      return replaceSegment(state, operation.value, context);
    case "removeMessages":
      return removeMessages(state, operation.value, context);
    case "clearSegment":
      return clearSegment(state, operation.value);
    case "clearState":
      // Experience numbering survives a clear so an old exp_<n> never names a new fact; the title
      // and labels name the conversation, not its contents, and survive it too, as does where a
      // fork came from.
      return create(ConversationStateSchema, {
        conversationId: state.conversationId,
        version: state.version,
        lastExperienceNumber: state.lastExperienceNumber,
        title: state.title,
        labels: state.labels,
        idleTtlMs: state.idleTtlMs,
        forkedFrom: state.forkedFrom,
      });
    case "upsertArtifact":
      if (!operation.value.artifact) throw new ConnectError("artifact is required", Code.InvalidArgument);
      return { ...state, artifacts: mergeArtifact(state.artifacts, operation.value.artifact) };
    case "removeArtifacts": {
      const ids = new Set(operation.value.ids);
      return { ...state, artifacts: state.artifacts.filter((artifact) => !ids.has(artifact.id)) };
    }
    case "appendToolRound":
      return appendToolRound(state, operation.value, context);
    case "appendAssistant":
      return appendAssistant(state, operation.value, context);
    case "appendToolResult":
      return appendToolResult(state, operation.value, context);
    case "appendUser":
      return appendUser(state, operation.value, context);
    case "truncateAssistant":
      return truncateAssistant(state, operation.value, context);
    case "cancelToolCalls":
      return cancelToolCalls(state, operation.value, context);
    case "compact":
      return compact(state, operation.value, context);
    case "remember":
      return remember(state, operation.value.text);
    case "forget":
      return forget(state, operation.value.experienceId);
    case "appendProviderResponse":
      return appendProviderResponse(state, operation.value, context, index);
    case "appendProviderStream":
      return appendProviderStream(state, operation.value, context, index);
    case "setToolDefinitions":
      return setToolDefinitions(state, operation.value);
    case "setMetadata":
      return setMetadata(state, operation.value);
    case "pruneHistory":
      return pruneHistory(state, operation.value, context);
    case undefined:
      throw new ConnectError("no operation set", Code.InvalidArgument);
  }
}

function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (letter) => "_" + letter.toLowerCase());
}
