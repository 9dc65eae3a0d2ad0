import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import type { CompiledPrefix, CompileMemory } from "../../src/core/compile/cache-impact.js";
import { compile } from "../../src/core/compile/compile.js";
import { testContext } from "./compile-context.js";
import { message, system, user } from "./messages.js";

/** The simplest memory: every conversation's last compile, unbounded (the server's is `RecentCompiles`). */
function mapMemory(): CompileMemory {
  const last = new Map<string, CompiledPrefix>();
  return { previous: (id) => last.get(id), remember: (id, prefix) => void last.set(id, prefix) };
}

const tenPerMessage = { kind: EstimatorKind.FIXED, fixedPerMessage: 10n };
const turn = (index: number): Message[] => [user(`u${index}`, `question ${index}`), message(Role.ASSISTANT, `a${index}`, `answer ${index}`)];

describe("cache impact against the previous compile of the conversation", () => {
  it("counts the unchanged prefix and what is written again, and sees a moved head", async () => {
    const memory = mapMemory();
    const run = (history: Message[], maxTokens = 0n) =>
      compile(
        create(CompileRequestSchema, { conversationId: "c1", system: { messages: [system("s", "rules")] }, history: { messages: history }, budget: { maxTokens, estimator: tenPerMessage } }),
        testContext({ compileMemory: memory }),
      );
    const first = await run(turn(0));
    expect(first.cacheImpact).toMatchObject({ previousVersion: 0n, unchangedPrefixTokens: 0n, rewrittenTokens: 30n, unchangedPrefixMessages: 0n });
    const second = await run([...turn(0), ...turn(1)]);
    // system + the first turn are as before; the new turn is written.
    expect(second.cacheImpact).toMatchObject({ unchangedPrefixTokens: 30n, rewrittenTokens: 20n, unchangedPrefixMessages: 3n });
    // A budget that drops the first turn moves everything after the system prompt.
    const trimmed = await run([...turn(0), ...turn(1), ...turn(2)], 40n);
    expect(trimmed.cacheImpact).toMatchObject({ unchangedPrefixTokens: 10n, unchangedPrefixMessages: 1n });
    expect(trimmed.cacheImpact!.rewrittenTokens).toBe(trimmed.usage!.total - 10n);
  });

  it("compares with the previous compile for the same provider and model, not another model's compile in between", async () => {
    const memory = mapMemory();
    const run = (history: Message[], provider: Provider, model: string) =>
      compile(
        create(CompileRequestSchema, { conversationId: "c2", history: { messages: history }, budget: { estimator: tenPerMessage }, render: { provider, model } }),
        testContext({ compileMemory: memory }),
      );
    await run(turn(0), Provider.ANTHROPIC_MESSAGES, "claude-sonnet-4-5");
    // An inspector or a side model compiles the same conversation for another provider or model.
    expect((await run(turn(0), Provider.OPENAI_CHAT, "gpt-4o")).cacheImpact!.previousVersion).toBe(0n);
    expect((await run(turn(0), Provider.ANTHROPIC_MESSAGES, "claude-haiku-4-5")).cacheImpact!.unchangedPrefixTokens).toBe(0n);
    const again = await run([...turn(0), ...turn(1)], Provider.ANTHROPIC_MESSAGES, "claude-sonnet-4-5");
    expect(again.cacheImpact).toMatchObject({ unchangedPrefixTokens: 20n, rewrittenTokens: 20n, unchangedPrefixMessages: 2n });
  });

  it("is absent for a stateless compile and without a memory", async () => {
    const memory = mapMemory();
    expect((await compile(create(CompileRequestSchema, { history: { messages: turn(0) } }), testContext({ compileMemory: memory }))).cacheImpact).toBeUndefined();
    expect((await compile(create(CompileRequestSchema, { conversationId: "c", history: { messages: turn(0) } }), testContext())).cacheImpact).toBeUndefined();
  });
});
