import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import {
  BudgetStrategy,
  CompileRequestSchema,
  EstimatorKind,
  HistoryStart,
  TransformationAction,
  TransformationReason,
  type CompileRequest,
} from "#gen/contextd/v1/compile_pb";
import { SummarizeResponseSchema } from "#gen/contextd/v1/context_service_pb";
import { Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { compile } from "../../src/core/compile/compile.js";
import { testContext } from "./compile-context.js";
import { assistant, call, message, result, toolRound, user } from "./messages.js";

type Init = Parameters<typeof create<typeof CompileRequestSchema>>[1];
const request = (init: Init): CompileRequest => create(CompileRequestSchema, init);
const ten = { kind: EstimatorKind.FIXED, fixedPerMessage: 10n };
const ids = (messages: readonly Message[]) => messages.map((m) => m.id);

/** Question i, answer i, for i < pairs: q0 a0 q1 a1 ... */
const exchange = (pairs: number) => Array.from({ length: pairs }, (_, i) => [user(`q${i}`, `question ${i}`), assistant(`a${i}`, `Answer ${i}`)]).flat();

async function failure(promise: Promise<unknown>): Promise<ConnectError> {
  const error = await promise.then(() => undefined, (thrown: unknown) => thrown);
  expect(error).toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

describe("history alignment after trimming", () => {
  it("DROP_HEAD never leaves an answer without its question at the head, and says what it dropped", async () => {
    // 10 messages of 10 tokens, 40 available after the current turn: the budget alone keeps a7..a9.
    const result = await compile(
      request({ history: { messages: exchange(5) }, currentTurn: { raw: user("now", "next") }, budget: { maxTokens: 50n, estimator: ten } }),
      testContext(),
    );
    expect(ids(result.payload!.history)).toEqual(["q3", "a3", "q4", "a4", "now"]);
    const aligned = await compile(
      request({ history: { messages: exchange(5) }, currentTurn: { raw: user("now", "next") }, budget: { maxTokens: 40n, estimator: ten } }),
      testContext(),
    );
    expect(ids(aligned.payload!.history)).toEqual(["q4", "a4", "now"]);
    expect(aligned.transformations["a3"]).toMatchObject({ action: TransformationAction.DROPPED, reason: TransformationReason.HISTORY_ALIGNMENT });
    expect(aligned.transformations["q3"]).toMatchObject({ action: TransformationAction.DROPPED, reason: TransformationReason.TOKEN_BUDGET_EXCEEDED });
    const warning = aligned.warnings.find((w) => w.code === "history_aligned")!;
    expect(warning.message).toContain('1 more message(s) were dropped ("a3"), so it continues at message "q4"');
    expect(aligned.persistence!.history.map((m) => m.id)).toEqual(["q4", "a4", "now"]);
  });

  it("drops a whole tool round left at the head, and keeps it with HISTORY_START_ANY", async () => {
    const messages = [user("q0", "weather?"), message(Role.ASSISTANT, "c0", call("k0")), message(Role.TOOL, "r0", result("k0", "rain")), assistant("a0", "Rain."), user("q1", "thanks")];
    // 40 tokens are left after the current turn: the budget drops q0 only and keeps c0 r0 a0 q1.
    const budget = { maxTokens: 50n, estimator: ten };
    const aligned = await compile(request({ history: { messages }, currentTurn: { raw: user("now", "bye") }, budget }), testContext());
    expect(ids(aligned.payload!.history)).toEqual(["q1", "now"]);
    expect(aligned.warnings.find((w) => w.code === "history_aligned")!.message).toContain('("c0", "r0", "a0")');
    const any = await compile(request({ history: { messages }, currentTurn: { raw: user("now", "bye") }, budget: { ...budget, historyStart: HistoryStart.ANY } }), testContext());
    expect(ids(any.payload!.history)).toEqual(["c0", "r0", "a0", "q1", "now"]);
    expect(any.warnings.map((w) => w.code)).not.toContain("history_aligned");
  });

  it("aligns DROP_TAIL and SUMMARIZE too: a summary covers up to the next user turn", async () => {
    const tail = await compile(
      request({ history: { messages: [assistant("greeting", "Hi, I am the bot."), ...exchange(3)] }, currentTurn: { raw: user("now", "x") }, budget: { maxTokens: 40n, strategy: BudgetStrategy.DROP_TAIL, estimator: ten } }),
      testContext(),
    );
    expect(ids(tail.payload!.history)[0]).toBe("q0");
    expect(tail.transformations["greeting"]!.reason).toBe(TransformationReason.HISTORY_ALIGNMENT);

    let covered: string[] = [];
    const summarizing = testContext({
      summarize: async (summarizeRequest) => {
        covered = ids(summarizeRequest.messages);
        return create(SummarizeResponseSchema, { requestId: summarizeRequest.requestId, summary: assistant("", "they talked") });
      },
    });
    const summarized = await compile(request({ history: { messages: exchange(5) }, currentTurn: { raw: user("now", "x") }, budget: { maxTokens: 60n, strategy: BudgetStrategy.SUMMARIZE, estimator: ten } }), summarizing);
    const history = summarized.payload!.history;
    expect(history[0]!.provenance?.kind.case).toBe("summary");
    expect(history[1]!.role).toBe(Role.USER);
    expect(covered.at(-1)!.startsWith("a")).toBe(true);
  });

  it("leaves an untrimmed history as given, and counts min_messages after alignment", async () => {
    const greeting = [assistant("hello", "Hi, I am the bot."), ...exchange(2)];
    const untouched = await compile(request({ history: { messages: greeting }, currentTurn: { raw: user("now", "x") }, budget: { maxTokens: 100n, estimator: ten } }), testContext());
    expect(ids(untouched.payload!.history)).toEqual(["hello", "q0", "a0", "q1", "a1", "now"]);
    expect(untouched.warnings).toEqual([]);
    // The budget keeps a3 q4 a4 (3 messages); alignment leaves q4 a4 (2), under min_messages 3.
    const base = { history: { messages: exchange(5) }, currentTurn: { raw: user("now", "x") } };
    const fewer = await compile(request({ ...base, budget: { maxTokens: 40n, estimator: ten, minMessages: 3n } }), testContext());
    expect(ids(fewer.payload!.history)).toEqual(["now"]);
    const enough = await compile(request({ ...base, budget: { maxTokens: 40n, estimator: ten, minMessages: 2n } }), testContext());
    expect(ids(enough.payload!.history)).toEqual(["q4", "a4", "now"]);
  });

  it("aligns what a summary longer than asked for leaves after it", async () => {
    // One token per character: six 10-token messages, 40 tokens left after the current turn.
    const tens = (prefix: string) => "x".repeat(10 - prefix.length) + prefix;
    const messages = exchange(3).map((m) => message(m.role, m.id, tens(m.id)));
    const context = testContext({
      summarize: async (summarizeRequest) => create(SummarizeResponseSchema, { requestId: summarizeRequest.requestId, summary: assistant("", "s".repeat(25)) }),
    });
    const result = await compile(
      request({ history: { messages }, currentTurn: { raw: user("now", tens("now")) }, budget: { maxTokens: 50n, strategy: BudgetStrategy.SUMMARIZE, estimator: { kind: EstimatorKind.CHAR_FALLBACK, charsPerToken: 1 } } }),
      context,
    );
    // Summarised q0..a1; the 25-token summary pushes out q2, and a2 then goes for alignment.
    expect(result.payload!.history.map((m) => m.provenance?.kind.case ?? m.id)).toEqual(["summary", "now"]);
    expect(result.transformations["q2"]!.reason).toBe(TransformationReason.TOKEN_BUDGET_EXCEEDED);
    expect(result.transformations["a2"]!.reason).toBe(TransformationReason.HISTORY_ALIGNMENT);
    expect(result.warnings.map((w) => w.code)).toEqual(["summary_over_target", "history_aligned"]);
  });

  it("never drops a protected unit for alignment, and warns that history starts with it", async () => {
    // q0 a0 q1 a1 go for the budget; the retained note then heads history.
    const messages = [...exchange(2), assistant("pinned", "Remember: metric units."), user("q9", "late question"), assistant("a9", "late answer")];
    const result = await compile(request({ history: { messages }, currentTurn: { raw: user("now", "x") }, budget: { maxTokens: 40n, estimator: ten, retainedIds: ["pinned"] } }), testContext());
    expect(ids(result.payload!.history)).toEqual(["pinned", "q9", "a9", "now"]);
    expect(result.warnings.find((w) => w.code === "history_unaligned")!.message).toContain('"pinned" (ASSISTANT)');
  });

  it("renders bodies that start on a user turn for every provider after trimming", async () => {
    for (const provider of [Provider.OPENAI_CHAT, Provider.OPENAI_RESPONSES, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI]) {
      const result = await compile(
        request({ history: { messages: exchange(5) }, currentTurn: { raw: user("now", "next") }, budget: { maxTokens: 40n, estimator: ten }, render: { provider, model: "m" } }),
        testContext(),
      );
      const body = JSON.parse(new TextDecoder().decode(result.rendered!.json)) as { messages?: { role: string }[]; contents?: { role: string }[]; input?: { role?: string }[] };
      const first = (body.messages ?? body.contents ?? body.input)![0]!;
      expect(first.role, Provider[provider]).toBe("user");
    }
  });
});

describe("the latest user message of history", () => {
  const big = user("big", "x".repeat(400));

  it("is protected without a current turn, with an error that gives the numbers when it alone does not fit", async () => {
    const kept = await compile(request({ history: { messages: [...exchange(3), user("last", "the question")] }, budget: { maxTokens: 20n, estimator: ten } }), testContext());
    expect(ids(kept.payload!.history)).toEqual(["last"]);
    const error = await failure(
      compile(request({ history: { messages: [...exchange(2), big] }, budget: { maxTokens: 50n, estimator: { kind: EstimatorKind.CHAR_FALLBACK } } }), testContext()),
    );
    expect(error.code).toBe(Code.ResourceExhausted);
    expect(error.rawMessage).toMatch(/^budget exceeded: the latest user message "big" \(history\[4\]\) needs 100 tokens and is protected like the current turn \(set budget\.trim_latest_user_message to let the budget drop it\); 50 are left after 0 reserved \(system 0,.*\), the limit is 50$/);
  });

  it("is trimmed like any other with trim_latest_user_message, and is not special with a current turn", async () => {
    const trimmed = await compile(request({ history: { messages: [...exchange(2), big] }, budget: { maxTokens: 50n, estimator: { kind: EstimatorKind.CHAR_FALLBACK }, trimLatestUserMessage: true } }), testContext());
    expect(trimmed.transformations["big"]!.action).toBe(TransformationAction.DROPPED);
    const withTurn = await compile(request({ history: { messages: exchange(3) }, currentTurn: { raw: user("now", "x") }, budget: { maxTokens: 10n, estimator: ten } }), testContext());
    expect(ids(withTurn.payload!.history)).toEqual(["now"]);
  });
});

describe("targets", () => {
  it("inherit the main budget unless they set their own", async () => {
    const base = { history: { messages: exchange(5) }, currentTurn: { raw: user("now", "x") }, budget: { maxTokens: 40n, estimator: ten } };
    const result = await compile(request({ ...base, targets: [{ name: "inherits", segments: [] }, { name: "own", budget: { maxTokens: 1000n, estimator: ten } }] }), testContext());
    const [inherits, own] = result.projections;
    expect(inherits!.usage!.limit).toBe(40n);
    expect(inherits!.usage!.total).toBeLessThanOrEqual(40n);
    expect(ids(inherits!.messages)[0]!.startsWith("q")).toBe(true);
    expect(own!.usage!.limit).toBe(1000n);
    expect(own!.messages).toHaveLength(10);
  });

  it("trim an inherited SUMMARIZE budget with DROP_HEAD instead of asking for a second summary", async () => {
    let asked = 0;
    const context = testContext({
      summarize: async (summarizeRequest) => {
        asked++;
        return create(SummarizeResponseSchema, { requestId: summarizeRequest.requestId, summary: assistant("", "earlier") });
      },
    });
    const result = await compile(request({ history: { messages: exchange(5) }, budget: { maxTokens: 40n, strategy: BudgetStrategy.SUMMARIZE, estimator: ten }, targets: [{ name: "t" }] }), context);
    expect(asked).toBe(1);
    expect(result.projections[0]!.usage!.total).toBeLessThanOrEqual(40n);
  });
});

describe("one unit larger than the room history has", () => {
  // q0 a0 q1 a1 q2 a2 (60 tokens), then a tool round of 1 call message + 12 results (130 tokens),
  // then the current turn: 100 tokens leave 90 for history, less than the round alone.
  const history = [...exchange(3), user("q3", "look it up"), ...toolRound("big", Array.from({ length: 12 }, (_, i) => `c${i}`))];
  const compileWith = (maxTokens: bigint) =>
    compile(request({ history: { messages: history }, currentTurn: { raw: user("now", "next") }, budget: { maxTokens, estimator: ten } }), testContext());

  it("drops everything older with it, and the warning says so and what would keep it", async () => {
    const result = await compileWith(100n);
    expect(ids(result.payload!.history)).toEqual(["now"]);
    const warning = result.warnings.find((w) => w.code === "oversized_unit");
    expect(warning?.message).toMatch(/history unit at message "big-a" \(13 message\(s\)\) needs 130 tokens, more than the 90 history may use/);
    expect(warning?.message).toContain("dropped it and the 7 older message(s) with it");
    expect(warning?.message).toContain("tool_result_clearing");
  });

  it("says nothing when the trim only drops units that could have fitted", async () => {
    const result = await compileWith(160n);
    expect(result.budgetDroppedMessages).toBeGreaterThan(0);
    expect(result.warnings.map((w) => w.code)).not.toContain("oversized_unit");
  });
});
