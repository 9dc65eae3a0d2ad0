import { create } from "@bufbuild/protobuf";
import { ConnectError, Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { Role, ToolPayloadSchema } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, Segment } from "#gen/contextd/v1/state_pb";
import { messageContentHash, messageContentKey } from "../../src/core/model/content-hash.js";
import { messageText, withMessageText } from "../../src/core/model/message-text.js";
import { toolPayloadText } from "../../src/core/model/payload-text.js";
import { segmentMessages, segmentField, withSegmentMessages } from "../../src/core/model/segments.js";
import {
  analyzeToolRounds,
  assertCompleteToolRound,
  assertValidToolRounds,
  findOpenToolRound,
} from "../../src/core/model/tool-rounds.js";
import { assistant, call, message, result, toolRound, user } from "./messages.js";

describe("toolPayloadText", () => {
  it("takes the first non-empty field in the order of semantics §1", () => {
    expect(toolPayloadText(undefined)).toBe("");
    expect(toolPayloadText(create(ToolPayloadSchema, { text: "t", data: "{}" }))).toBe("t");
    expect(toolPayloadText(create(ToolPayloadSchema, { data: '{ "a": [1, 2] }' }))).toBe('{"a":[1,2]}');
    expect(toolPayloadText(create(ToolPayloadSchema, { data: "not json at all" }))).toBe("not json at all");
    expect(toolPayloadText(create(ToolPayloadSchema, { error: { code: "E", message: "boom" }, progress: { message: "p" } }))).toBe("boom");
    expect(toolPayloadText(create(ToolPayloadSchema, { error: { code: "E" }, progress: { message: "half" } }))).toBe("half");
    expect(toolPayloadText(create(ToolPayloadSchema, { control: { action: "handoff" } }))).toBe("handoff");
    expect(toolPayloadText(create(ToolPayloadSchema, { binary: { data: new Uint8Array(7) } }))).toBe("[7 bytes]");
    expect(toolPayloadText(create(ToolPayloadSchema, {}))).toBe("");
  });
});

describe("message text", () => {
  it("joins text parts and replaces them in place of the first", () => {
    const m = message(Role.ASSISTANT, "m", "one", call("c1"), "two");
    expect(messageText(m)).toBe("one\ntwo");
    const replaced = withMessageText(m, "new");
    expect(replaced.parts.map((p) => p.kind.case)).toEqual(["text", "toolCall"]);
    expect(messageText(replaced)).toBe("new");
    expect(messageText(m)).toBe("one\ntwo");
  });
});

describe("tool rounds", () => {
  it("makes a round with parallel calls one unit and a plain message a unit of one", () => {
    const history = [user("u1", "hi"), ...toolRound("r1", ["c1", "c2", "c3"]), assistant("a2", "done")];
    const analysis = assertValidToolRounds(history, "history", { allowOpenTail: false });
    expect(analysis.units.map((u) => [u.start, u.end])).toEqual([[0, 1], [1, 5], [5, 6]]);
    expect(analysis.units[1]!.round!.callIds).toEqual(["c1", "c2", "c3"]);
  });

  it("lets rounds reuse a call id (ids are unique per round), each result pairing with its own round", () => {
    // An OpenAI-compatible server that answers `call_0` on every turn.
    const history = [user("u1", "hi"), ...toolRound("r1", ["call_0"]), user("u2", "again"), ...toolRound("r2", ["call_0"])];
    const analysis = assertValidToolRounds(history, "history", { allowOpenTail: false });
    expect(analysis.violations).toEqual([]);
    expect(analysis.units.map((u) => [u.start, u.end])).toEqual([[0, 1], [1, 3], [3, 4], [4, 6]]);
  });

  it("reports an open round at the tail, and rejects it where none is allowed", () => {
    const history = [user("u1", "hi"), ...toolRound("r1", ["c1", "c2"], ["c1"])];
    const analysis = analyzeToolRounds(history, { allowOpenTail: true });
    expect(analysis.violations).toEqual([]);
    expect(analysis.openRound!.round.missingCallIds).toEqual(["c2"]);
    expect(findOpenToolRound(history)!.start).toBe(1);
    expect(findOpenToolRound([user("u", "x")])).toBeUndefined();
    expect(() => assertValidToolRounds(history, "history", { allowOpenTail: false })).toThrow(/open_tool_round_not_last.*history\[1\].*"r1-a".*"c2"/);
  });

  const cases: [string, ReturnType<typeof user>[], RegExp][] = [
    ["incomplete round", [...toolRound("r", ["c1", "c2"], ["c1"]), user("u", "next")], /incomplete_tool_round\) at history\[0\] \(message "r-a"\).*"c2"/],
    ["call without id", [message(Role.ASSISTANT, "a", call("")), user("u", "x")], /tool_call_without_id\) at history\[0\]/],
    ["duplicate call ids in one round", [user("u0", "go"), message(Role.ASSISTANT, "a", call("c1"), call("c1"))], /duplicate_tool_call_id\) at history\[1\] \(message "a"\).*in this round/],
    ["result in a USER message", [message(Role.ASSISTANT, "a", call("c1")), message(Role.USER, "u", result("c1", "x"))], /tool_result_not_in_tool_message\) at history\[1\] \(message "u"\)/],
    ["TOOL message without result", [message(Role.ASSISTANT, "a", call("c1")), message(Role.TOOL, "t", "text only")], /tool_message_without_result\) at history\[1\]/],
    ["result without a round", [user("u", "x"), message(Role.TOOL, "t", result("c1", "x"))], /tool_result_without_call\) at history\[1\] \(message "t"\)/],
    ["empty result call id", [message(Role.ASSISTANT, "a", call("c1")), message(Role.TOOL, "t", result("", "x"))], /tool_result_empty_call_id\) at history\[1\]/],
    ["unknown result call id", [message(Role.ASSISTANT, "a", call("c1")), message(Role.TOOL, "t", result("zz", "x")), user("u", "y")], /tool_result_unknown_call_id\) at history\[1\].*"zz"/],
    ["duplicate result", [message(Role.ASSISTANT, "a", call("c1")), message(Role.TOOL, "t", result("c1", "x")), message(Role.TOOL, "t2", result("c1", "y"))], /tool_result_duplicate_call_id\) at history\[2\] \(message "t2"\)/],
    ["call in a USER message", [message(Role.USER, "u", call("c1"))], /tool_call_outside_assistant\) at history\[0\]/],
  ];
  for (const [name, history, error] of cases) {
    it(`rejects ${name} with INVALID_ARGUMENT naming the rule, index and id`, () => {
      try {
        assertValidToolRounds(history, "history", { allowOpenTail: true });
        expect.unreachable();
      } catch (thrown) {
        expect(thrown).toBeInstanceOf(ConnectError);
        expect((thrown as ConnectError).code).toBe(Code.InvalidArgument);
        expect((thrown as ConnectError).rawMessage).toMatch(error);
      }
    });
  }

  it("accepts a complete round for append_tool_round and rejects stray or missing results", () => {
    const [a, ...results] = toolRound("r", ["c1", "c2"]);
    expect(() => assertCompleteToolRound(a!, results, "deltas[0].append_tool_round")).not.toThrow();
    expect(() => assertCompleteToolRound(a!, results.slice(1), "deltas[0].append_tool_round")).toThrow(/open_tool_round_not_last/);
    expect(() => assertCompleteToolRound(user("u", "x"), [], "deltas[0].append_tool_round")).toThrow(/tool_round_without_calls/);
    expect(() => assertCompleteToolRound(a!, [...results, user("u", "x")], "d")).toThrow(/not a result of this round/);
  });
});

describe("segments", () => {
  it("reads and replaces a segment by enum without mutating the holder", () => {
    const state = create(ConversationStateSchema, { history: [user("u", "x")] });
    expect(segmentMessages(state, Segment.HISTORY, "s")).toBe(state.history);
    const next = withSegmentMessages(state, Segment.MEMORY, [user("m", "y")], "s");
    expect(next.memory.map((m) => m.id)).toEqual(["m"]);
    expect(state.memory).toEqual([]);
    expect(() => segmentField(Segment.UNSPECIFIED, "deltas[0].segment")).toThrow(/deltas\[0\]\.segment: a segment is required/);
    expect(() => segmentField(9 as Segment, "x")).toThrow(/unknown segment 9/);
  });
});

describe("content hashing", () => {
  it("ignores the id and changes with content", () => {
    expect(messageContentHash(user("a", "same"))).toBe(messageContentHash(user("b", "same")));
    expect(messageContentHash(user("a", "same"))).not.toBe(messageContentHash(user("a", "other")));
    expect(messageContentKey(user("a", "same"))).toBe(messageContentKey(user("b", "same")));
    expect(messageContentKey(user("a", "ab"))).not.toBe(messageContentKey(message(Role.USER, "a", "a", "b")));
    expect(messageContentKey(user("a", "x"))).not.toBe(messageContentKey(assistant("a", "x")));
  });
});
