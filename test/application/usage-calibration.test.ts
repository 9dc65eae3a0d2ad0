import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, CompileResultPart, EstimatorKind } from "../../gen/ts/contextd/v1/compile_pb.js";
import { ReportUsageRequestSchema } from "../../gen/ts/contextd/v1/context_service_pb.js";
import { Provider, Role } from "../../gen/ts/contextd/v1/message_pb.js";
import { Compiler } from "../../src/application/compiler.js";
import { HistoryFactsCache } from "../../src/application/history-facts-cache.js";
import { UsageCalibration } from "../../src/application/usage-calibration.js";
import { uncorrected } from "../../src/core/compile/token-calibration.js";
import { TokenCountCache } from "../../src/core/tokens/token-count-cache.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { appendHistory, textMessage } from "../store/fixtures.js";

const key = (model: string) => ({ provider: Provider.ANTHROPIC_MESSAGES, model, estimator: EstimatorKind.TOKENIZER });
const report = (model: string, estimatedTokens: bigint, actualInputTokens: bigint, provider = Provider.ANTHROPIC_MESSAGES, estimator = EstimatorKind.TOKENIZER) =>
  create(ReportUsageRequestSchema, { provider, model, estimator, estimatedTokens, actualInputTokens });

function rejection(action: () => unknown): ConnectError {
  try {
    action();
  } catch (error) {
    return ConnectError.from(error);
  }
  throw new Error("expected a rejection");
}

describe("UsageCalibration", () => {
  it("keeps at most its number of keys, forgetting the least recently used first", () => {
    const calibration = new UsageCalibration(2);
    calibration.report("", report("a", 100n, 150n));
    calibration.report("", report("b", 100n, 200n));
    // Reading "a" makes "b" the least recently used.
    expect(calibration.correction("", key("a")).factor).toBe(1.5);
    calibration.report("", report("c", 100n, 50n));
    expect(calibration.size).toBe(2);
    expect(calibration.correction("", key("b"))).toBe(uncorrected);
    expect(calibration.correction("", key("a")).factor).toBe(1.5);
    expect(calibration.correction("", key("c")).factor).toBe(0.5);
  });

  it("learns per tenant, provider, model and estimator", () => {
    const calibration = new UsageCalibration(16);
    const first = calibration.report("t1", report("m", 1_000n, 1_300n));
    expect(first).toMatchObject({ correction: 1.3, reports: 1n, relativeError: 300 / 1_300 });
    const second = calibration.report("t1", report("m", 1_000n, 1_100n));
    expect(second.correction).toBeCloseTo(1.2, 12);
    expect(second.reports).toBe(2n);
    // The second report is judged by the first's correction: 1,300 predicted, 1,100 counted.
    expect(second.relativeError).toBeCloseTo(200 / 1_100, 12);
    expect(second.meanAbsoluteRelativeError).toBeCloseTo((300 / 1_300 + 200 / 1_100) / 2, 12);
    expect(calibration.correction("t2", key("m"))).toBe(uncorrected);
    expect(calibration.correction("t1", { ...key("m"), estimator: EstimatorKind.CHAR_FALLBACK })).toBe(uncorrected);
    expect(calibration.correction("t1", { ...key("m"), provider: Provider.OPENAI_CHAT })).toBe(uncorrected);
    // A tenant and model that run together differently are different keys.
    calibration.report("t", report("1\u0000m", 100n, 400n));
    expect(calibration.correction("t\u00001", key("m"))).toBe(uncorrected);
  });

  it("rejects a report with a field out of range, naming it, and learns nothing", () => {
    const calibration = new UsageCalibration(4);
    const cases: [ReturnType<typeof report>, string][] = [
      [report("m", 0n, 10n), "report_usage.estimated_tokens must be from 1 to 9007199254740991, got 0"],
      [report("m", 10n, 2n ** 53n), "report_usage.actual_input_tokens must be from 1 to 9007199254740991, got 9007199254740992"],
      [report("m", 10n, 10n, Provider.UNSPECIFIED), "report_usage.provider: a known provider is required, got 0"],
      [report("m", 10n, 10n, Provider.ANTHROPIC_MESSAGES, EstimatorKind.UNSPECIFIED), "report_usage.estimator: a known estimator is required (TokenCalibration.estimator), got 0"],
      [report("m".repeat(257), 10n, 10n), "report_usage.model has 257 bytes, at most 256 are allowed"],
    ];
    for (const [request, message] of cases) {
      const error = rejection(() => calibration.report("", request));
      expect(error.code).toBe(Code.InvalidArgument);
      expect(error.rawMessage).toBe(message);
    }
    expect(calibration.size).toBe(0);
  });

  it("corrects a stored conversation's compile, with the history's head left out by the corrected limit", async () => {
    const store = new MemoryConversationStore();
    const messages = Array.from({ length: 40 }, (_, index) => textMessage(`m${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, `message ${index}`));
    await store.commit("c", undefined, [appendHistory(...messages)], "");
    const calibration = new UsageCalibration(8);
    const compilers = [
      new Compiler({ store, tokenCounts: new TokenCountCache(), calibration, historyFacts: new HistoryFactsCache({ maxBytes: 1 << 20, maxConversations: 4 }) }),
      new Compiler({ store, tokenCounts: new TokenCountCache(), calibration }),
    ];
    const request = create(CompileRequestSchema, {
      conversationId: "c",
      budget: { maxTokens: 100n, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } },
      render: { provider: Provider.ANTHROPIC_MESSAGES, model: "m" },
      include: [CompileResultPart.PAYLOAD],
    });
    const before = await compilers[0]!.compileAndCommit(request, { observer: () => {} });
    expect(before.payload!.history).toHaveLength(10);
    expect(before.calibration).toMatchObject({ correction: 1, reports: 0n, estimatedTokens: 100n });
    // The provider counted half the estimate: 100 / 0.5 = 200 estimated tokens now fit.
    calibration.report("", report("m", before.calibration!.estimatedTokens, 50n, Provider.ANTHROPIC_MESSAGES, before.calibration!.estimator));
    const [incremental, full] = await Promise.all(compilers.map((compiler) => compiler.compileAndCommit(request, { observer: () => {} })));
    for (const result of [incremental!, full!]) {
      expect(result.payload!.history.map((entry) => entry.id)).toEqual(messages.slice(20).map((entry) => entry.id));
      expect(result.usage!.limit).toBe(200n);
      expect(result.calibration).toMatchObject({ correction: 0.5, reports: 1n, estimatedTokens: 200n, correctedTokens: 100n, requestedLimit: 100n, meanAbsoluteRelativeError: 1 });
    }
    // A tenant's compile uses the tenant's corrections only.
    const other = await compilers[1]!.compileAndCommit(request, { observer: () => {}, tenant: "other" });
    expect(other.payload!.history).toHaveLength(10);
  });
});
