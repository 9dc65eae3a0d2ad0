import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CompiledPayloadSchema, CompileRequestSchema, CompileResultPart, CompileResultSchema, EstimatorKind, type CompileRequest, type CompileResult } from "#gen/contextd/v1/compile_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema } from "#gen/contextd/v1/state_pb";
import { Compiler } from "../../src/application/compiler.js";
import { RecentCompiles } from "../../src/application/recent-compiles.js";
import { compile } from "../../src/core/compile/compile.js";
import { TokenCountCache } from "../../src/core/tokens/token-count-cache.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { testContext } from "../core/compile-context.js";
import { appendHistory, textMessage } from "../store/fixtures.js";

const history = Array.from({ length: 40 }, (_, index) => textMessage(`m${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, `message ${index} `.repeat(20)));
const openAiChat = { provider: Provider.OPENAI_CHAT, model: "gpt-4o" };

async function storeWith(conversationId: string): Promise<MemoryConversationStore> {
  const store = new MemoryConversationStore();
  await store.commit(conversationId, undefined, [appendHistory(...history)], "");
  return store;
}

function compiler(store: MemoryConversationStore, compileMemory?: RecentCompiles): Compiler {
  return new Compiler({ store, tokenCounts: new TokenCountCache(), compileMemory });
}

/** A compile of conversation "c" with a 600-token budget, and `init` on top (a plain init object). */
function request(init: Exclude<MessageInitShape<typeof CompileRequestSchema>, CompileRequest>) {
  return create(CompileRequestSchema, { conversationId: "c", budget: { maxTokens: 600n, estimator: { kind: EstimatorKind.CHAR_FALLBACK } }, ...init });
}

/** The answer's encoding without `payload`, projections' `messages` and the stage timings (durations differ per run). */
function withoutPrompt(result: CompileResult): Uint8Array {
  return toBinary(CompileResultSchema, {
    ...result,
    payload: undefined,
    projections: result.projections.map((projection) => ({ ...projection, messages: [] })),
    stageTimings: [],
  });
}

const payloadBytes = (result: CompileResult) => toBinary(CompiledPayloadSchema, result.payload!);

describe("Compiler: a rendered compile sends its prompt once (CompileResultPart.PAYLOAD)", () => {
  it("leaves the payload out beside a rendered body, and sends it with PAYLOAD byte for byte as the engine built it", async () => {
    const store = await storeWith("c");
    const rendered = request({ render: openAiChat });
    const lean = await compiler(store).compileAndCommit(rendered, { observer: () => {} });
    expect(lean.payload).toBeUndefined();
    expect(lean.rendered!.json.length).toBeGreaterThan(0);
    const withPayload = await compiler(store).compileAndCommit(request({ render: openAiChat, include: [CompileResultPart.PAYLOAD] }), { observer: () => {} });
    // What the engine builds, every part included: the payload a compile answered with before.
    const engine = await compile(rendered, testContext({ stored: await store.load("c") }));
    expect(payloadBytes(engine).length).toBeGreaterThan(1_000);
    expect(payloadBytes(withPayload)).toEqual(payloadBytes(engine));
    // Everything derived from the payload is the same with or without it in the answer.
    expect(withoutPrompt(withPayload)).toEqual(withoutPrompt(lean));
    expect(lean.usage!.total).toBe(engine.usage!.total);
    expect(lean.prefixFingerprint).toBe(engine.prefixFingerprint);
    expect(lean.budgetDroppedMessages).toBeGreaterThan(0n);
  });

  it("always sends the payload without a render, or with render.provider UNSPECIFIED", async () => {
    const store = await storeWith("c");
    for (const render of [undefined, { provider: Provider.UNSPECIFIED, model: "m" }]) {
      const lean = await compiler(store).compileAndCommit(request({ render }), { observer: () => {} });
      const asked = await compiler(store).compileAndCommit(request({ render, include: [CompileResultPart.PAYLOAD] }), { observer: () => {} });
      expect(lean.rendered).toBeUndefined();
      expect(lean.payload!.history.map((message) => message.id)).toEqual(history.slice(-lean.payload!.history.length).map((message) => message.id));
      expect(payloadBytes(lean)).toEqual(payloadBytes(asked));
      expect(withoutPrompt(lean)).toEqual(withoutPrompt(asked));
    }
  });

  it("leaves out the messages of a target with its own render, not those of one without, nor a view's text", async () => {
    const store = await storeWith("c");
    const targets = [
      { name: "rendered", budget: { maxTokens: 300n }, render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-sonnet-4-5" } },
      { name: "typed", budget: { maxTokens: 300n } },
      { name: "view", view: "flat_classifier" },
    ];
    const lean = await compiler(store).compileAndCommit(request({ render: openAiChat, targets }), { observer: () => {} });
    const asked = await compiler(store).compileAndCommit(request({ render: openAiChat, targets, include: [CompileResultPart.PAYLOAD] }), { observer: () => {} });
    const [rendered, typed, view] = lean.projections;
    expect(rendered!.messages).toEqual([]);
    expect(rendered!.rendered!.json.length).toBeGreaterThan(0);
    expect(asked.projections[0]!.messages.length).toBeGreaterThan(0);
    expect(typed!.messages).toEqual(asked.projections[1]!.messages);
    expect(typed!.messages.length).toBeGreaterThan(0);
    expect(view!.text).toBe(asked.projections[2]!.text);
    expect(view!.text.length).toBeGreaterThan(0);
    expect(withoutPrompt(lean)).toEqual(withoutPrompt(asked));
  });

  it("gives the same cache impact whether the payload is sent or not", async () => {
    const impacts: CompileResult["cacheImpact"][][] = [];
    for (const include of [[], [CompileResultPart.PAYLOAD]]) {
      const store = await storeWith("c");
      const onePerRun = compiler(store, new RecentCompiles(1 << 20));
      const first = await onePerRun.compileAndCommit(request({ render: openAiChat, include }), { observer: () => {} });
      await store.commit("c", first.version, [appendHistory(textMessage("next", Role.USER, "one more question"))], "");
      const second = await onePerRun.compileAndCommit(request({ render: openAiChat, include }), { observer: () => {} });
      impacts.push([first.cacheImpact, second.cacheImpact]);
    }
    expect(impacts[0]![1]!.unchangedPrefixTokens).toBeGreaterThan(0n);
    expect(impacts[0]).toEqual(impacts[1]);
  });

  it("commits the same state from a compile-commit whether the payload is sent or not", async () => {
    const states = [];
    for (const include of [[], [CompileResultPart.PAYLOAD]]) {
      const store = await storeWith("c");
      const result = await compiler(store).compileAndCommit(
        request({ render: openAiChat, include, currentTurn: { raw: textMessage("turn", Role.USER, "what now?") }, commit: { expectedVersion: 1n } }),
        { observer: () => {} },
      );
      expect(result.committedVersion).toBe(2n);
      expect(result.payload === undefined).toBe(include.length === 0);
      states.push(toBinary(ConversationStateSchema, await store.load("c")));
    }
    expect(states[0]).toEqual(states[1]);
    expect(states[0]!.length).toBeGreaterThan(toBinary(ConversationStateSchema, create(ConversationStateSchema, { history })).length);
  });
});
