import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, CompileResultPart, EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { ReportUsageRequestSchema } from "#gen/contextd/v1/context_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
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

async function rejection(action: () => Promise<unknown>): Promise<ConnectError> {
  try {
    await action();
  } catch (error) {
    return ConnectError.from(error);
  }
  throw new Error("expected a rejection");
}

const bounds = { maxKeysPerTenant: 64, ttlMs: 86_400_000 };

/** A memory store whose calibration reads are counted, held back until released, or failed on demand (a unit test's stand-in for a slow or broken store). */
class ObservedCalibrationStore extends MemoryConversationStore {
  reads = 0;
  failing: string | undefined;
  private held: (() => void)[] = [];
  holding = false;

  override async readCalibration(...args: Parameters<MemoryConversationStore["readCalibration"]>) {
    this.reads++;
    if (this.holding) await new Promise<void>((resolve) => this.held.push(resolve));
    if (this.failing) throw new ConnectError(this.failing, Code.Unavailable);
    return super.readCalibration(...args);
  }

  release(): void {
    this.holding = false;
    for (const resolve of this.held.splice(0)) resolve();
  }
}

function calibrationOn(store: MemoryConversationStore, options: { maxKeys?: number; refreshMs?: number; clock?: { ms: number } } = {}) {
  const clock = options.clock ?? { ms: 1_000_000 };
  return new UsageCalibration({ store, maxKeys: options.maxKeys ?? 16, bounds, refreshMs: options.refreshMs ?? 1_000, now: () => clock.ms });
}

describe("UsageCalibration", () => {
  it("caches at most its number of keys, forgetting the least recently used first; the store keeps them all", async () => {
    const store = new MemoryConversationStore();
    const calibration = calibrationOn(store, { maxKeys: 2 });
    await calibration.report("", report("a", 100n, 150n));
    await calibration.report("", report("b", 100n, 200n));
    // Reading "a" makes "b" the least recently used.
    expect(await calibration.correction("", key("a"))).toMatchObject({ factor: 1.5 });
    await calibration.report("", report("c", 100n, 50n));
    expect(calibration.size).toBe(2);
    // "b" is read from the store again.
    expect(await calibration.correction("", key("b"))).toMatchObject({ factor: 2, reports: 1 });
    expect(calibration.size).toBe(2);
  });

  it("forgets from the tenant with the most keys cached: one tenant's many models do not push out another's", async () => {
    const store = new ObservedCalibrationStore();
    const calibration = calibrationOn(store, { maxKeys: 4 });
    await calibration.report("b", report("b-model", 100n, 150n));
    for (let index = 0; index < 20; index++) await calibration.report("a", report(`a-model-${index}`, 100n, 120n));
    expect(calibration.size).toBe(4);
    // b's key is still cached: no store read for it.
    expect(await calibration.correction("b", key("b-model"))).toMatchObject({ factor: 1.5, reports: 1 });
    expect(store.reads).toBe(0);
    // a kept its three most recent keys; its oldest is read again.
    expect(await calibration.correction("a", key("a-model-19"))).toMatchObject({ factor: 1.2 });
    expect(store.reads).toBe(0);
    expect(await calibration.correction("a", key("a-model-0"))).toMatchObject({ factor: 1.2 });
    expect(store.reads).toBe(1);
  });

  it("learns per tenant, provider, model and estimator", async () => {
    const calibration = calibrationOn(new MemoryConversationStore());
    const first = await calibration.report("t1", report("m", 1_000n, 1_300n));
    expect(first).toMatchObject({ correction: 1.3, reports: 1n, relativeError: 300 / 1_300 });
    const second = await calibration.report("t1", report("m", 1_000n, 1_100n));
    expect(second.correction).toBeCloseTo(1.2, 12);
    expect(second.reports).toBe(2n);
    // The second report is judged by the first's correction: 1,300 predicted, 1,100 counted.
    expect(second.relativeError).toBeCloseTo(200 / 1_100, 12);
    expect(second.meanAbsoluteRelativeError).toBeCloseTo((300 / 1_300 + 200 / 1_100) / 2, 12);
    expect(await calibration.correction("t2", key("m"))).toBe(uncorrected);
    expect(await calibration.correction("t1", { ...key("m"), estimator: EstimatorKind.CHAR_FALLBACK })).toBe(uncorrected);
    expect(await calibration.correction("t1", { ...key("m"), provider: Provider.OPENAI_CHAT })).toBe(uncorrected);
    // A tenant and model that run together differently are different keys.
    await calibration.report("t", report("1\u0000m", 100n, 400n));
    expect(await calibration.correction("t\u00001", key("m"))).toBe(uncorrected);
  });

  it("rejects a report with a field out of range, naming it, and learns nothing", async () => {
    const store = new ObservedCalibrationStore();
    const calibration = calibrationOn(store);
    const cases: [ReturnType<typeof report>, string][] = [
      [report("m", 0n, 10n), "report_usage.estimated_tokens must be from 1 to 9007199254740991, got 0"],
      [report("m", 10n, 2n ** 53n), "report_usage.actual_input_tokens must be from 1 to 9007199254740991, got 9007199254740992"],
      [report("m", 10n, 10n, Provider.UNSPECIFIED), "report_usage.provider: a known provider is required, got 0"],
      [report("m", 10n, 10n, Provider.ANTHROPIC_MESSAGES, EstimatorKind.UNSPECIFIED), "report_usage.estimator: a known estimator is required (TokenCalibration.estimator), got 0"],
      [report("m".repeat(257), 10n, 10n), "report_usage.model has 257 bytes, at most 256 are allowed"],
      [report("m\ud800", 10n, 10n), "report_usage.model has a lone UTF-16 surrogate at index 1: it is not valid Unicode and cannot be stored (it would encode like other ids)"],
    ];
    for (const [request, message] of cases) {
      const error = await rejection(() => calibration.report("", request));
      expect(error.code).toBe(Code.InvalidArgument);
      expect(error.rawMessage).toBe(message);
    }
    expect(calibration.size).toBe(0);
    expect(await store.readCalibration({ tenant: "", ...key("m") }, 1_000_000, bounds)).toBeUndefined();
  });

  it("reads a key from the store once per refresh interval, one read for every compile waiting on it", async () => {
    const store = new ObservedCalibrationStore();
    const clock = { ms: 1_000_000 };
    const writer = calibrationOn(store, { clock });
    const reader = calibrationOn(store, { clock, refreshMs: 1_000 });
    await writer.report("", report("m", 100n, 150n));
    store.holding = true;
    const waiting = [reader.correction("", key("m")), reader.correction("", key("m")), reader.correction("", key("m"))];
    expect(waiting.every((answer) => answer instanceof Promise)).toBe(true);
    store.release();
    expect((await Promise.all(waiting)).map((correction) => correction.factor)).toEqual([1.5, 1.5, 1.5]);
    expect(store.reads).toBe(1);
    // Another sidecar's report is not seen until the interval has passed...
    await writer.report("", report("m", 100n, 250n));
    clock.ms += 999;
    expect(reader.correction("", key("m"))).toMatchObject({ factor: 1.5 });
    expect(store.reads).toBe(1);
    // ...then the next compile reads it.
    clock.ms += 1;
    expect(await reader.correction("", key("m"))).toMatchObject({ factor: 2, reports: 2 });
    expect(store.reads).toBe(2);
    // A report here updates the cached copy without a read.
    await reader.report("", report("m", 100n, 250n));
    expect(reader.correction("", key("m"))).toMatchObject({ reports: 3 });
    expect(store.reads).toBe(2);
  });

  it("keeps the last known correction, or 1, marked with the store's error when a read fails, and reads again an interval later", async () => {
    const store = new ObservedCalibrationStore();
    const clock = { ms: 1_000_000 };
    const calibration = calibrationOn(store, { clock });
    await calibration.report("", report("m", 100n, 150n));
    store.failing = "redis store unavailable while reading a token calibration";
    clock.ms += 1_000;
    const failed = await calibration.correction("", key("m"));
    expect(failed).toEqual({ factor: 1.5, reports: 1, meanAbsoluteRelativeError: 50 / 150, storeReadError: "reading the correction from the store failed: redis store unavailable while reading a token calibration" });
    expect(await calibration.correction("", key("other"))).toMatchObject({ factor: 1, reports: 0, storeReadError: expect.stringContaining("unavailable") });
    // Not retried on every compile: the marked copy is used for the interval.
    expect(calibration.correction("", key("m"))).toBe(failed);
    expect(store.reads).toBe(2);
    store.failing = undefined;
    clock.ms += 1_000;
    expect(await calibration.correction("", key("m"))).toEqual({ factor: 1.5, reports: 1, meanAbsoluteRelativeError: 50 / 150 });
    expect(store.reads).toBe(3);
  });

  it("goes on with the last known correction when the store is slower than the read wait, and caches the read when it answers", async () => {
    const store = new ObservedCalibrationStore();
    const clock = { ms: 1_000_000 };
    const calibration = new UsageCalibration({ store, maxKeys: 4, bounds, refreshMs: 1_000, readWaitMs: 5, now: () => clock.ms });
    await calibration.report("", report("m", 100n, 150n));
    // Another sidecar learns more meanwhile.
    await calibrationOn(store, { clock }).report("", report("m", 100n, 250n));
    clock.ms += 1_000;
    store.holding = true;
    const slow = await calibration.correction("", key("m"));
    expect(slow).toMatchObject({ factor: 1.5, reports: 1, storeReadError: "the store did not answer the read of the correction within 5 ms; the last one known is used meanwhile" });
    // A second compile meanwhile waits on the same read, bounded the same way.
    expect(await calibration.correction("", key("m"))).toMatchObject({ factor: 1.5, storeReadError: expect.stringContaining("did not answer") });
    expect(store.reads).toBe(1);
    store.release();
    await expect.poll(() => calibration.correction("", key("m"))).toEqual({ factor: 2, reports: 2, meanAbsoluteRelativeError: expect.any(Number) });
    expect(store.reads).toBe(1);
  });

  it("does not let a read that finishes after a report here undo the report", async () => {
    const store = new ObservedCalibrationStore();
    const calibration = calibrationOn(store);
    store.holding = true;
    const reading = calibration.correction("", key("m"));
    const reported = await calibration.report("", report("m", 100n, 200n));
    store.release();
    expect(await reading).toMatchObject({ factor: 2, reports: 1 });
    expect(reported.reports).toBe(1n);
    expect(calibration.correction("", key("m"))).toMatchObject({ factor: 2, reports: 1 });
  });

  it("answers UNAVAILABLE for a report the store cannot take, learning nothing", async () => {
    const store = new MemoryConversationStore();
    store.reportCalibration = async () => {
      throw new ConnectError("redis store unavailable while reporting usage", Code.Unavailable);
    };
    const calibration = calibrationOn(store);
    const error = await rejection(() => calibration.report("", report("m", 100n, 200n)));
    expect(error.code).toBe(Code.Unavailable);
    expect(calibration.size).toBe(0);
  });

  it("corrects a stored conversation's compile, with the history's head left out by the corrected limit", async () => {
    const store = new MemoryConversationStore();
    const messages = Array.from({ length: 40 }, (_, index) => textMessage(`m${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, `message ${index}`));
    await store.commit("c", undefined, [appendHistory(...messages)], "");
    const calibration = calibrationOn(store, { maxKeys: 8 });
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
    expect(before.calibration).toMatchObject({ correction: 1, reports: 0n, estimatedTokens: 100n, storeReadError: "" });
    // The provider counted half the estimate: 100 / 0.5 = 200 estimated tokens now fit.
    await calibration.report("", report("m", before.calibration!.estimatedTokens, 50n, Provider.ANTHROPIC_MESSAGES, before.calibration!.estimator));
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
