import type { AppendProviderResponse, ConversationState } from "../../../gen/ts/contextd/v1/state_pb.js";
import { parseProviderResponse } from "../providers/parse-response.js";
import type { DeltaContext } from "./delta-context.js";
import { prepareMessages } from "./message-preparation.js";
import { withValidSegment } from "./segment-operations.js";
import { assertNoOpenRound } from "./agent-mutations.js";

/** Parses a provider's response body into ASSISTANT messages and appends them to history. */
export function appendProviderResponse(state: ConversationState, delta: AppendProviderResponse, context: DeltaContext): ConversationState {
  const parsed = parseProviderResponse(delta.provider, delta.json);
  if (parsed.length === 0) return state;
  assertNoOpenRound(state.history, "a provider response");
  const messages = prepareMessages(state, parsed, context, "parsed");
  return withValidSegment(state, "history", [...state.history, ...messages]);
}
