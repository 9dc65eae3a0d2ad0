import type { AppendProviderResponse, ConversationState } from "#gen/contextd/v1/state_pb";
import { parseProviderResponse } from "../providers/parse-response.js";
import type { DeltaContext } from "./delta-context.js";
import { prepareMessages } from "./message-preparation.js";
import { withAppendedMessages } from "./segment-operations.js";
import { assertNoOpenRound } from "./agent-mutations.js";
import { MessageSchema } from "#gen/contextd/v1/message_pb";
import { assertStringLimits } from "../model/string-limits.js";

/**
 * Parses a provider's response body into ASSISTANT messages and appends them to history.
 * `deltaIndex` is the delta's place in its batch.
 */
export function appendProviderResponse(state: ConversationState, delta: AppendProviderResponse, context: DeltaContext, deltaIndex: number): ConversationState {
  const parsed = parseProviderResponse(delta.provider, delta.json, { callIdSeed: callIdSeed(state, deltaIndex) });
  if (parsed.length === 0) return state;
  // Ids and names in a provider's body are bounded like those a request carries itself.
  parsed.forEach((message, index) => assertStringLimits(MessageSchema, message, `messages[${index}]`));
  assertNoOpenRound(state.history, "a provider response", context);
  const messages = prepareMessages(state, parsed, context, "parsed");
  return withAppendedMessages(state, "history", messages, context);
}

/**
 * Gemini may omit call ids, and the ids put in their place hash this seed with the body, so the
 * seed must differ for every append of a conversation: conversation id, the version the batch
 * writes (versions only go up, also across clears) and the delta's place in the batch. Retrying a
 * failed commit may give new ids, which is harmless since nothing was stored.
 */
function callIdSeed(state: ConversationState, deltaIndex: number): string {
  return JSON.stringify([state.conversationId, String(state.version + 1n), deltaIndex]);
}
