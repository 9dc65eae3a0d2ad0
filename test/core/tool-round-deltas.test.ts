import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { Provider, Role, type Message, type ToolCallPart, type ToolResultPart } from "#gen/contextd/v1/message_pb";
import { AppendAssistantSchema, AppendProviderResponseSchema, AppendToolRoundSchema, AppendProviderStreamSchema, AppendToolResultSchema, CompactSchema, ConversationStateSchema, DeltaSchema, Segment, type ConversationState, type Delta } from "#gen/contextd/v1/state_pb";
import { applyDeltas } from "../../src/core/deltas/apply-deltas.js";
import type { DeltaContext } from "../../src/core/deltas/delta-context.js";
import { givenToolCallId } from "../../src/core/deltas/message-preparation.js";
import { readErrorDetails } from "../../src/core/model/error-details.js";
import { call, message, result, user } from "./messages.js";

function context(strictToolRounds = false): DeltaContext {
  let next = 0;
  return { newMessageId: () => `id${next++}`, strictToolRounds };
}

const delta = (operation: Delta["operation"]) => create(DeltaSchema, { operation });
const append = (...messages: Message[]) => delta({ case: "appendMessages", value: { $typeName: "contextd.v1.AppendMessages", segment: Segment.HISTORY, messages } });
const appendUser = (id: string, text: string) => delta({ case: "appendUser", value: { $typeName: "contextd.v1.AppendUser", message: user(id, text) } });
const appendAssistantCalls = (messageId: string, ...ids: string[]) =>
  delta({ case: "appendAssistant", value: create(AppendAssistantSchema, { messageId, toolCalls: ids.map((id) => ({ id, name: `tool_${id}`, arguments: { data: "{}" } })) }) });
const appendResult = (toolCallId: string, messageId: string) => delta({ case: "appendToolResult", value: create(AppendToolResultSchema, { toolCallId, messageId, payload: { text: "out" } }) });
const answer = (messageId: string) => delta({ case: "appendAssistant", value: create(AppendAssistantSchema, { messageId, text: "the answer" }) });

const empty = (): ConversationState => create(ConversationStateSchema, { conversationId: "c" });
const apply = (deltas: Delta[], strict = false, state = empty()) => applyDeltas(state, deltas, context(strict));

function refusal(run: () => unknown): ConnectError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.InvalidArgument);
    return error as ConnectError;
  }
  throw new Error("expected a refusal");
}

const resultOf = (state: ConversationState, id: string) => state.history.find((m) => m.id === id)!.parts[0]!.kind.value as ToolResultPart;

// What the Agents SDK runner, LangChain and OpenAI-compatible servers produce in normal flows.
const sequences: [string, Delta[], RegExp][] = [
  ["a user message while an approval is pending, then the result", [appendUser("u1", "refund"), appendAssistantCalls("a1", "approve_1"), appendUser("u2", "and email me"), appendResult("approve_1", "t1")], /append_user: tool round still open, missing results for approve_1/],
  ["a detached resume whose result never arrives", [appendUser("u1", "go"), appendAssistantCalls("a1", "run_1"), answer("a2")], /append_assistant: tool round still open, missing results for run_1; cannot append an assistant message/],
  ["a result without its call", [appendUser("u1", "go"), append(message(Role.TOOL, "t0", result("elsewhere", "late")))], /invalid tool round \(tool_result_without_call\) at history\[1\] \(message "t0"\)/],
  ["a result for a call never made, through append_tool_result", [appendUser("u1", "go"), appendResult("never", "t0")], /append_tool_result: tool call "never" is not an open call of the last assistant message \(no tool round is open\)/],
];

describe("remove_messages", () => {
  const remove = (...ids: string[]) => delta({ case: "removeMessages", value: { $typeName: "contextd.v1.RemoveMessages", segment: Segment.HISTORY, ids } });

  it("refuses a removal that would make a message standing alone join the round before it and break its rules; before, it was stored and every later append failed", () => {
    // A TOOL message without a result, stored on its own after a user message (a framework's note).
    const stored = apply([appendUser("u0", "go"), appendAssistantCalls("a1", "c1"), appendResult("c1", "t1"), appendUser("u1", "and"), append(message(Role.TOOL, "t2", "note"))]);
    const refused = refusal(() => applyDeltas(stored, [remove("u1")], context()));
    expect(refused.rawMessage).toBe('deltas[0].remove_messages: invalid tool round (tool_message_without_result) at history[3] (message "t2"): a TOOL message without a tool_result part');
    const removed = applyDeltas(stored, [remove("u1", "t2"), appendUser("u2", "next")], context());
    expect(removed.history.map((m) => m.id)).toEqual(["u0", "a1", "t1", "u2"]);
  });

  it("names the first id that is not there, and a round it would split with what else to remove", () => {
    const stored = apply([appendUser("u0", "go"), appendAssistantCalls("a1", "c1", "c2"), appendResult("c1", "t1"), appendResult("c2", "t2"), appendUser("u1", "and")]);
    expect(refusal(() => applyDeltas(stored, [remove("u1", "gone", "u0")], context())).rawMessage).toBe('deltas[0].remove_messages: ids[1]: no message "gone" in history');
    expect(refusal(() => applyDeltas(stored, [remove("u1", "t2")], context())).rawMessage).toBe(
      'deltas[0].remove_messages: removing "t2" would split the tool round at history[1]; also remove "a1", "t1" or none of them',
    );
    expect(applyDeltas(stored, [remove("t2", "a1", "t1")], context()).history.map((m) => m.id)).toEqual(["u0", "u1"]);
  });
});

describe("commits store what frameworks produce; strict mode refuses it", () => {
  for (const [name, deltas, strictError] of sequences) {
    it(name, () => {
      const stored = apply(deltas);
      expect(stored.history).toHaveLength(deltas.length);
      expect(refusal(() => apply(deltas, true)).rawMessage).toMatch(strictError);
    });
  }

  it("names a late result after its call, and one without a call in this conversation not at all", () => {
    const stored = apply([appendUser("u1", "refund"), appendAssistantCalls("a1", "approve_1"), appendUser("u2", "and"), appendResult("approve_1", "t1"), appendResult("nowhere", "t2")]);
    expect(resultOf(stored, "t1").name).toBe("tool_approve_1");
    expect(resultOf(stored, "t2").name).toBe("");
  });

  it("lets rounds reuse a call id in both modes (ids are unique per round), and refuses one twice in a round in both", () => {
    const rounds = [append(user("u1", "a"), message(Role.ASSISTANT, "a1", call("call_0")), message(Role.TOOL, "t1", result("call_0", "A"))), append(user("u2", "b"), message(Role.ASSISTANT, "a2", call("call_0")), message(Role.TOOL, "t2", result("call_0", "B")))];
    for (const strict of [false, true]) {
      expect(apply(rounds, strict).history.map((m) => m.id)).toEqual(["u1", "a1", "t1", "u2", "a2", "t2"]);
      const twice = refusal(() => apply([append(message(Role.ASSISTANT, "a", call("x"), call("x")))], strict));
      expect(twice.rawMessage).toMatch(/duplicate_tool_call_id\) at history\[0\] \(message "a"\): tool call id "x" is used more than once in this round/);
      expect(readErrorDetails(twice).errorInfo?.reason).toBe("TOOL_ROUND_INVALID");
    }
  });

  it("gives calls without an id call_<message id>_<n>, and a result without a call id later in the batch the first unanswered one", () => {
    const langchain = append(user("u1", "go"), message(Role.ASSISTANT, "", call("", "search"), call("kept", "fetch"), call("", "read")), message(Role.TOOL, "t1", result("", "found")), message(Role.TOOL, "t2", result("kept", "fetched")), message(Role.TOOL, "t3", result("", "read")));
    const stored = apply([langchain]);
    const assistant = stored.history[1]!;
    expect(assistant.id).toBe("id0");
    expect(assistant.parts.map((part) => (part.kind.value as ToolCallPart).id)).toEqual([givenToolCallId("id0", 0), "kept", givenToolCallId("id0", 2)]);
    expect(givenToolCallId("id0", 2)).toBe("call_id0_2");
    expect(["t1", "t2", "t3"].map((id) => resultOf(stored, id).toolCallId)).toEqual(["call_id0_0", "kept", "call_id0_2"]);
    // A later commit names the call by its given id.
    const later = apply([append(message(Role.ASSISTANT, "a9", call(""))), appendResult(givenToolCallId("a9", 0), "t9")], true, stored);
    expect(resultOf(later, "t9")).toMatchObject({ toolCallId: "call_a9_0", name: "lookup" });
  });

  it("append_tool_round: results without a call id answer the calls sent without one, in order", () => {
    const round = delta({
      case: "appendToolRound",
      value: create(AppendToolRoundSchema, {
        assistant: message(Role.ASSISTANT, "a1", call("", "search"), call("kept", "fetch"), call("", "read")),
        results: [message(Role.TOOL, "t1", result("", "found")), message(Role.TOOL, "t2", result("kept", "fetched")), message(Role.TOOL, "t3", result("", "read"))],
      }),
    });
    for (const strict of [false, true]) {
      const stored = apply([appendUser("u1", "go"), round], strict);
      expect(stored.history[1]!.parts.map((part) => (part.kind.value as ToolCallPart).id)).toEqual(["call_a1_0", "kept", "call_a1_2"]);
      expect(["t1", "t2", "t3"].map((id) => resultOf(stored, id).toolCallId)).toEqual(["call_a1_0", "kept", "call_a1_2"]);
    }
    // More id-less results than id-less calls: the extra one is still refused as unanswering.
    const extra = delta({ case: "appendToolRound", value: create(AppendToolRoundSchema, { assistant: message(Role.ASSISTANT, "a2", call("", "search")), results: [message(Role.TOOL, "t1", result("", "x")), message(Role.TOOL, "t2", result("", "y"))] }) });
    expect(refusal(() => apply([appendUser("u1", "go"), extra])).code).toBe(Code.InvalidArgument);
  });

  it("gives an OpenAI Chat call without id, in a body or a stream, the same call_<message id>_<n>", () => {
    const body = { choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [{ type: "function", function: { name: "search", arguments: "{}" } }] }, finish_reason: "tool_calls" }] };
    const response = apply([delta({ case: "appendProviderResponse", value: create(AppendProviderResponseSchema, { provider: Provider.OPENAI_CHAT, json: new TextEncoder().encode(JSON.stringify(body)) }) })]);
    const chunk = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));
    const events = [
      chunk({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { role: "assistant", tool_calls: [{ index: 0, type: "function", function: { name: "search", arguments: "" } }] }, finish_reason: null }] }),
      chunk({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: "{}" } }] }, finish_reason: "tool_calls" }] }),
      new TextEncoder().encode("[DONE]"),
    ];
    const streamed = apply([delta({ case: "appendProviderStream", value: create(AppendProviderStreamSchema, { provider: Provider.OPENAI_CHAT, events }) })]);
    for (const state of [response, streamed]) {
      const assistant = state.history[0]!;
      expect(assistant.parts.map((part) => (part.kind.value as ToolCallPart).id)).toEqual([givenToolCallId(assistant.id, 0)]);
    }
  });

  it("stores a provider response after an open round (the answer is never lost), refuses it strictly", () => {
    const body = new TextEncoder().encode(JSON.stringify({ choices: [{ message: { role: "assistant", content: "Here is the answer." } }] }));
    const deltas = [appendUser("u1", "go"), appendAssistantCalls("a1", "run_1"), delta({ case: "appendProviderResponse", value: create(AppendProviderResponseSchema, { provider: Provider.OPENAI_CHAT, json: body }) })];
    expect(apply(deltas).history.map((m) => m.role)).toEqual([Role.USER, Role.ASSISTANT, Role.ASSISTANT]);
    expect(refusal(() => apply(deltas, true)).rawMessage).toMatch(/append_provider_response: tool round still open/);
  });

  it("keeps the message-shape rules in both modes, and the other segments strict", () => {
    for (const strict of [false, true]) {
      expect(refusal(() => apply([append(message(Role.ASSISTANT, "a", call("x")), message(Role.TOOL, "t", "text only"))], strict)).rawMessage).toMatch(/tool_message_without_result/);
      expect(refusal(() => apply([append(message(Role.USER, "u", call("x")))], strict)).rawMessage).toMatch(/tool_call_outside_assistant/);
      expect(refusal(() => apply([append(message(Role.ASSISTANT, "a", call("x")), message(Role.USER, "u", result("x", "r")))], strict)).rawMessage).toMatch(/tool_result_not_in_tool_message/);
    }
    const memoryRound = delta({ case: "appendMessages", value: { $typeName: "contextd.v1.AppendMessages", segment: Segment.MEMORY, messages: [message(Role.ASSISTANT, "m", call("x"))] } });
    expect(refusal(() => apply([memoryRound])).rawMessage).toMatch(/open_tool_round_not_last\) at memory\[0\]/);
  });

  it("replaces and compacts a history holding open rounds and orphans", () => {
    const stored = apply(sequences.flatMap(([, deltas], index) => deltas.map((d) => renamed(d, index))));
    const replaced = apply([delta({ case: "replaceSegment", value: { $typeName: "contextd.v1.ReplaceSegment", segment: Segment.HISTORY, messages: stored.history } })], false, stored);
    expect(replaced.history).toEqual(stored.history);
    expect(refusal(() => apply([delta({ case: "replaceSegment", value: { $typeName: "contextd.v1.ReplaceSegment", segment: Segment.HISTORY, messages: stored.history } })], true, stored)).rawMessage).toMatch(/incomplete_tool_round/);
    const compacted = apply([delta({ case: "compact", value: create(CompactSchema, { summary: message(Role.ASSISTANT, "sum", "summary") }) })], false, stored);
    expect(compacted.history.map((m) => m.id)).toEqual(["sum"]);
  });
});

/** The delta with its message ids made unique per sequence (so sequences can follow each other). */
function renamed(d: Delta, sequence: number): Delta {
  const suffix = `-${sequence}`;
  const copy = structuredClone(d) as Delta;
  const value = copy.operation.value as Record<string, unknown>;
  if (typeof value["messageId"] === "string" && value["messageId"] !== "") value["messageId"] += suffix;
  if (typeof value["toolCallId"] === "string") value["toolCallId"] += suffix;
  const messages = (value["messages"] as Message[] | undefined) ?? (value["message"] ? [value["message"] as Message] : []);
  for (const m of messages) {
    m.id += suffix;
    for (const part of m.parts) if (part.kind.case === "toolResult") part.kind.value.toolCallId += suffix;
  }
  for (const toolCall of (value["toolCalls"] as ToolCallPart[] | undefined) ?? []) toolCall.id += suffix;
  return copy;
}
