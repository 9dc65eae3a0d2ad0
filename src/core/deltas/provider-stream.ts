import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { AppendProviderResponseSchema, TruncateAssistantSchema, type AppendProviderStream, type ConversationState } from "#gen/contextd/v1/state_pb";
import { prefixError } from "../model/error-details.js";
import { mergeProviderStream } from "../providers/merge-stream.js";
import { truncateAssistant } from "./agent-mutations.js";
import type { DeltaContext } from "./delta-context.js";
import { appendProviderResponse } from "./provider-response.js";

/**
 * Merges a streamed response's events into the body they stand for and appends that body through
 * `appendProviderResponse`, the path a non-streaming body takes, so both give the same messages.
 * An interrupted stream appends its text so far through `truncateAssistant`. A stream that is
 * neither complete nor interrupted is INVALID_ARGUMENT: appending half an answer as if whole would
 * be a conversation nobody had.
 */
export function appendProviderStream(state: ConversationState, delta: AppendProviderStream, context: DeltaContext, deltaIndex: number): ConversationState {
  const merged = mergeProviderStream(delta.provider, delta.events);
  if (delta.interrupted) {
    return truncateAssistant(state, create(TruncateAssistantSchema, { partialText: merged.text, abortReason: delta.abortReason }), context);
  }
  if (!merged.complete) {
    const why = merged.failure === "" ? "its end marker never came" : merged.failure;
    throw new ConnectError(`events: the stream is not complete (${why}); set interrupted to append its text as a truncated message`, Code.InvalidArgument);
  }
  const json = new TextEncoder().encode(JSON.stringify(merged.body));
  try {
    return appendProviderResponse(state, create(AppendProviderResponseSchema, { provider: delta.provider, json }), context, deltaIndex);
  } catch (error) {
    // The mergers check what they read; what is left is a body-level rule (for example a
    // response with no parts at all), reported on the body the events were merged into.
    throw error instanceof ConnectError ? prefixError(error, "events (merged into one response)") : error;
  }
}
