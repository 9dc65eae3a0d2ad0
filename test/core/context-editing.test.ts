import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import {
  CompileRequestSchema,
  EstimatorKind,
  TransformationAction,
  TransformationReason,
  type CompileResult,
} from "#gen/contextd/v1/compile_pb";
import { PartSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { analyzeToolRounds } from "../../src/core/model/tool-rounds.js";
import { compile } from "../../src/core/compile/compile.js";
import { maxExcludedTools, maxPlaceholderBytes } from "../../src/core/compile/context-editing.js";
import { testContext } from "./compile-context.js";
import { call, message, result, user } from "./messages.js";
import { rejectsWith } from "./rejects.js";

type Init = NonNullable<Parameters<typeof create<typeof CompileRequestSchema>>[1]>;
type Clearing = NonNullable<NonNullable<Init["budget"]>["toolResultClearing"]>;

// Four characters per token: a 4,000-character result is 1,000 tokens.
const chars = { kind: EstimatorKind.CHAR_FALLBACK, charsPerToken: 4 };

/** `rounds` tool rounds, each a user question, a call of `tools[i % n]` and a result of `resultChars`. */
function agentHistory(rounds: number, resultChars = 4_000, tools = ["read_file"]): Message[] {
  const messages: Message[] = [];
  for (let index = 0; index < rounds; index++) {
    const tool = tools[index % tools.length]!;
    messages.push(
      user(`u${index}`, `question ${index}`),
      message(Role.ASSISTANT, `a${index}`, call(`c${index}`, tool, JSON.stringify({ path: `src/file${index}.ts`, padding: "p".repeat(200) }))),
      message(Role.TOOL, `t${index}`, result(`c${index}`, `${index}:`.padEnd(resultChars, "x"), tool)),
      message(Role.ASSISTANT, `f${index}`, `answer ${index}`),
    );
  }
  return messages;
}

const compileWith = (history: Message[], clearing: Clearing | undefined, maxTokens: bigint, render?: Init["render"]) =>
  compile(create(CompileRequestSchema, { history: { messages: history }, budget: { maxTokens, estimator: chars, toolResultClearing: clearing }, render }), testContext());

const ids = (messages: readonly Message[]) => messages.map((item) => item.id);
const resultText = (item: Message) => (item.parts[0]!.kind.case === "toolResult" ? item.parts[0]!.kind.value.payload!.text : "");
const cleared = (compiled: CompileResult) =>
  Object.entries(compiled.transformations)
    .filter(([, record]) => record.reason === TransformationReason.TOOL_RESULT_CLEARED)
    .map(([id]) => id)
    .sort();

describe("tool-result clearing", () => {
  it("clears the oldest results before any round is dropped, keeping the most recent ones and every round whole", async () => {
    const history = agentHistory(10);
    // Whole: ~10 × 1,080 tokens. The limit holds about half.
    const compiled = await compileWith(history, {}, 6_000n);
    const sent = compiled.payload!.history;
    expect(ids(sent)).toEqual(ids(history));
    expect(cleared(compiled)).toEqual(["t0", "t1", "t2", "t3", "t4"]);
    expect(resultText(sent.find((item) => item.id === "t0")!)).toBe("[result of read_file cleared to save context]");
    // The three most recent results are kept whatever happens; t5, t6 were not needed.
    for (const id of ["t5", "t6", "t7", "t8", "t9"]) expect(resultText(sent.find((item) => item.id === id)!)).toMatch(/^\d:x+$/);
    expect(compiled.transformations["t0"]!.action).toBe(TransformationAction.FORMATTED);
    expect(Object.values(compiled.transformations).some((record) => record.action === TransformationAction.DROPPED)).toBe(false);
    expect(analyzeToolRounds(sent, { allowOpenTail: false }).units.every((unit) => !unit.round || unit.round.callIds.length > 0)).toBe(true);
    const usage = compiled.usage!;
    expect(usage.clearedTokens).toBeGreaterThan(4_500n);
    expect(usage.historyBeforeTrim - usage.clearedTokens).toBe(usage.history);
    expect(usage.total).toBeLessThanOrEqual(6_000n);
    // What is stored is untouched: persistence has the whole results.
    expect(resultText(compiled.persistence!.history.find((item) => item.id === "t0")!)).toMatch(/^0:x+$/);
  });

  it("does nothing under the trigger, and clears under the limit when the trigger is lower", async () => {
    const history = agentHistory(4);
    expect(cleared(await compileWith(history, {}, 100_000n))).toEqual([]);
    const early = await compileWith(history, { triggerTokens: 2_000n, keepRecent: 1 }, 100_000n);
    expect(cleared(early)).toEqual(["t0", "t1", "t2"]);
    expect(early.usage!.total).toBeLessThanOrEqual(2_000n);
  });

  it("keeps excluded tools' and retained results, and clears the calls' inputs when asked", async () => {
    const history = agentHistory(8, 4_000, ["read_file", "plan"]);
    const compiled = await compile(
      create(CompileRequestSchema, {
        history: { messages: history },
        budget: { maxTokens: 6_000n, estimator: chars, retainedIds: ["t0"], toolResultClearing: { excludeTools: ["plan"], clearInputs: true, placeholder: "[{name}: see the file again]" } },
      }),
      testContext(),
    );
    // plan results (odd rounds) and the retained t0 stay; read_file results t2, t4 go (t6 is among the 3 most recent).
    expect(cleared(compiled)).toEqual(["a2", "a4", "t2", "t4"]);
    const sent = compiled.payload!.history;
    expect(resultText(sent.find((item) => item.id === "t2")!)).toBe("[read_file: see the file again]");
    const callPart = sent.find((item) => item.id === "a2")!.parts[0]!.kind;
    expect(callPart.case === "toolCall" && callPart.value.arguments!.data).toBe("");
    const keptCall = sent.find((item) => item.id === "a6")!.parts[0]!.kind;
    expect(keptCall.case === "toolCall" && keptCall.value.arguments!.data).toContain("src/file6.ts");
  });

  it("emits one message_cleared event per cleared message with the tokens it freed, and none for a cleared message then dropped", async () => {
    const history = agentHistory(8, 4_000, ["read_file", "plan"]);
    const context = testContext();
    const compiled = await compile(
      create(CompileRequestSchema, { history: { messages: history }, budget: { maxTokens: 6_000n, estimator: chars, toolResultClearing: { excludeTools: ["plan"], clearInputs: true } } }),
      context,
    );
    const clearedEvents = context.events.flatMap((event) => (event.event.case === "messageCleared" ? [event.event.value] : []));
    expect(clearedEvents.map((event) => event.messageId).sort()).toEqual(cleared(compiled));
    expect(clearedEvents.every((event) => event.reason === TransformationReason.TOOL_RESULT_CLEARED && event.freedTokens > 0n)).toBe(true);
    // A result's share is its text less the placeholder; the call's is its arguments.
    expect(clearedEvents.reduce((sum, event) => sum + event.freedTokens, 0n)).toBe(compiled.usage!.clearedTokens);

    // Clearing is not enough under 3,500 tokens: the budget then drops head rounds, cleared ones among them.
    const tight = testContext();
    const dropped = await compile(create(CompileRequestSchema, { history: { messages: agentHistory(10) }, budget: { maxTokens: 3_500n, estimator: chars, toolResultClearing: {} } }), tight);
    const clearedIds = tight.events.flatMap((event) => (event.event.case === "messageCleared" ? [event.event.value.messageId] : []));
    const droppedIds = new Set(Object.entries(dropped.transformations).flatMap(([id, record]) => (record.action === TransformationAction.DROPPED ? [id] : [])));
    // t0 was cleared, then dropped with the head's run: reported by history_head_dropped.
    expect(droppedIds.has("t0")).toBe(true);
    expect(tight.events.some((event) => event.event.case === "historyHeadDropped" && event.event.value.firstMessageId === "u0")).toBe(true);
    expect(clearedIds.length).toBeGreaterThan(0);
    expect(clearedIds.filter((id) => droppedIds.has(id))).toEqual([]);
    expect(clearedIds.sort()).toEqual(cleared(dropped));
  });

  it("moves the cut in whole steps as the conversation grows, so the prefix stays the same between steps", async () => {
    const changesOfTheCut = async (step: bigint) => {
      let history: Message[] = agentHistory(6);
      let previous: string[] = [];
      let changes = 0;
      for (let turn = 0; turn < 20; turn++) {
        history = [...history, user(`q${turn}`, "more ".repeat(100)), message(Role.ASSISTANT, `r${turn}`, "noted ".repeat(100))];
        const compiled = await compileWith(history, { triggerTokens: 4_000n, clearAtLeastTokens: step, keepRecent: 1 }, 0n);
        const now = cleared(compiled);
        // The cut only moves forward: what was cleared stays cleared.
        expect(now.filter((id) => previous.includes(id))).toEqual(previous);
        if (now.join() !== previous.join()) changes++;
        previous = now;
      }
      return changes;
    };
    // Without a step the cut moves whenever the overflow grows past one more result.
    const unstepped = await changesOfTheCut(0n);
    const stepped = await changesOfTheCut(3_000n);
    expect(stepped).toBeLessThan(unstepped);
    expect(stepped).toBeGreaterThan(0);
  });

  it("does not clear when the clearable results free less than one step; the budget drops rounds instead", async () => {
    const history = agentHistory(5, 400);
    const compiled = await compileWith(history, { clearAtLeastTokens: 50_000n }, 600n);
    expect(cleared(compiled)).toEqual([]);
    expect(Object.values(compiled.transformations).some((record) => record.action === TransformationAction.DROPPED)).toBe(true);
  });

  it("renders a cleared conversation for every provider without breaking a round", async () => {
    for (const provider of [Provider.OPENAI_CHAT, Provider.OPENAI_RESPONSES, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI]) {
      const compiled = await compileWith(agentHistory(6), {}, 4_000n, { provider, model: "m" });
      expect(cleared(compiled).length).toBeGreaterThan(0);
      expect(new TextDecoder().decode(compiled.rendered!.json)).toContain("cleared to save context");
    }
  });

  it("refuses options out of range, naming the field and the limit", async () => {
    const cases: [Clearing, RegExp][] = [
      [{ triggerTokens: -1n }, /budget\.tool_result_clearing\.trigger_tokens must be from 0 to 9007199254740991, got -1/],
      [{ clearAtLeastTokens: 2n ** 60n }, /budget\.tool_result_clearing\.clear_at_least_tokens must be from 0/],
      [{ excludeTools: Array.from({ length: maxExcludedTools + 1 }, (_, index) => `t${index}`) }, /exclude_tools lists 257 names, at most 256/],
      [{ placeholder: "x".repeat(maxPlaceholderBytes + 1) }, /placeholder has 4097 bytes, at most 4096/],
    ];
    for (const [clearing, pattern] of cases) await rejectsWith(compileWith(agentHistory(1), clearing, 1_000n), Code.InvalidArgument, pattern);
  });
});

describe("trimming in steps", () => {
  it("drops the same head rounds while history grows by less than a step, and never goes over the limit", async () => {
    const cutMoves = async (step: bigint) => {
      let history: Message[] = agentHistory(4, 2_000);
      let previousFirst = "";
      let moves = 0;
      for (let turn = 0; turn < 30; turn++) {
        history = [...history, user(`q${turn}`, "more ".repeat(80)), message(Role.ASSISTANT, `r${turn}`, "noted ".repeat(80))];
        const compiled = await compile(create(CompileRequestSchema, { history: { messages: history }, budget: { maxTokens: 2_500n, estimator: chars, trimStepTokens: step } }), testContext());
        expect(compiled.usage!.total).toBeLessThanOrEqual(2_500n);
        const first = compiled.payload!.history[0]!.id;
        if (previousFirst !== "" && first !== previousFirst) moves++;
        previousFirst = first;
      }
      return moves;
    };
    const exact = await cutMoves(0n);
    const stepped = await cutMoves(1_000n);
    expect(exact).toBeGreaterThan(10);
    expect(stepped).toBeLessThan(exact / 2);
    expect(stepped).toBeGreaterThan(0);
  });
});

describe("reasoning clearing", () => {
  const reasoning = (value: string) => create(PartSchema, { kind: { case: "reasoning", value: { text: value, signature: "sig", provider: Provider.ANTHROPIC_MESSAGES } } });
  const turns = (count: number) =>
    Array.from({ length: count }, (_, index) => [
      user(`u${index}`, `question ${index}`),
      message(Role.ASSISTANT, `a${index}`, reasoning(`thinking ${index} `.repeat(50)), `answer ${index}`),
    ]).flat();
  const withReasoning = (messages: readonly Message[]) => messages.filter((item) => item.parts.some((part) => part.kind.case === "reasoning")).map((item) => item.id);

  it("keeps the reasoning of the last turns only, and always the latest turn's", async () => {
    const history = turns(5);
    const context = testContext();
    const compiledEvents = context.events;
    const compiled = await compile(create(CompileRequestSchema, { history: { messages: history }, budget: { reasoningClearing: { keepRecentTurns: 2 } } }), context);
    expect(withReasoning(compiled.payload!.history)).toEqual(["a3", "a4"]);
    expect(compiled.transformations["a0"]!.reason).toBe(TransformationReason.REASONING_CLEARED);
    expect(compiled.usage!.clearedTokens).toBeGreaterThan(0n);
    const events = compiledEvents.flatMap((event) => (event.event.case === "messageCleared" ? [event.event.value] : []));
    expect(events.map((event) => [event.messageId, event.reason])).toEqual(["a0", "a1", "a2"].map((id) => [id, TransformationReason.REASONING_CLEARED]));
    expect(events.reduce((sum, event) => sum + event.freedTokens, 0n)).toBe(compiled.usage!.clearedTokens);
    const latestOnly = await compile(create(CompileRequestSchema, { history: { messages: history }, budget: { reasoningClearing: {} } }), testContext());
    expect(withReasoning(latestOnly.payload!.history)).toEqual(["a4"]);
  });

  it("keeps reasoning that is an assistant message's only content", async () => {
    const history = [user("u0", "q"), message(Role.ASSISTANT, "a0", reasoning("only thoughts")), user("u1", "q2"), message(Role.ASSISTANT, "a1", "answer")];
    const compiled = await compile(create(CompileRequestSchema, { history: { messages: history }, budget: { reasoningClearing: {} } }), testContext());
    expect(withReasoning(compiled.payload!.history)).toEqual(["a0"]);
  });
});
