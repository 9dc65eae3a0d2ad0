import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, CompileResultPart, MessageListSchema, RenderOptionsSchema, ToolRoundRepair, TransformationAction, TransformationReason, type CompileResult } from "#gen/contextd/v1/compile_pb";
import { Provider, Role, type Message, type ToolResultPart } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { compile } from "../../src/core/compile/compile.js";
import { analyzeToolRounds } from "../../src/core/model/tool-rounds.js";
import { toolPayloadText } from "../../src/core/model/payload-text.js";
import { testContext } from "./compile-context.js";
import { assistant, call, message, result as toolResult, user } from "./messages.js";
import { rejectsWith } from "./rejects.js";

type Init = Parameters<typeof create<typeof CompileRequestSchema>>[1];

const providers = [Provider.OPENAI_CHAT, Provider.OPENAI_RESPONSES, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI];

async function compiled(history: Message[], init: Init = {}): Promise<CompileResult> {
  const request = create(CompileRequestSchema, init);
  request.history = create(MessageListSchema, { messages: history });
  request.include = [CompileResultPart.PERSISTENCE, CompileResultPart.ALL_TRANSFORMATIONS];
  return compile(request, testContext());
}

const ids = (messages: readonly Message[]) => messages.map((m) => m.id);
const repairWarnings = (result: CompileResult) => result.warnings.filter((w) => w.code === "tool_round_repaired").map((w) => w.message);

/** The prompt keeps every rule: each call answered right after it, no result without its call. */
function expectValidRounds(history: readonly Message[]): void {
  expect(analyzeToolRounds(history, { allowOpenTail: false }).violations).toEqual([]);
}

/** Renders the history for every provider: each body passes that provider's checks. */
async function expectRenderedByEveryProvider(history: Message[], init: Init = {}): Promise<void> {
  for (const provider of providers) {
    const result = await compiled(history, { ...init, render: create(RenderOptionsSchema, { provider, model: "m" }) });
    expect(result.rendered?.json.length, Provider[provider]).toBeGreaterThan(0);
  }
}

describe("the default tool-round repair (prompt only)", () => {
  // The Agents SDK's approval flow: the user speaks while the approval is pending, then the result arrives.
  const approval = [user("u1", "refund order 7"), message(Role.ASSISTANT, "a1", call("call_0", "refund")), user("u2", "and email me"), message(Role.TOOL, "t1", toolResult("call_0", "refunded", "refund"))];

  it("sends a late result with the round that made the call; persistence keeps the order it happened in", async () => {
    const result = await compiled(approval);
    expect(ids(result.payload!.history)).toEqual(["u1", "a1", "t1", "u2"]);
    expectValidRounds(result.payload!.history);
    expect(result.transformations["t1"]).toMatchObject({ action: TransformationAction.PASSED, reason: TransformationReason.TOOL_ROUND_REPAIR });
    expect(repairWarnings(result)).toEqual(['sent 1 late result(s) with the round that made the call: history[3] (message "t1", to the round of "a1")']);
    expect(ids(result.persistence!.history)).toEqual(["u1", "a1", "u2", "t1"]);
    await expectRenderedByEveryProvider(approval);
  });

  // A detached resume: the result went to another conversation, the answer came here.
  const detached = [user("u1", "weather?"), message(Role.ASSISTANT, "a1", call("c1", "get_weather"), call("c2", "get_time")), message(Role.TOOL, "t1", toolResult("c1", "18C", "get_weather")), assistant("a2", "It is 18C.")];

  it("closes a call left unanswered with a cancelled result that is introduced, never persisted", async () => {
    const result = await compiled(detached);
    expect(ids(result.payload!.history)).toEqual(["u1", "a1", "t1", "a1:no-result:c2", "a2"]);
    expectValidRounds(result.payload!.history);
    const closing = result.payload!.history[3]!;
    expect(closing.role).toBe(Role.TOOL);
    expect(closing.parts[0]!.kind).toMatchObject({ case: "toolResult", value: { toolCallId: "c2", name: "get_time", isError: true } });
    expect(toolPayloadText((closing.parts[0]!.kind.value as ToolResultPart).payload)).toBe("<Tool execution cancelled by user. Tool: get_time. Reason: no result was recorded>");
    expect(result.transformations["a1"]).toMatchObject({ action: TransformationAction.FORMATTED, reason: TransformationReason.TOOL_ROUND_REPAIR });
    expect(result.introduced.map((introduced) => introduced.message!.id)).toEqual(["a1:no-result:c2"]);
    expect(ids(result.persistence!.history)).toEqual(["u1", "a1", "t1", "a2"]);
    expect(repairWarnings(result)).toEqual(['closed the unanswered calls of 1 round(s) with a "no result was recorded" result: history[1] (message "a1": "c2")']);
    await expectRenderedByEveryProvider(detached);
  });

  it("leaves out a result whose call no round left open, and keeps it in persistence", async () => {
    const history = [user("u1", "go"), message(Role.TOOL, "t0", toolResult("gone", "from a run elsewhere")), assistant("a1", "done")];
    const result = await compiled(history);
    expect(ids(result.payload!.history)).toEqual(["u1", "a1"]);
    expect(result.transformations["t0"]).toMatchObject({ action: TransformationAction.DROPPED, reason: TransformationReason.TOOL_ROUND_REPAIR });
    expect(ids(result.persistence!.history)).toEqual(["u1", "t0", "a1"]);
    expect(repairWarnings(result)).toEqual(['left 1 message(s) out of the prompt: history[1] (message "t0", tool_result_without_call: no round left call "gone" open)']);
    await expectRenderedByEveryProvider(history);
  });

  it("pairs a reused id with the latest round that left it open, closing the older one", async () => {
    const history = [user("u1", "a"), message(Role.ASSISTANT, "a1", call("call_0")), user("u2", "b"), message(Role.ASSISTANT, "a2", call("call_0")), message(Role.TOOL, "t2", toolResult("call_0", "B"))];
    const result = await compiled(history);
    expect(ids(result.payload!.history)).toEqual(["u1", "a1", "a1:no-result:call_0", "u2", "a2", "t2"]);
    expectValidRounds(result.payload!.history);
    // The same result answered once more has no open call left: it is left out.
    const twice = await compiled([...history, message(Role.TOOL, "t3", toolResult("call_0", "B again"))]);
    expect(ids(twice.payload!.history)).toEqual(["u1", "a1", "a1:no-result:call_0", "u2", "a2", "t2"]);
    expect(twice.transformations["t3"]).toMatchObject({ action: TransformationAction.DROPPED });
  });

  it("changes nothing when rounds only reuse call ids", async () => {
    const history = [user("u1", "a"), message(Role.ASSISTANT, "a1", call("call_0")), message(Role.TOOL, "t1", toolResult("call_0", "A")), user("u2", "b"), message(Role.ASSISTANT, "a2", call("call_0")), message(Role.TOOL, "t2", toolResult("call_0", "B"))];
    const result = await compiled(history);
    expect(result.payload!.history).toEqual(history);
    expect(repairWarnings(result)).toEqual([]);
  });

  it("leaves a TOOL message out whose results answer two different rounds", async () => {
    const history = [message(Role.ASSISTANT, "a1", call("x")), user("u", "hm"), message(Role.ASSISTANT, "a2", call("y")), message(Role.TOOL, "t", toolResult("x", "X"), toolResult("y", "Y"))];
    const result = await compiled(history);
    expect(ids(result.payload!.history)).toEqual(["a1", "a1:no-result:x", "u", "a2"]);
    expect(result.transformations["t"]!.action).toBe(TransformationAction.DROPPED);
    expect(repairWarnings(result).join()).toMatch(/history\[3\] \(message "t", tool_result_without_call: no round left call "y" open beside the other results of this message\)/);
  });

  it("keeps the last round open when nothing follows it, and closes it before a current turn or a pending user message", async () => {
    const open = [user("u1", "go"), message(Role.ASSISTANT, "a1", call("c1"))];
    const alone = await compiled(open);
    expect(ids(alone.payload!.history)).toEqual(["u1", "a1"]);
    expect(repairWarnings(alone)).toEqual([]);
    const answeredInPending = await compiled(open, { pending: [message(Role.TOOL, "t1", toolResult("c1", "ok"))] });
    expect(ids(answeredInPending.payload!.history)).toEqual(["u1", "a1", "t1"]);

    const turn = { currentTurn: { raw: user("now", "never mind") } };
    const beforeTurn = await compiled(open, turn);
    expect(ids(beforeTurn.payload!.history)).toEqual(["u1", "a1", "a1:no-result:c1", "now"]);
    await expectRenderedByEveryProvider(open, turn);
    const beforePending = await compiled(open, { pending: [user("p", "never mind")] });
    expect(ids(beforePending.payload!.history)).toEqual(["u1", "a1", "a1:no-result:c1", "p"]);
    await expectRenderedByEveryProvider(open, { pending: [user("p", "never mind")] });
  });

  it("never repairs pending: a broken round there is refused naming pending", async () => {
    await rejectsWith(compiled([user("u1", "go")], { pending: [message(Role.TOOL, "t", toolResult("zz", "x"))] }), Code.InvalidArgument, /tool_result_without_call\) at pending\[0\] \(message "t"\)/);
  });

  it("names at most 10 messages per warning and counts the rest", async () => {
    const orphans = Array.from({ length: 25 }, (_, index) => message(Role.TOOL, `t${index}`, toolResult(`gone${index}`, "x")));
    const result = await compiled([user("u1", "go"), ...orphans, assistant("a1", "done")]);
    expect(ids(result.payload!.history)).toEqual(["u1", "a1"]);
    const [warning] = repairWarnings(result);
    expect(warning).toMatch(/^left 25 message\(s\) out of the prompt: history\[1\] .*history\[10\] \(message "t9".*; and 15 more$/);
    expect(warning!.match(/history\[/g)).toHaveLength(10);
  });

  it("gives the closing result another id when its own is taken", async () => {
    const history = [message(Role.ASSISTANT, "a1", call("c1")), user("a1:no-result:c1", "a message with that id")];
    const result = await compiled(history);
    const closing = result.payload!.history[1]!;
    expect(closing.id).toMatch(/^a1:no-result:c1:.+/);
    expect(ids(result.payload!.history).slice(2)).toEqual(["a1:no-result:c1"]);
  });

  it("repairs a target's history the same way, so a rendered target of a stored approval flow is valid", async () => {
    for (const provider of providers) {
      const result = await compiled(approval, { targets: [{ name: "side", segments: [Segment.HISTORY], render: { provider, model: "m" } }] });
      const [projection] = result.projections;
      expect(ids(projection!.messages), Provider[provider]).toEqual(["u1", "a1", "t1", "u2"]);
      expect(projection!.rendered?.json.length, Provider[provider]).toBeGreaterThan(0);
    }
  });

  it("refuses instead with REJECT, naming the rule", async () => {
    await rejectsWith(compiled(approval, { repair: ToolRoundRepair.REJECT }), Code.InvalidArgument, /invalid tool round \(incomplete_tool_round\) at history\[1\] \(message "a1"\)/);
    await rejectsWith(compiled(detached, { repair: ToolRoundRepair.REJECT }), Code.InvalidArgument, /incomplete_tool_round\) at history\[1\]/);
  });
});
