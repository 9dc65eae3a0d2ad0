import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, EstimatorKind, TransformationReason, type CompileResult } from "#gen/contextd/v1/compile_pb";
import { Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { compile } from "../../src/core/compile/compile.js";
import type { CalibrationKey, TokenCorrection } from "../../src/core/compile/token-calibration.js";
import { calibratedLimit, correctedTokens, learnCorrection, maxCorrection, maxCorrectionStep, minCorrection, uncorrected } from "../../src/core/compile/token-calibration.js";
import { testContext } from "./compile-context.js";
import { call, message, result, user } from "./messages.js";

const tenPerMessage = { kind: EstimatorKind.FIXED, fixedPerMessage: 10n };
/** `turns` user/assistant pairs, 10 tokens a message under `tenPerMessage`. */
const history = (turns: number): Message[] =>
  Array.from({ length: turns }, (_, index) => [user(`u${index}`, `question ${index}`), message(Role.ASSISTANT, `a${index}`, `answer ${index}`)]).flat();

function run(maxTokens: bigint, correction: TokenCorrection | undefined, turns = 5, provider = Provider.ANTHROPIC_MESSAGES) {
  const asked: CalibrationKey[] = [];
  const compiled = compile(
    create(CompileRequestSchema, { history: { messages: history(turns) }, budget: { maxTokens, estimator: tenPerMessage }, render: { provider, model: "claude-x" } }),
    testContext({ calibration: correction && ((key) => (asked.push(key), correction)) }),
  );
  return { compiled, asked };
}

const ids = (result: CompileResult) => result.payload!.history.map((entry) => entry.id);

describe("calibrated limits", () => {
  it("divide the limit by the correction, rounding down, and predict ceil(estimate × correction)", () => {
    expect(calibratedLimit(100, 1.25)).toBe(80);
    expect(calibratedLimit(100, 0.8)).toBe(125);
    expect(calibratedLimit(100, 3)).toBe(33);
    expect(calibratedLimit(100, 1)).toBe(100);
    // 0 stays "no limit"; a tiny limit never becomes 0.
    expect(calibratedLimit(0, 2)).toBe(0);
    expect(calibratedLimit(1, 4)).toBe(1);
    expect(correctedTokens(80, 1.25)).toBe(100);
    expect(correctedTokens(81, 1.25)).toBe(102);
    expect(correctedTokens(7, 1)).toBe(7);
  });

  it("learn the ratio actual / estimated: the first report sets it, a plain mean up to 10, then 1/10 weight", () => {
    let correction = uncorrected;
    const first = learnCorrection(correction, 100, 120);
    expect(first.correction).toEqual({ factor: 1.2, reports: 1, meanAbsoluteRelativeError: 20 / 120 });
    expect(first.relativeError).toBeCloseTo(20 / 120, 12);
    // The second report's error is measured against the correction in force before it.
    const second = learnCorrection(first.correction, 100, 140);
    expect(second.relativeError).toBeCloseTo(20 / 140, 12);
    expect(second.correction.factor).toBeCloseTo(1.3, 12);
    expect(second.correction.meanAbsoluteRelativeError).toBeCloseTo((20 / 120 + 20 / 140) / 2, 12);
    const ratios = [1.1, 1.3, 1.2, 1.4, 1.0, 1.2, 1.3, 1.1, 1.2, 1.2];
    for (const ratio of ratios) correction = learnCorrection(correction, 1_000, Math.round(1_000 * ratio)).correction;
    expect(correction.reports).toBe(10);
    expect(correction.factor).toBeCloseTo(ratios.reduce((a, b) => a + b) / ratios.length, 12);
    const eleventh = learnCorrection(correction, 1_000, 2_000).correction;
    expect(eleventh.factor).toBeCloseTo(correction.factor + (2 - correction.factor) / 10, 12);
  });

  it("clamp each report's ratio to [0.25, 4], and move a correction by at most ×2 or ÷2 per report", () => {
    // Issue 29: one report of 4000:1 moved the correction straight to its clamp, for every caller.
    expect(learnCorrection(uncorrected, 1, 4_000).correction.factor).toBe(maxCorrectionStep);
    expect(learnCorrection(uncorrected, 1_000, 1).correction.factor).toBe(1 / maxCorrectionStep);
    // The error is the real one, unclamped: 1,000 estimated and 1 actual is 99,900% off.
    expect(learnCorrection(uncorrected, 1_000, 1).relativeError).toBe(999);
    const factors: number[] = [];
    let correction = uncorrected;
    for (let index = 0; index < 50; index++) factors.push((correction = learnCorrection(correction, 1, 1_000_000).correction).factor);
    // The first report doubles it; the second (weight 1/2: 2 + (4 − 2) / 2 = 3) stays within ×2;
    // the third (3 + (4 − 3) / 3) and later ones approach the clamp as the mean does.
    expect(factors.slice(0, 3)).toEqual([2, 3, 3 + 1 / 3]);
    expect(factors.every((factor) => factor <= maxCorrection)).toBe(true);
    expect(correction.factor).toBeCloseTo(maxCorrection, 2);
    correction = uncorrected;
    for (let index = 0; index < 50; index++) correction = learnCorrection(correction, 1_000_000, 1).correction;
    expect(correction.factor).toBeCloseTo(minCorrection, 2);
  });
});

describe("a compile's budget with a correction", () => {
  it("trims history to floor(limit / correction) and says the estimate, the correction and its error", async () => {
    const plain = await run(100n, undefined).compiled;
    expect(ids(plain)).toHaveLength(10);
    expect(plain.calibration).toBeUndefined();

    const correction = { factor: 1.25, reports: 3, meanAbsoluteRelativeError: 0.05 };
    const { compiled, asked } = run(100n, correction);
    const result = await compiled;
    expect(asked).toEqual([{ provider: Provider.ANTHROPIC_MESSAGES, model: "claude-x", estimator: EstimatorKind.FIXED }]);
    // 100 / 1.25 = 80 estimated tokens: the first turn goes.
    expect(result.usage!.limit).toBe(80n);
    expect(ids(result)).toEqual(ids(plain).slice(2));
    expect(result.usage!.total).toBe(80n);
    expect(result.calibration).toMatchObject({
      provider: Provider.ANTHROPIC_MESSAGES,
      model: "claude-x",
      estimator: EstimatorKind.FIXED,
      estimatedTokens: 80n,
      correction: 1.25,
      correctedTokens: 100n,
      requestedLimit: 100n,
      reports: 3n,
      meanAbsoluteRelativeError: 0.05,
    });
  });

  it("lets an estimate exactly at floor(limit / correction) through and trims one token over it", async () => {
    // 100 tokens of history; a limit of 125 at 1.25 is exactly 100.
    const at = await run(125n, { factor: 1.25, reports: 1, meanAbsoluteRelativeError: 0 }).compiled;
    expect(ids(at)).toHaveLength(10);
    const under = await run(124n, { factor: 1.25, reports: 1, meanAbsoluteRelativeError: 0 }).compiled;
    expect(under.usage!.limit).toBe(99n);
    expect(ids(under)).toHaveLength(8);
    // A correction under 1 lets more estimated tokens in: 80 / 0.8 = 100.
    const looser = await run(80n, { factor: 0.8, reports: 1, meanAbsoluteRelativeError: 0 }).compiled;
    expect(ids(looser)).toHaveLength(10);
    expect(looser.calibration!.correctedTokens).toBe(80n);
  });

  it("gives the same result for the same correction", async () => {
    const correction = { factor: 1.37, reports: 4, meanAbsoluteRelativeError: 0.1 };
    const [a, b] = await Promise.all([run(150n, correction, 12).compiled, run(150n, correction, 12).compiled]);
    expect(ids(a)).toEqual(ids(b));
    expect(a.usage).toEqual(b.usage);
    expect(a.calibration).toEqual(b.calibration);
    expect(a.usage!.limit).toBe(109n);
  });

  it("reports correction 1 before any report, and nothing without a render provider", async () => {
    const first = await run(100n, uncorrected).compiled;
    expect(first.calibration).toMatchObject({ correction: 1, reports: 0n, estimatedTokens: 100n, correctedTokens: 100n, requestedLimit: 100n });
    const { compiled, asked } = run(100n, { factor: 2, reports: 1, meanAbsoluteRelativeError: 0 }, 5, Provider.UNSPECIFIED);
    const unrendered = await compiled;
    expect(asked).toEqual([]);
    expect(unrendered.calibration).toBeUndefined();
    expect(unrendered.usage!.limit).toBe(100n);
  });

  it("corrects an explicit trigger_tokens and clear_at_least_tokens as it corrects the limit", async () => {
    // Ten tool rounds with 4,000-character results: ~1,000 tokens each at 4 characters a token.
    const rounds = Array.from({ length: 10 }, (_, index) => [
      user(`u${index}`, `question ${index}`),
      message(Role.ASSISTANT, `a${index}`, call(`c${index}`, "read_file")),
      message(Role.TOOL, `t${index}`, result(`c${index}`, "x".repeat(4_000), "read_file")),
    ]).flat();
    const clearedWith = async (triggerTokens: bigint, clearAtLeastTokens: bigint, factor: number) => {
      const compiled = await compile(
        create(CompileRequestSchema, {
          history: { messages: rounds },
          budget: { maxTokens: 1_000_000n, estimator: { kind: EstimatorKind.CHAR_FALLBACK, charsPerToken: 4 }, toolResultClearing: { triggerTokens, clearAtLeastTokens } },
          render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-x" },
        }),
        testContext({ calibration: () => ({ factor, reports: 1, meanAbsoluteRelativeError: 0 }) }),
      );
      return Object.entries(compiled.transformations).filter(([, record]) => record.reason === TransformationReason.TOOL_RESULT_CLEARED).map(([id]) => id).sort();
    };
    const uncorrectedClearing = await clearedWith(6_000n, 2_500n, 1);
    expect(uncorrectedClearing.length).toBeGreaterThan(0);
    // A correction of 2: the trigger and step in provider tokens are twice the estimates they hold to.
    expect(await clearedWith(12_000n, 5_000n, 2)).toEqual(uncorrectedClearing);
    expect((await clearedWith(6_000n, 2_500n, 2)).length).toBeGreaterThan(uncorrectedClearing.length);
  });

  it("corrects an explicit trim_step_tokens as it corrects the limit", async () => {
    const trimmed = async (maxTokens: bigint, trimStepTokens: bigint, factor: number) =>
      ids(
        await compile(
          create(CompileRequestSchema, { history: { messages: history(20) }, budget: { maxTokens, estimator: tenPerMessage, trimStepTokens }, render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-x" } }),
          testContext({ calibration: () => ({ factor, reports: 1, meanAbsoluteRelativeError: 0 }) }),
        ),
      );
    const plain = await trimmed(150n, 60n, 1);
    // 40 messages of 10 tokens over 150: the step of 60 rounds the overflow of 250 up to 300, so 30 messages go.
    expect(plain).toHaveLength(10);
    expect(await trimmed(300n, 120n, 2)).toEqual(plain);
    // Left uncorrected the step would be 120 estimated tokens and drop more.
    expect((await trimmed(300n, 60n, 2)).length).toBeGreaterThan(plain.length);
  });

  it("corrects a target's budget by the target's own provider, model and estimator, and says so in its projection", async () => {
    const asked: CalibrationKey[] = [];
    const factors: Record<string, number> = { "claude-x": 1, "gpt-x": 2 };
    const compiled = await compile(
      create(CompileRequestSchema, {
        history: { messages: history(5) },
        budget: { maxTokens: 100n, estimator: tenPerMessage },
        render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-x" },
        targets: [{ name: "side", render: { provider: Provider.OPENAI_CHAT, model: "gpt-x" } }],
      }),
      testContext({ calibration: (key) => (asked.push(key), { factor: factors[key.model]!, reports: 3, meanAbsoluteRelativeError: 0.1 }) }),
    );
    expect(asked.map((key) => [key.provider, key.model, key.estimator])).toEqual([
      [Provider.ANTHROPIC_MESSAGES, "claude-x", EstimatorKind.FIXED],
      [Provider.OPENAI_CHAT, "gpt-x", EstimatorKind.FIXED],
    ]);
    expect(compiled.usage!.limit).toBe(100n);
    const side = compiled.projections.find((projection) => projection.name === "side")!;
    expect(side.usage!.limit).toBe(50n);
    expect(side.messages.length).toBeLessThanOrEqual(5);
    expect(side.calibration).toMatchObject({ provider: Provider.OPENAI_CHAT, model: "gpt-x", correction: 2, requestedLimit: 100n, reports: 3n, estimatedTokens: side.usage!.total, correctedTokens: side.usage!.total * 2n });
    // A target without a render has no key and no calibration.
    const plain = await compile(
      create(CompileRequestSchema, { history: { messages: history(5) }, budget: { maxTokens: 100n, estimator: tenPerMessage }, targets: [{ name: "flat" }] }),
      testContext({ calibration: () => ({ factor: 2, reports: 1, meanAbsoluteRelativeError: 0 }) }),
    );
    expect(plain.projections[0]!.calibration).toBeUndefined();
    expect(plain.projections[0]!.usage!.limit).toBe(100n);
  });
});
