import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { applyDeltas } from "../../src/core/deltas/apply-deltas.js";
import { MessageListLineage } from "../../src/core/model/message-list-lineage.js";
import { emptyConversationState } from "../../src/store/commit-plan.js";
import { answeredCallIds, plannableOnTail, TailCannotDecide, tailLookups, tailStartIn, trustTail } from "../../src/store/tail-commit.js";
import { appendHistory, delta, textMessage } from "./fixtures.js";

// The pure parts of a commit planned on the stored tail; the contract suite runs it on the real
// stores against a warm one.
const assistant = (id: string, callId: string, name: string): Message =>
  create(MessageSchema, { id, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: callId, name, arguments: { data: "{}" } } } }] });
const result = (id: string, callId: string): Message => create(MessageSchema, { id, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, payload: { text: "ok" } } } }] });

describe("tail commits", () => {
  it("plan appends and changes of the rest on the tail, and nothing that edits history or brings a summary", () => {
    expect(plannableOnTail([appendHistory(textMessage("a", Role.USER, "x")), delta({ case: "setMetadata", value: { title: "t" } }), delta({ case: "remember", value: { text: "fact" } })])).toBe(true);
    expect(plannableOnTail([delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: ["a"] } })])).toBe(false);
    expect(plannableOnTail([delta({ case: "clearState", value: {} })])).toBe(false);
    const summary = create(MessageSchema, { id: "s", role: Role.USER, parts: [{ kind: { case: "text", value: { text: "sum" } } }], provenance: { kind: { case: "summary", value: { coveredMessageIds: ["a"] } } } });
    expect(plannableOnTail([appendHistory(summary)])).toBe(false);
    expect(plannableOnTail([delta({ case: "appendUser", value: { message: summary } })])).toBe(false);
  });

  it("look up the names of the calls answered without one, once each", () => {
    const answer = (toolCallId: string, name = "") => delta({ case: "appendToolResult", value: { toolCallId, name } });
    expect(answeredCallIds([answer("c1"), answer("c2", "named"), answer("c1")])).toEqual(["c1"]);
  });

  it("start the tail at the first message carrying no tool result", () => {
    expect(tailStartIn([result("r1", "c1"), result("r2", "c2"), textMessage("u", Role.USER, "x"), assistant("a", "c3", "n")])).toBe(2);
    expect(tailStartIn([result("r1", "c1"), result("r2", "c2")])).toBe(-1);
  });

  it("trust a tail the commit's check takes, and refuse one it does not", () => {
    expect(trustTail([assistant("a", "c1", "n"), result("r", "c1")], true)).toBe(true);
    expect(trustTail([assistant("a", "c1", "n"), textMessage("u", Role.USER, "x"), result("r", "c1")], true)).toBe(false);
    expect(trustTail([assistant("a", "c1", "n"), textMessage("u", Role.USER, "x"), result("r", "c1")], false)).toBe(true);
  });

  it("name a call of the head from the looked-up names, and cannot decide one not looked up", () => {
    const lineage = new MessageListLineage();
    const state = applyDeltas(emptyConversationState("c"), [appendHistory(textMessage("u", Role.USER, "x"))], { newMessageId: () => "g", lineage });
    const tail = { state, start: 500, length: 501, headCallNames: new Map([["head-call", "lookup"], ["never", undefined]]) };
    const context = { newMessageId: () => "g1", ...tailLookups(tail, lineage) };
    const answer = (toolCallId: string) => applyDeltas(state, [delta({ case: "appendToolResult", value: { toolCallId, messageId: `r-${toolCallId}` } })], context).history.at(-1)!.parts[0]!.kind.value;
    expect(answer("head-call")).toMatchObject({ name: "lookup" });
    expect(answer("never")).toMatchObject({ name: "" });
    expect(() => answer("other")).toThrow(TailCannotDecide);
  });
});
