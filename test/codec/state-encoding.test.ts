import { create, equals, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, ToolDefinitionSchema } from "#gen/contextd/v1/state_pb";
import { Codec } from "../../src/codec/codec.js";
import { planCommit } from "../../src/store/commit-plan.js";
import { appendHistory, artifactDelta, delta, everyFieldMessage, everyFieldToolRound, textMessage } from "../store/fixtures.js";

// What the Redis store writes: each segment message on its own, and the rest of the state.
describe("stored state encodings", () => {
  it("are what toBinary writes, reassemble to the state, and reuse the bytes kept for responses", () => {
    const codec = new Codec();
    let state = create(ConversationStateSchema, { conversationId: "enc" });
    const batches = [
      [appendHistory(everyFieldMessage("m1")), artifactDelta("a1"), delta({ case: "remember", value: { text: "fact" } })],
      [
        everyFieldToolRound("r1"),
        delta({ case: "appendMessages", value: { segment: 1, messages: [textMessage("s1", Role.SYSTEM, "sys")] } }),
        delta({ case: "setToolDefinitions", value: { toolDefinitions: [create(ToolDefinitionSchema, { name: "lookup", description: "find", parameters: '{"type":"object"}' })] } }),
      ],
    ];
    for (const deltas of batches) {
      state = planCommit(state, deltas, { deltaContext: { newMessageId: () => "id" }, idempotencyKey: "", committedAtUnixMs: 0n, cleared: false }).state;
      const segments = { system: state.system, history: state.history, memory: state.memory, tools: state.tools };
      for (const messages of Object.values(segments)) {
        for (const message of messages) expect(Buffer.from(codec.encodeStoredMessage(message))).toEqual(Buffer.from(toBinary(MessageSchema, message)));
      }
      const rest = fromBinary(ConversationStateSchema, codec.encodeStateRest(state));
      expect(rest.history).toEqual([]);
      const reassembled = create(ConversationStateSchema, {
        ...rest,
        version: state.version,
        ...Object.fromEntries(Object.entries(segments).map(([name, messages]) => [name, messages.map((message) => fromBinary(MessageSchema, codec.encodeStoredMessage(message)))])),
      });
      expect(equals(ConversationStateSchema, reassembled, state)).toBe(true);
    }
    // Once a response has carried a stored message, the store's encoding is those very bytes.
    codec.retainState(state);
    codec.encode(ConversationStateSchema, state);
    const message = state.history[0]!;
    expect(codec.encodeStoredMessage(message)).toBe(codec.encodeStoredMessage(message));
  });
});
