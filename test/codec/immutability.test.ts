import { create, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { Codec } from "../../src/codec/codec.js";
import { freezeConversationMessages } from "../../src/codec/immutability.js";

const request = create(CompileRequestSchema, {
  history: { messages: [{ id: "u1", role: Role.USER, parts: [{ kind: { case: "text", value: { text: "hi" } } }] }] },
  currentTurn: { raw: { id: "u2", role: Role.USER, parts: [{ kind: { case: "text", value: { text: "now" } } }] } },
  budget: { maxTokens: 100n },
});
const bytes = toBinary(CompileRequestSchema, request);

describe("the immutability rule", () => {
  it("freezes every conversation message a request carries, with and without reuse, and nothing else", () => {
    for (const codec of [new Codec(), new Codec({ recentMessageBytes: 0, retainedEncodingBytes: 0 })]) {
      const decoded = codec.decode(CompileRequestSchema, bytes);
      const history = decoded.history!.messages[0]!;
      expect(Object.isFrozen(history)).toBe(true);
      expect(Object.isFrozen(history.parts)).toBe(true);
      expect(Object.isFrozen(history.parts[0]!.kind.value)).toBe(true);
      expect(Object.isFrozen(decoded.currentTurn!.raw)).toBe(true);
      // The request and its lists stay as they were: only messages are shared.
      expect(Object.isFrozen(decoded)).toBe(false);
      expect(Object.isFrozen(decoded.history!.messages)).toBe(false);
      expect(() => {
        (history as { id: string }).id = "changed";
      }).toThrow(TypeError);
    }
  });

  it("applies the same rule to a message built by hand or decoded from JSON", () => {
    const copy = create(CompileRequestSchema, request);
    freezeConversationMessages(copy);
    expect(Object.isFrozen(copy.history!.messages[0])).toBe(true);
    expect(Object.isFrozen(copy.budget)).toBe(false);
  });
});
