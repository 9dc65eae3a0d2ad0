import { toBinary } from "@bufbuild/protobuf";
import { ConversationStateSchema, type ConversationState } from "#gen/contextd/v1/state_pb";

/**
 * Everything of a state but its four segments and its version: what the Redis store keeps beside
 * the segment lists (docs/stores.md), rewritten only by a commit that changes it. The segments'
 * messages are stored one by one, each encoded by the codec (`Codec.encodeStoredMessage`), whose
 * kept encodings are the only copy of a stored message's bytes in the process.
 */
export function encodeStateRest(state: ConversationState): Uint8Array {
  return toBinary(ConversationStateSchema, { ...state, version: 0n, ...emptySegments });
}

const emptySegments = { system: [], history: [], memory: [], tools: [] } as Pick<ConversationState, "system" | "history" | "memory" | "tools">;
