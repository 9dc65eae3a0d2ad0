import { create, equals, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { Role } from "../../gen/ts/contextd/v1/message_pb.js";
import { ConversationStateSchema, ToolDefinitionSchema } from "../../gen/ts/contextd/v1/state_pb.js";
import { planCommit } from "../../src/store/commit-plan.js";
import { StateEncoder } from "../../src/codec/state-encoding.js";
import { appendHistory, artifactDelta, delta, everyFieldMessage, everyFieldToolRound, textMessage } from "../store/fixtures.js";

const stateEncoder = new StateEncoder();

describe("StateEncoder", () => {
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
      const previous = state;
      state = planCommit(state, deltas, { deltaContext: { newMessageId: () => "id" }, idempotencyKey: "", committedAtUnixMs: 0n, cleared: false }).state;
      // Extending the previous state's list encodings (appends) or not (removal), and from scratch.
      for (const bytes of [stateEncoder.encode(state, previous), stateEncoder.encode(state)]) {
        const decoded = fromBinary(ConversationStateSchema, bytes);
        expect(equals(ConversationStateSchema, decoded, state)).toBe(true);
        expect(toBinary(ConversationStateSchema, decoded)).toEqual(toBinary(ConversationStateSchema, state));
      }
    }
    expect(state.version).toBe(3n);
    // A long history built one append at a time, each state encoded from the one before.
    let long = state;
    for (let index = 0; index < 200; index++) {
      const next = planCommit(long, [appendHistory(textMessage(`h${index}`, Role.USER, `message ${index}`))], {
        deltaContext: { newMessageId: () => "id" },
        idempotencyKey: "",
        committedAtUnixMs: 0n,
        cleared: false,
      }).state;
      const decoded = fromBinary(ConversationStateSchema, stateEncoder.encode(next, long));
      expect(decoded.history.map((message) => message.id)).toEqual(next.history.map((message) => message.id));
      long = next;
    }
    expect(equals(ConversationStateSchema, fromBinary(ConversationStateSchema, stateEncoder.encode(long)), long)).toBe(true);
    expect([state.history.length, state.system.length, state.artifacts.length, state.experiences.length, state.toolDefinitions.length]).toEqual([3, 1, 1, 1, 1]);
  });
});
