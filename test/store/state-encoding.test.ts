import { create, equals, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CommitResponseSchema } from "../../gen/ts/contextd/v1/conversation_service_pb.js";
import { Role } from "../../gen/ts/contextd/v1/message_pb.js";
import { ConversationStateSchema, ToolDefinitionSchema } from "../../gen/ts/contextd/v1/state_pb.js";
import { planCommit } from "../../src/store/commit-plan.js";
import { encodeCommitResponse, encodeConversationState } from "../../src/store/state-encoding.js";
import { appendHistory, artifactDelta, delta, everyFieldMessage, everyFieldToolRound, textMessage } from "./fixtures.js";

describe("encodeConversationState", () => {
  it("decodes to the same state as toBinary, across commits that share messages", () => {
    let state = create(ConversationStateSchema, { conversationId: "enc" });
    const batches = [
      [appendHistory(everyFieldMessage("m1")), artifactDelta("a1"), delta({ case: "remember", value: { text: "fact" } })],
      [
        everyFieldToolRound("r1"),
        delta({ case: "appendMessages", value: { segment: 1, messages: [textMessage("s1", Role.SYSTEM, "sys")] } }),
        delta({ case: "setToolDefinitions", value: { toolDefinitions: [create(ToolDefinitionSchema, { name: "lookup", description: "find", parameters: '{"type":"object"}' })] } }),
      ],
      [delta({ case: "removeMessages", value: { segment: 2, ids: ["m1"] } }), appendHistory(textMessage("u2", Role.USER, "x"))],
    ];
    for (const deltas of batches) {
      state = planCommit(state, deltas, { deltaContext: { newMessageId: () => "id" }, idempotencyKey: "", committedAtUnixMs: 0n, cleared: false }).state;
      const decoded = fromBinary(ConversationStateSchema, encodeConversationState(state));
      expect(equals(ConversationStateSchema, decoded, state)).toBe(true);
      expect(toBinary(ConversationStateSchema, decoded)).toEqual(toBinary(ConversationStateSchema, state));
      const response = fromBinary(CommitResponseSchema, encodeCommitResponse(state.version, encodeConversationState(state)));
      expect(response.version).toBe(state.version);
      expect(equals(ConversationStateSchema, response.state!, state)).toBe(true);
    }
    expect(state.version).toBe(3n);
    expect([state.history.length, state.system.length, state.artifacts.length, state.experiences.length, state.toolDefinitions.length]).toEqual([3, 1, 1, 1, 1]);
  });
});
