import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, EstimatorKind, TransformationReason, TrimStep, type Budget, type CompileResult } from "#gen/contextd/v1/compile_pb";
import { PartSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import type { CompiledPrefix, CompileMemory } from "../../src/core/compile/cache-impact.js";
import { compile } from "../../src/core/compile/compile.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { BudgetSchema } from "#gen/contextd/v1/compile_pb";
import { testContext } from "./compile-context.js";
import { call, message, result, system, user } from "./messages.js";
import { rejectsWith } from "./rejects.js";

/** Every conversation's last compile, unbounded (the server's is `RecentCompiles`). */
function mapMemory(): CompileMemory {
  const last = new Map<string, CompiledPrefix>();
  return { previous: (id) => last.get(id), remember: (id, prefix) => void last.set(id, prefix) };
}

/** A budget as a plain initializer (not a `Budget` message), so that it can be spread. */
type BudgetInit = Exclude<MessageInitShape<typeof BudgetSchema>, Budget>;

const fourCharsPerToken = { kind: EstimatorKind.CHAR_FALLBACK, charsPerToken: 4 };
const reasoning = (value: string) => create(PartSchema, { kind: { case: "reasoning", value: { text: value, signature: "sig", provider: Provider.ANTHROPIC_MESSAGES } } });
const thinking = (index: number) => message(Role.ASSISTANT, `a${index}`, reasoning(`thinking ${index} `.repeat(10)), `answer ${index}`);
const long = (id: string) => user(id, `question ${id} `.repeat(400));
const withReasoning = (result: CompileResult) => result.payload!.history.filter((item) => item.parts.some((part) => part.kind.case === "reasoning")).map((item) => item.id);

/** Compiles `history` for conversation "c" against `memory`, the budget given. */
function compileTurn(memory: CompileMemory | undefined, history: Message[], budget: BudgetInit, conversationId = "c") {
  return compile(
    create(CompileRequestSchema, { conversationId, system: { messages: [system("s", "rules")] }, history: { messages: history }, budget: { estimator: fourCharsPerToken, ...budget } }),
    testContext({ compileMemory: memory }),
  );
}

// Turn 1 keeps the reasoning of a1 (the last two turns); turn 2 would clear it, two long user
// messages after it that the cache holds.
const turnOne = [user("u0", "start"), thinking(0), user("u1", "go on"), thinking(1), long("u2"), message(Role.ASSISTANT, "a2", "ok")];
const turnTwo = [...turnOne, long("u3")];

describe("minimum gain: reasoning clearing", () => {
  const budget = (minTrimGain: number, extra: BudgetInit = {}): BudgetInit => ({ reasoningClearing: { keepRecentTurns: 2 }, minTrimGain, ...extra });

  it("skips clearing that re-writes more cached tokens than the ratio allows, and reports the forecast", async () => {
    const memory = mapMemory();
    await compileTurn(memory, turnOne, budget(1));
    const second = await compileTurn(memory, turnTwo, budget(1));
    expect(withReasoning(second)).toEqual(["a1"]);
    expect(second.transformations["a1"]?.reason).not.toBe(TransformationReason.REASONING_CLEARED);
    const [forecast, ...others] = second.cacheImpact!.trimSteps;
    expect(others).toEqual([]);
    expect(forecast).toMatchObject({ step: TrimStep.REASONING_CLEARING, needed: false, skipped: true, firstMessageId: "a1" });
    // Freed: a1's reasoning; re-written: a1 without it, u2 and a2, all cached after turn one.
    expect(forecast!.freedTokens).toBeGreaterThan(0n);
    expect(forecast!.invalidatedTokens).toBeGreaterThan(400n);
    expect(forecast!.freedTokens * 1n).toBeLessThan(forecast!.invalidatedTokens);
    // The prompt kept the whole cached prefix: only u3 is new.
    expect(second.cacheImpact!.unchangedPrefixMessages).toBe(7n);
  });

  it("runs the step as before with the rule off (0), without a memory and for a stateless compile", async () => {
    for (const [memory, conversationId, ratio] of [[mapMemory(), "c", 0], [undefined, "c", 1], [mapMemory(), "", 1]] as const) {
      await compileTurn(memory, turnOne, budget(ratio), conversationId);
      const second = await compileTurn(memory, turnTwo, budget(ratio), conversationId);
      expect(withReasoning(second)).toEqual([]);
      expect(second.transformations["a1"]?.reason).toBe(TransformationReason.REASONING_CLEARED);
      expect(second.cacheImpact?.trimSteps ?? []).toEqual([]);
    }
  });

  it("runs a step that frees at least the ratio of what it re-writes", async () => {
    const memory = mapMemory();
    await compileTurn(memory, turnOne, budget(0.001));
    const second = await compileTurn(memory, turnTwo, budget(0.001));
    expect(withReasoning(second)).toEqual([]);
    expect(second.cacheImpact!.trimSteps[0]).toMatchObject({ step: TrimStep.REASONING_CLEARING, needed: false, skipped: false });
  });

  it("runs a step the limit needs, whatever its gain, and the budget holds", async () => {
    const memory = mapMemory();
    const first = await compileTurn(memory, turnOne, budget(1000));
    // Exactly what turn two needs with a1's reasoning cleared: without clearing it is over.
    const withClearing = await compileTurn(undefined, turnTwo, budget(0));
    const limit = withClearing.usage!.total;
    expect(first.usage!.total).toBeLessThan(limit);
    const second = await compileTurn(memory, turnTwo, budget(1000, { maxTokens: limit }));
    expect(second.cacheImpact!.trimSteps[0]).toMatchObject({ step: TrimStep.REASONING_CLEARING, needed: true, skipped: false });
    expect(withReasoning(second)).toEqual([]);
    expect(second.usage!.total).toBe(limit);
    expect(second.budgetDroppedMessages).toBe(0n);
  });

  it("decides the same for the same request and previous compile", async () => {
    const results = [];
    for (let run = 0; run < 2; run++) {
      const memory = mapMemory();
      await compileTurn(memory, turnOne, budget(1));
      results.push(await compileTurn(memory, turnTwo, budget(1)));
    }
    expect(results[0]!.payload).toEqual(results[1]!.payload);
    expect(results[0]!.cacheImpact).toEqual(results[1]!.cacheImpact);
  });
});

describe("minimum gain: tool-result clearing", () => {
  // Each round: a question, a call and a 2,000-character result, an answer.
  const round = (index: number): Message[] => [
    user(`u${index}`, `question ${index}`),
    message(Role.ASSISTANT, `c${index}`, call(`call${index}`)),
    message(Role.TOOL, `t${index}`, result(`call${index}`, `output ${index} `.repeat(200))),
    message(Role.ASSISTANT, `f${index}`, `answer ${index} `.repeat(300)),
  ];
  const rounds = (count: number) => Array.from({ length: count }, (_, index) => round(index)).flat();
  const budget = (minTrimGain: number, maxTokens = 0n) => ({ toolResultClearing: { triggerTokens: 1500n, keepRecent: 1 }, minTrimGain, maxTokens });
  const cleared = (result: CompileResult) => Object.entries(result.transformations).filter(([, record]) => record.reason === TransformationReason.TOOL_RESULT_CLEARED).map(([id]) => id).sort();

  it("keeps what the cached prompt cleared and skips a result that would re-write the rounds after it", async () => {
    const memory = mapMemory();
    const first = await compileTurn(memory, rounds(3), budget(1));
    expect(cleared(first)).toEqual(["t0", "t1"]);
    // A fourth round makes t2 the next to clear: ~440 tokens freed, the ~750 of f2 cached after it re-written.
    const second = await compileTurn(memory, rounds(4), budget(1));
    expect(cleared(second)).toEqual(["t0", "t1"]);
    expect(second.cacheImpact!.trimSteps).toHaveLength(1);
    const [forecast] = second.cacheImpact!.trimSteps;
    expect(forecast).toMatchObject({ step: TrimStep.TOOL_RESULT_CLEARING, needed: false, skipped: true, firstMessageId: "t2" });
    expect(Number(forecast!.freedTokens)).toBeLessThan(Number(forecast!.invalidatedTokens));
    // Without the rule t2 is cleared.
    const memoryOff = mapMemory();
    await compileTurn(memoryOff, rounds(3), budget(0));
    expect(cleared(await compileTurn(memoryOff, rounds(4), budget(0)))).toEqual(["t0", "t1", "t2"]);
  });

  it("clears when the limit needs it", async () => {
    const memory = mapMemory();
    await compileTurn(memory, rounds(3), budget(1));
    const needs = (await compileTurn(undefined, rounds(4), budget(0))).usage!.total;
    const second = await compileTurn(memory, rounds(4), budget(1, needs));
    expect(cleared(second)).toEqual(["t0", "t1", "t2"]);
    expect(second.cacheImpact!.trimSteps[0]).toMatchObject({ needed: true, skipped: false });
    expect(second.budgetDroppedMessages).toBe(0n);
  });
});

describe("minimum gain: DROP_HEAD rounding", () => {
  // Turns of two 350-token messages (1,400 characters each at 4 per token).
  const words = (id: string) => `${id} `.padEnd(1400, "x");
  const turns = (count: number) => Array.from({ length: count }, (_, index) => [user(`u${index}`, words(`u${index}`)), message(Role.ASSISTANT, `a${index}`, words(`a${index}`))]).flat();
  const budget = (minTrimGain: number) => ({ maxTokens: 2202n, trimStepTokens: 1000n, minTrimGain });

  it("holds the cached cut while it fits instead of dropping a step's worth more", async () => {
    const memory = mapMemory();
    const memoryOff = mapMemory();
    // Four turns are 600 over: one 1,000-token step drops u0, a0, u1 and (to start on a user turn) a1.
    const first = await compileTurn(memory, turns(4), budget(2));
    await compileTurn(memoryOff, turns(4), budget(0));
    expect(first.payload!.history[0]!.id).toBe("u2");
    // A fifth turn is 1,300 over: two steps drop u2 and a2 too, while history from u2 (2,100) still fits.
    const off = await compileTurn(memoryOff, turns(5), budget(0));
    // Dropping u2 and a2 frees 700 tokens and re-writes u3 and a3 (700), cached: under a ratio of 2.
    const on = await compileTurn(memory, turns(5), budget(2));
    expect(off.payload!.history[0]!.id).toBe("u3");
    expect(on.payload!.history[0]!.id).toBe("u2");
    expect(on.cacheImpact!.trimSteps).toEqual([expect.objectContaining({ step: TrimStep.HEAD_ROUNDING, freedTokens: 700n, invalidatedTokens: 700n, needed: false, skipped: true, firstMessageId: "u2" })]);
    expect(on.usage!.total).toBeLessThanOrEqual(2202n);
    expect(on.cacheImpact!.rewrittenTokens).toBe(700n);
    expect(off.cacheImpact!.rewrittenTokens).toBe(off.usage!.total - 2n);
  });
});

describe("minimum gain: validation", () => {
  it("refuses a ratio that is not a finite number from 0 to 1000, naming the field", async () => {
    for (const value of [Number.NaN, -0.5, 1000.5, Number.POSITIVE_INFINITY]) {
      await rejectsWith(compileTurn(mapMemory(), turnOne, { minTrimGain: value }), Code.InvalidArgument, new RegExp(`^budget\\.min_trim_gain must be a finite number from 0 to 1000, got ${value}$`));
    }
  });
});
