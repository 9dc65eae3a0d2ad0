import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, EstimatorKind, EstimatorSchema } from "#gen/contextd/v1/compile_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { compile } from "../../src/core/compile/compile.js";
import { createEstimator } from "../../src/core/tokens/estimator.js";
import { testContext } from "./compile-context.js";
import { user } from "./messages.js";
import { rejectsWith } from "./rejects.js";

type BudgetInit = NonNullable<Parameters<typeof create<typeof CompileRequestSchema>>[1]>["budget"];
const int64Max = 2n ** 63n - 1n;

const withBudget = (budget: BudgetInit) => create(CompileRequestSchema, { history: { messages: [user("u1", "hello")] }, budget });

// Each of these used to answer INTERNAL "internal error" (a count of Infinity or 2^63 cannot be
// encoded as int64), counted as ok in /metrics.
describe("numbers the engine cannot represent are INVALID_ARGUMENT naming the field", () => {
  const budgetCases: [string, BudgetInit, RegExp][] = [
    ["max_tokens = 2^63-1", { maxTokens: int64Max }, /^budget\.max_tokens must be from 0 to 9007199254740991, got 9223372036854775807$/],
    ["max_tokens = 2^53", { maxTokens: 2n ** 53n }, /^budget\.max_tokens must be from 0 to 9007199254740991, got 9007199254740992$/],
    ["negative max_tokens", { maxTokens: -1n }, /^budget\.max_tokens must be from 0 to 9007199254740991, got -1$/],
    ["context_window = 2^63-1", { contextWindow: int64Max }, /^budget\.context_window must be from 0/],
    ["output_reserve = 2^63-1", { contextWindow: 100n, outputReserve: int64Max }, /^budget\.output_reserve must be from 0/],
    ["min_messages = 2^63-1", { maxTokens: 100n, minMessages: int64Max }, /^budget\.min_messages must be from 0/],
  ];
  for (const [name, budget, pattern] of budgetCases) {
    it(name, async () => {
      await rejectsWith(compile(withBudget(budget), testContext()), Code.InvalidArgument, pattern);
    });
  }

  const estimatorCases: [string, Parameters<typeof create<typeof EstimatorSchema>>[1], RegExp][] = [
    ["chars_per_token = 1e-300", { charsPerToken: 1e-300 }, /^budget\.estimator\.chars_per_token must be 0 \(= 4\) or a finite number of at least 0\.001, got 1e-300$/],
    ["chars_per_token = NaN", { charsPerToken: Number.NaN }, /^budget\.estimator\.chars_per_token .* got NaN$/],
    ["chars_per_token = Infinity", { charsPerToken: Number.POSITIVE_INFINITY }, /^budget\.estimator\.chars_per_token .* got Infinity$/],
    ["chars_per_token = -1", { charsPerToken: -1 }, /^budget\.estimator\.chars_per_token .* got -1$/],
    ["fixed_per_message = 2^63-1", { kind: EstimatorKind.FIXED, fixedPerMessage: int64Max }, /^budget\.estimator\.fixed_per_message must be from 0 to 1000000000, got 9223372036854775807$/],
    ["fixed_per_part negative", { kind: EstimatorKind.FIXED, fixedPerPart: -5n }, /^budget\.estimator\.fixed_per_part must be from 0 to 1000000000, got -5$/],
    ["fixed_per_tool_call = 2^40", { kind: EstimatorKind.FIXED, fixedPerToolCall: 2n ** 40n }, /^budget\.estimator\.fixed_per_tool_call must be from 0/],
  ];
  for (const [name, estimator, pattern] of estimatorCases) {
    it(name, async () => {
      await rejectsWith(compile(withBudget({ estimator }), testContext()), Code.InvalidArgument, pattern);
      // CountTokens builds its estimator the same way, under the field name "estimator".
      await rejectsWith(createEstimator(create(EstimatorSchema, estimator), Provider.UNSPECIFIED, "estimator"), Code.InvalidArgument, /^estimator\./);
    });
  }

  it("accepts the largest values it documents", async () => {
    const tiny = await compile(withBudget({ maxTokens: 2n ** 53n - 1n, estimator: { charsPerToken: 0.001 } }), testContext());
    expect(tiny.usage).toMatchObject({ limit: 2n ** 53n - 1n, history: 5000n });
    const fixed = await compile(withBudget({ maxTokens: 2n ** 53n - 1n, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 1_000_000_000n } }), testContext());
    expect(fixed.usage).toMatchObject({ limit: 2n ** 53n - 1n, history: 1_000_000_000n });
  });
});
