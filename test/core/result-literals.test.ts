import { create, isMessage, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, EstimatorKind, UsageSchema } from "#gen/contextd/v1/compile_pb";
import { compile } from "../../src/core/compile/compile.js";
import { testContext } from "./compile-context.js";
import { assistant, system, user } from "./messages.js";

describe("compile result literals", () => {
  it("usage is what create(UsageSchema) builds from the same values: properties, order, encoding", async () => {
    const result = await compile(
      create(CompileRequestSchema, {
        system: { messages: [system("s", "rules")] },
        history: { messages: [user("u1", "one"), assistant("a1", "two"), user("u2", "three")] },
        budget: { maxTokens: 25n, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } },
      }),
      testContext(),
    );
    const usage = result.usage!;
    const { $typeName: _typeName, ...values } = usage;
    const created = create(UsageSchema, values);
    expect(isMessage(usage, UsageSchema)).toBe(true);
    expect(Object.keys(usage)).toEqual(Object.keys(created));
    expect(usage).toStrictEqual(created);
    expect(toBinary(UsageSchema, usage)).toEqual(toBinary(UsageSchema, created));
    expect(usage.historyBeforeTrim).toBe(30n);
  });
});
