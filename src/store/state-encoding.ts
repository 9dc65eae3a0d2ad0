import { create, toBinary } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { MessageSchema, type Message } from "../../gen/ts/contextd/v1/message_pb.js";
import { ConversationStateSchema, type ConversationState } from "../../gen/ts/contextd/v1/state_pb.js";

/**
 * Encodes a state for storage, re-encoding only messages not encoded before. A commit changes a
 * few messages of a long conversation and shares the rest with the previous state (core never
 * mutates), so caching each message's bytes by identity makes a commit's encoding cost follow the
 * change, not the conversation: `toBinary` of a 1,000-message state took ~9 ms here.
 *
 * The output is a valid encoding of `state`: protobuf decoders append repeated fields in the order
 * their entries appear, so writing the small fields first and the segments after decodes to the
 * same state (field order differs from `toBinary`'s, the decoded value does not).
 */
const encodedMessages = new WeakMap<Message, Uint8Array>();

/** Field numbers of the segments in `ConversationState`. */
const segmentFieldNumbers = [
  ["system", 3],
  ["history", 4],
  ["memory", 5],
  ["tools", 6],
] as const;

export function encodeConversationState(state: ConversationState): Uint8Array {
  const rest = toBinary(ConversationStateSchema, create(ConversationStateSchema, { ...state, system: [], history: [], memory: [], tools: [] }));
  const writer = new BinaryWriter();
  writer.raw(rest);
  for (const [field, number] of segmentFieldNumbers) {
    for (const message of state[field]) writer.tag(number, WireType.LengthDelimited).bytes(encodedMessage(message));
  }
  return writer.finish();
}

function encodedMessage(message: Message): Uint8Array {
  let bytes = encodedMessages.get(message);
  if (!bytes) {
    bytes = toBinary(MessageSchema, message);
    encodedMessages.set(message, bytes);
  }
  return bytes;
}

/** A `CommitResponse` (version, state) around already encoded state bytes, for idempotency records. */
export function encodeCommitResponse(version: bigint, stateBytes: Uint8Array): Uint8Array {
  return new BinaryWriter().tag(1, WireType.Varint).int64(version).tag(3, WireType.LengthDelimited).bytes(stateBytes).finish();
}
