import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { BudgetStrategy, CompileRequestSchema, EstimatorKind, TransformationReason } from "#gen/contextd/v1/compile_pb";
import { SummarizeResponseSchema, type SummarizeRequest } from "#gen/contextd/v1/context_service_pb";
import { PartSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, Segment } from "#gen/contextd/v1/state_pb";
import { compile } from "../../src/core/compile/compile.js";
import { summaryCompaction } from "../../src/core/compile/summary-compaction.js";
import { applyDeltas } from "../../src/core/deltas/apply-deltas.js";
import { testContext } from "./compile-context.js";
import { assistant, user } from "./messages.js";

const ten = { kind: EstimatorKind.FIXED, fixedPerMessage: 10n };
const ids = (messages: readonly Message[]) => messages.map((message) => message.id);
const history = (count: number) => Array.from({ length: count }, (_, i) => (i % 2 === 0 ? user(`h${i}`, `q${i}`) : assistant(`h${i}`, `a${i}`)));

/** A context whose summarizer records what it was asked and answers "summary". */
function summarizing() {
  const asked: SummarizeRequest[] = [];
  const context = testContext({
    summarize: async (request) => {
      asked.push(request);
      return create(SummarizeResponseSchema, { requestId: request.requestId, summary: assistant("", "summary") });
    },
  });
  return { asked, context };
}

describe("summaries", () => {
  it("summarise only the prefix before a protected unit; the rest is trimmed as DROP_HEAD", async () => {
    const { asked, context } = summarizing();
    const request = create(CompileRequestSchema, {
      history: { messages: history(8) },
      budget: { maxTokens: 40n, strategy: BudgetStrategy.SUMMARIZE, estimator: ten, retainedIds: ["h2"] },
    });
    const result = await compile(request, context);
    // 40 available, 10 kept free: 30 may remain. h0 and h1 are all a summary can stand for.
    expect(ids(asked[0]!.messages)).toEqual(["h0", "h1"]);
    expect(result.warnings.map((warning) => warning.code)).toEqual(["summary_over_target"]);
    expect(ids(result.payload!.history).slice(1)).toEqual(["h2", "h6", "h7"]);
    expect(result.transformations["h3"]!.reason).toBe(TransformationReason.TOKEN_BUDGET_EXCEEDED);
  });

  it("never summarises a message holding a provider compaction part (its encrypted content would leave the store)", async () => {
    const compacted = (): Message[] => {
      const messages = history(8);
      const block = create(PartSchema, { kind: { case: "providerCompaction", value: { provider: Provider.ANTHROPIC_MESSAGES, summary: "earlier work", encryptedContent: "ZW5j" } } });
      messages[3] = { ...messages[3]!, parts: [block, ...messages[3]!.parts] };
      return messages;
    };
    const holdsCompaction = (message: Message) => message.parts.some((part) => part.kind.case === "providerCompaction");
    // Provider-neutral: a summary may stand for the messages before the block, never the block,
    // and the compact delta that stores it leaves the block in the stored history.
    const neutral = summarizing();
    const stored = create(ConversationStateSchema, { conversationId: "c", version: 3n, history: compacted() });
    const budget = { maxTokens: 40n, strategy: BudgetStrategy.SUMMARIZE, estimator: ten, trimLatestUserMessage: true };
    const before = await compile(create(CompileRequestSchema, { conversationId: "c", budget }), { ...neutral.context, stored });
    expect(ids(neutral.asked[0]!.messages)).toEqual(["h0", "h1", "h2"]);
    const delta = summaryCompaction(before, [])!;
    expect(delta.operation).toMatchObject({ case: "compact", value: { throughMessageId: "h2" } });
    expect(applyDeltas(stored, [delta], { newMessageId: () => "unused" }).history.filter(holdsCompaction).map((message) => message.id)).toEqual(["h3"]);
    // For the provider that made it, the cut puts the block at the head: nothing is summarised and
    // the strategy trims the prompt instead (no compact delta, the store keeps everything).
    const anthropic = summarizing();
    const cut = await compile(create(CompileRequestSchema, { conversationId: "c", render: { provider: Provider.ANTHROPIC_MESSAGES, model: "m" }, budget }), { ...anthropic.context, stored });
    expect(anthropic.asked).toEqual([]);
    expect(Object.values(cut.transformations).map((record) => record.reason)).not.toContain(TransformationReason.SUMMARIZED);
    expect(summaryCompaction(cut, [])).toBeUndefined();
  });

  it("trims by the strategy when the head itself is protected (nothing to summarise)", async () => {
    const { asked, context } = summarizing();
    const request = create(CompileRequestSchema, {
      history: { messages: history(6) },
      budget: { maxTokens: 30n, strategy: BudgetStrategy.SUMMARIZE, estimator: ten, retainedIds: ["h0"] },
    });
    const result = await compile(request, context);
    expect(asked).toEqual([]);
    expect(ids(result.payload!.history)).toEqual(["h0", "h4", "h5"]);
  });

  it("turns a compile's summary into the compact delta that stores it, facts included", async () => {
    const { context } = summarizing();
    const stored = create(ConversationStateSchema, { conversationId: "c", version: 3n, history: history(6) });
    const result = await compile(create(CompileRequestSchema, { conversationId: "c", budget: { maxTokens: 30n, strategy: BudgetStrategy.SUMMARIZE, estimator: ten } }), { ...context, stored });
    const delta = summaryCompaction(result, ["likes tea"])!;
    expect(delta.operation).toMatchObject({ case: "compact", value: { throughMessageId: "h3", remember: ["likes tea"] } });
    const next = applyDeltas(stored, [delta], { newMessageId: () => "unused" });
    expect(next.history).toEqual(result.payload!.history);
    expect(next.experiences.map((experience) => experience.text)).toEqual(["likes tea"]);
    expect(summaryCompaction(await compile(create(CompileRequestSchema, { conversationId: "c" }), { ...context, stored }), [])).toBeUndefined();
  });

  it("refuses to store a summary that does not stand for a stored prefix", async () => {
    const { context } = summarizing();
    // A formatter joining history into one message hides which stored messages were summarised.
    const long = history(6).map((message, index) => (index % 2 === 0 ? user(message.id, "x".repeat(40)) : assistant(message.id, "y".repeat(40))));
    const request = create(CompileRequestSchema, {
      history: { messages: long },
      formatters: [{ segment: Segment.HISTORY, kind: { case: "join", value: { separator: "\n", role: Role.USER, id: "joined" } } }],
      budget: { maxTokens: 40n, strategy: BudgetStrategy.SUMMARIZE, estimator: { kind: EstimatorKind.CHAR_FALLBACK }, trimLatestUserMessage: true },
    });
    const result = await compile(request, context);
    expect(result.transformations["joined"]!.reason).toBe(TransformationReason.SUMMARIZED);
    const error = (() => {
      try {
        summaryCompaction(result, []);
      } catch (thrown) {
        return thrown;
      }
    })();
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.FailedPrecondition);
  });
});
