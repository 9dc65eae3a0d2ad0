import { create, type MessageInitShape } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BudgetStrategy, EstimatorKind, TransformationReason, type CompileRequestSchema, type CompileResult } from "#gen/contextd/v1/compile_pb";
import {
  ContextService,
  SummaryFactKind,
  type CompileSessionResponse,
  type SummarizeRequest,
  type SummarizeResponseSchema,
} from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { Segment, type DeltaSchema } from "#gen/contextd/v1/state_pb";
import { analyzeToolRounds } from "../../../src/core/model/tool-rounds.js";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startRedis, type RedisProcess } from "../../support/redis.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

type CompileInit = MessageInitShape<typeof CompileRequestSchema>;
type SummaryAnswer = Omit<MessageInitShape<typeof SummarizeResponseSchema>, "requestId">;
type DeltaInit = MessageInitShape<typeof DeltaSchema>;

const text = (id: string, role: Role, body: string) => create(MessageSchema, { id, role, parts: [{ kind: { case: "text", value: { text: body } } }] });
const call = (id: string, callIds: string[]) =>
  create(MessageSchema, { id, role: Role.ASSISTANT, parts: callIds.map((callId) => ({ kind: { case: "toolCall" as const, value: { id: callId, name: "search", arguments: { data: `{"q":"${callId}"}` } } } })) });
const result = (id: string, callId: string) =>
  create(MessageSchema, { id, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, name: "search", payload: { text: `found ${callId}` } } } }] });
const ids = (messages: readonly Message[]) => messages.map((message) => message.id);
const ten = { kind: EstimatorKind.FIXED, fixedPerMessage: 10n };
// Summary-covered ids of a message, or [].
const coveredBy = (message: Message | undefined) => (message?.provenance?.kind.case === "summary" ? message.provenance.kind.value.coveredMessageIds : []);

// A session with a short server-side wait, so the caller that never answers fails fast.
const summarizeTimeoutMs = 1_000;

describe("CompileSession over gRPC (real sidecar on a real redis-server, grpc-js client)", () => {
  let redis: RedisProcess;
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  beforeAll(async () => {
    redis = await startRedis();
    sidecar = await startSidecar(["--redis-url", redis.url, "--summarize-timeout-ms", String(summarizeTimeoutMs)]);
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
    await redis?.stop();
  });

  const commit = async (conversationId: string, deltas: DeltaInit[]) =>
    (await client.unary(ConversationService.method.commit, { conversationId, deltas })).version;
  const state = async (conversationId: string) => (await client.unary(ConversationService.method.getState, { conversationId })).state!;
  const seed = (conversationId: string, messages: Message[]) => commit(conversationId, [{ operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages } } }]);

  /**
   * Runs one session: sends the compile, answers each summarize_request with `answer` (undefined =
   * never answer), and resolves with the result, every request asked and every event seen.
   */
  function session(request: CompileInit, answer: (asked: SummarizeRequest) => SummaryAnswer | undefined, options: grpc.CallOptions = {}) {
    const asked: SummarizeRequest[] = [];
    const received: CompileSessionResponse[] = [];
    return new Promise<{ result: CompileResult; asked: SummarizeRequest[]; received: CompileSessionResponse[] }>((resolve, reject) => {
      const stream = client.bidiStream(ContextService.method.compileSession, new grpc.Metadata(), options);
      stream.on("data", (response: CompileSessionResponse) => {
        received.push(response);
        if (response.kind.case === "summarizeRequest") {
          const summarizeRequest = response.kind.value;
          asked.push(summarizeRequest);
          const reply = answer(summarizeRequest);
          if (reply) stream.write({ kind: { case: "summarizeResponse", value: { ...reply, requestId: summarizeRequest.requestId } } } as never);
        } else if (response.kind.case === "result") {
          stream.end();
          resolve({ result: response.kind.value, asked, received });
        }
      });
      stream.on("error", reject);
      stream.write({ kind: { case: "compile", value: request } } as never);
    });
  }
  const summaryOf = (asked: SummarizeRequest, words = "they talked") => ({ summary: { role: Role.ASSISTANT, parts: [{ kind: { case: "text" as const, value: { text: `${words} (${asked.messages.length} messages)` } } }] } });

  it("puts the summary at the head, covers exactly whole units, never the open round or pending, and commits it atomically", async () => {
    const id = "session/placement";
    // h0 u, h1 a(2 parallel calls), h2 t, h3 t, h4 u, h5 a, h6 u, h7 a(open call c3)
    const history = [text("h0", Role.USER, "q0"), call("h1", ["c1", "c2"]), result("h2", "c1"), result("h3", "c2"), text("h4", Role.USER, "q1"), text("h5", Role.ASSISTANT, "a1"), text("h6", Role.USER, "q2"), call("h7", ["c3"])];
    const version = await seed(id, history);
    const { result: compiled, asked } = await session(
      {
        conversationId: id,
        // 70 tokens for history after pending's 10.
        budget: { maxTokens: 80n, strategy: BudgetStrategy.SUMMARIZE, estimator: ten },
        // The turn in progress: the result of the open call, protected and never stored.
        pending: [result("p0", "c3")],
        commit: { expectedVersion: version },
      },
      (request) => summaryOf(request),
    );
    expect(asked).toHaveLength(1);
    const [request] = asked;
    // 70 available, 17 kept free for the summary: drop from the head until 53 remain. The first
    // unit (h0) is not enough and the next is the whole round h1-h3, never a part of it.
    expect(ids(request!.messages)).toEqual(["h0", "h1", "h2", "h3"]);
    expect(request!.reason).toBe("summarize_strategy");
    expect(request!.previousSummary).toBeUndefined();
    expect(request!.targetTokens).toBe(70n - 40n);
    expect(analyzeToolRounds(request!.messages, { allowOpenTail: false }).violations).toEqual([]);

    const payload = compiled.payload!.history;
    expect(coveredBy(payload[0])).toEqual(["h0", "h1", "h2", "h3"]);
    // The open round stays at the tail of history, untouched; pending follows it.
    expect(ids(payload).slice(1)).toEqual(["h4", "h5", "h6", "h7", "p0"]);
    expect(compiled.transformations["h1"]!.reason).toBe(TransformationReason.SUMMARIZED);
    expect(compiled.committedVersion).toBe(version + 1n);

    const stored = await state(id);
    expect(stored.version).toBe(version + 1n);
    expect(ids(stored.history)).toEqual([payload[0]!.id, "h4", "h5", "h6", "h7"]);
    expect(coveredBy(stored.history[0])).toEqual(["h0", "h1", "h2", "h3"]);
    // Pending is never stored.
    expect(ids(stored.history)).not.toContain("p0");
  });

  it("rolls summaries: the next one is asked with the previous one and covers everything it covered", async () => {
    const id = "session/rolling";
    const version = await seed(id, Array.from({ length: 8 }, (_, i) => text(`m${i}`, i % 2 ? Role.ASSISTANT : Role.USER, `turn ${i}`)));
    const budget = { maxTokens: 50n, strategy: BudgetStrategy.SUMMARIZE, estimator: ten };
    const first = await session({ conversationId: id, budget, commit: { expectedVersion: version } }, (request) => ({ ...summaryOf(request), remember: ["the user is called Ada"] }));
    const firstSummary = first.result.payload!.history[0]!;
    // The budget leaves m5..m7; m5 answers m4, so the summary covers it too and m6 (a user turn) follows.
    expect(coveredBy(firstSummary)).toEqual(["m0", "m1", "m2", "m3", "m4", "m5"]);

    await commit(id, [{ operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: [text("m8", Role.USER, "more"), text("m9", Role.ASSISTANT, "and more")] } } }]);
    const current = await state(id);
    // Facts from a summarize response are remembered in the same commit and shown from then on.
    expect(current.experiences.map((experience) => experience.text)).toEqual(["the user is called Ada"]);
    const second = await session({ conversationId: id, budget, commit: { expectedVersion: current.version } }, (request) => summaryOf(request, "still talking"));
    const [request] = second.asked;
    expect(request!.previousSummary?.id).toBe(firstSummary.id);
    expect(request!.messages[0]!.id).toBe(firstSummary.id);
    // The second summary replaces the first: it covers what the first covered, never the first itself.
    const covered = ["m0", "m1", "m2", "m3", "m4", "m5", ...ids(request!.messages.slice(1))];
    expect(coveredBy(second.result.payload!.history[0])).toEqual(covered);
    const replaced = second.result.payload!.history[0]!.provenance!.kind;
    expect(replaced.case === "summary" && replaced.value.replacedSummaryIds).toEqual([firstSummary.id]);
    // The experiences block counts: it took history's room (the budget left less for it).
    expect(second.result.payload!.system.map((message) => message.id)).toEqual(["experiences"]);
    expect(second.result.usage!.reserved).toBe(10n);

    const stored = await state(id);
    expect(coveredBy(stored.history[0])).toEqual(covered);
    expect(stored.history.filter((message) => coveredBy(message).length > 0)).toHaveLength(1);
  });

  it("asks with the summary template and the evidence of the range: paths, URLs, commands, errors, tool names, ids", async () => {
    const id = "session/evidence";
    const bash = (messageId: string, callId: string, command: string) =>
      create(MessageSchema, { id: messageId, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: callId, name: "bash", arguments: { data: JSON.stringify({ command }) } } } }] });
    const failed = (messageId: string, callId: string, output: string) =>
      create(MessageSchema, { id: messageId, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, name: "bash", payload: { text: output }, isError: true } } }] });
    const version = await seed(id, [
      text("e0", Role.USER, "The build of src/server.ts fails; see https://ci.example.com/runs/77."),
      bash("e1", "k1", "npm run build"),
      failed("e2", "k1", "error TS2345: Argument of type 'string' is not assignable\nsrc/server.ts(12,5)"),
      text("e3", Role.ASSISTANT, "The fix is in commit 9c1e2f3a."),
      text("e4", Role.USER, "Thanks, now the docs."),
      text("e5", Role.ASSISTANT, "On it."),
    ]);
    const { asked, result: compiled } = await session({ conversationId: id, budget: { maxTokens: 30n, strategy: BudgetStrategy.SUMMARIZE, estimator: ten }, commit: { expectedVersion: version } }, (request) => summaryOf(request));
    expect(asked[0]!.template!.sections.map((section) => section.key)).toEqual(["goal", "decisions", "open_questions", "files", "commands", "errors"]);
    expect(asked[0]!.template!.text).toContain("## Commands\n");
    expect(asked[0]!.facts.map((fact) => [SummaryFactKind[fact.kind], fact.text, fact.messageId])).toEqual([
      ["URL", "https://ci.example.com/runs/77", "e0"],
      ["FILE_PATH", "src/server.ts", "e0"],
      ["TOOL_NAME", "bash", "e1"],
      ["COMMAND", "npm run build", "e1"],
      ["ERROR_MESSAGE", "error TS2345: Argument of type 'string' is not assignable", "e2"],
      ["ID", "9c1e2f3a", "e3"],
    ]);
    expect(asked[0]!.factsTruncated).toBe(false);
    // What the summary covered is readable from the stored state.
    expect(coveredBy((await state(id)).history[0])).toEqual(ids(asked[0]!.messages));
    expect(compiled.committedVersion).toBeGreaterThan(version);
  });

  it("auto_compact asks for a summary when the conversation exceeds the window, and says why", async () => {
    const id = "session/auto";
    const version = await seed(id, Array.from({ length: 6 }, (_, i) => text(`a${i}`, i % 2 ? Role.ASSISTANT : Role.USER, `turn ${i}`)));
    const { asked, result: compiled } = await session(
      { conversationId: id, budget: { contextWindow: 60n, outputReserve: 20n, autoCompact: true, estimator: ten }, currentTurn: { raw: text("now", Role.USER, "now") }, commit: { expectedVersion: version } },
      (request) => summaryOf(request),
    );
    expect(asked.map((request) => request.reason)).toEqual(["auto_compact"]);
    expect(ids(asked[0]!.messages)).not.toContain("now");
    expect(compiled.usage!.total).toBeLessThanOrEqual(40n);
    expect(ids(compiled.payload!.history).at(-1)).toBe("now");
    // The current turn is written back after the summary and what it did not cover.
    const stored = await state(id);
    expect(ids(stored.history).at(-1)).toBe("now");
    expect(coveredBy(stored.history[0])).toEqual(ids(asked[0]!.messages));
  });

  it("without a session SUMMARIZE and auto_compact fall back to DROP_HEAD with a warning; auto_compact off is context full", async () => {
    const history = { messages: Array.from({ length: 6 }, (_, i) => text(`f${i}`, i % 2 ? Role.ASSISTANT : Role.USER, `turn ${i}`)) };
    for (const budget of [{ maxTokens: 30n, strategy: BudgetStrategy.SUMMARIZE, estimator: ten }, { contextWindow: 50n, outputReserve: 20n, autoCompact: true, estimator: ten }]) {
      const { result: compiled } = await client.unary(ContextService.method.compile, { history, budget });
      // DROP_HEAD keeps f3..f5; f3 answers the dropped f2, so alignment drops it as well.
      expect(compiled!.warnings.map((warning) => warning.code)).toEqual(["summarize_fallback", "history_aligned"]);
      expect(ids(compiled!.payload!.history)).toEqual(["f4", "f5"]);
    }
    await expect(client.unary(ContextService.method.compile, { history, budget: { contextWindow: 50n, outputReserve: 20n, estimator: ten } })).rejects.toMatchObject({
      code: grpc.status.RESOURCE_EXHAUSTED,
      details: expect.stringMatching(/^context full: the request needs 60 tokens/),
    });
  });

  it("a caller that never answers gets DEADLINE_EXCEEDED (its own deadline or the server's wait) and nothing is persisted", async () => {
    const id = "session/silent";
    const version = await seed(id, Array.from({ length: 6 }, (_, i) => text(`s${i}`, i % 2 ? Role.ASSISTANT : Role.USER, `turn ${i}`)));
    const request = { conversationId: id, budget: { maxTokens: 30n, strategy: BudgetStrategy.SUMMARIZE, estimator: ten }, commit: { expectedVersion: version } };
    await expect(session(request, () => undefined, { deadline: Date.now() + 300 })).rejects.toMatchObject({ code: grpc.status.DEADLINE_EXCEEDED });
    // No call deadline: the server stops waiting after --summarize-timeout-ms (longer than the
    // first call's deadline, so a late commit of the first call would show below too).
    await expect(session(request, () => undefined)).rejects.toMatchObject({
      code: grpc.status.DEADLINE_EXCEEDED,
      details: expect.stringMatching(/no summarize_response .* within 1000 ms/),
    });
    const stored = await state(id);
    expect(stored.version).toBe(version);
    expect(ids(stored.history)).toEqual(["s0", "s1", "s2", "s3", "s4", "s5"]);
  });

  it("rejects a session that does not start with a compile, a mismatched answer, and a summary with tool calls", async () => {
    const badStart = new Promise((resolve, reject) => {
      const stream = client.bidiStream(ContextService.method.compileSession);
      stream.on("data", resolve);
      stream.on("error", reject);
      stream.write({ kind: { case: "summarizeResponse", value: { requestId: "x" } } } as never);
      stream.end();
    });
    await expect(badStart).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: expect.stringMatching(/first message must be a compile/) });

    const history = { messages: Array.from({ length: 6 }, (_, i) => text(`b${i}`, i % 2 ? Role.ASSISTANT : Role.USER, `turn ${i}`)) };
    const budget = { maxTokens: 30n, strategy: BudgetStrategy.SUMMARIZE, estimator: ten };
    await expect(session({ history, budget }, () => ({ summary: call("", ["c9"]) }))).rejects.toMatchObject({
      code: grpc.status.INVALID_ARGUMENT,
      details: expect.stringMatching(/summarize_response.summary: a summary may not carry tool calls/),
    });
    const mismatched = new Promise((resolve, reject) => {
      const stream = client.bidiStream(ContextService.method.compileSession);
      stream.on("data", (response: CompileSessionResponse) => {
        if (response.kind.case === "summarizeRequest") stream.write({ kind: { case: "summarizeResponse", value: { requestId: "not-it", summary: text("", Role.ASSISTANT, "x") } } } as never);
        else if (response.kind.case === "result") resolve(response);
      });
      stream.on("error", reject);
      stream.write({ kind: { case: "compile", value: { history, budget } } } as never);
    });
    await expect(mismatched).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: expect.stringMatching(/request_id: "not-it" does not answer/) });
  });

  it("streams observer events, including context_summarized, before the result", async () => {
    const history = { messages: Array.from({ length: 6 }, (_, i) => text(`e${i}`, i % 2 ? Role.ASSISTANT : Role.USER, `turn ${i}`)) };
    const { received } = await session({ history, budget: { maxTokens: 30n, strategy: BudgetStrategy.SUMMARIZE, estimator: ten } }, (request) => summaryOf(request));
    const kinds = received.map((response) => (response.kind.case === "event" ? response.kind.value.event.case : response.kind.case));
    expect(kinds.indexOf("summarizeRequest")).toBeLessThan(kinds.indexOf("contextSummarized"));
    expect(kinds.at(-1)).toBe("result");
    expect(kinds.at(-2)).toBe("pipelineCompiled");
  });

  it("shows remembered experiences in the system prompt, counts them, and drops them once forgotten", async () => {
    const id = "session/experiences";
    await seed(id, [text("x0", Role.USER, "hello")]);
    await commit(id, [{ operation: { case: "remember", value: { text: "  prefers   metric units " } } }, { operation: { case: "remember", value: { text: "lives in Oslo" } } }]);
    const request = { conversationId: id, budget: { maxTokens: 1000n, estimator: { kind: EstimatorKind.CHAR_FALLBACK } } };
    const remembered = (await client.unary(ContextService.method.compile, request)).result!;
    const block = remembered.payload!.system.find((message) => message.id === "experiences")!;
    expect(block.parts[0]!.kind.value).toMatchObject({ text: "<experience>\n- [exp_1] prefers metric units\n- [exp_2] lives in Oslo" });
    // The block is counted like any message, before any history.
    const counted = await client.unary(ContextService.method.countTokens, { messages: [block], estimator: { kind: EstimatorKind.CHAR_FALLBACK } });
    expect(remembered.usage!.system).toBe(counted.total);

    await commit(id, [{ operation: { case: "forget", value: { experienceId: "exp_1" } } }]);
    const forgotten = (await client.unary(ContextService.method.compile, request)).result!;
    expect(forgotten.payload!.system.find((message) => message.id === "experiences")!.parts[0]!.kind.value).toMatchObject({ text: "<experience>\n- [exp_2] lives in Oslo" });
    expect(forgotten.usage!.system).toBeLessThan(remembered.usage!.system);
    await commit(id, [{ operation: { case: "forget", value: { experienceId: "exp_2" } } }]);
    const none = (await client.unary(ContextService.method.compile, request)).result!;
    expect(none.payload!.system).toEqual([]);
    expect(none.usage!.system).toBe(0n);
  });

  it("keeps a 200-turn conversation with tool rounds under the window, every round whole, nothing lost", { timeout: 60_000 }, async () => {
    const id = "session/long";
    const window = { contextWindow: 700n, outputReserve: 100n, autoCompact: true, estimator: { kind: EstimatorKind.CHAR_FALLBACK } };
    let version = await commit(id, [{ operation: { case: "appendMessages", value: { segment: Segment.SYSTEM, messages: [text("sys", Role.SYSTEM, "You are a careful research assistant.")] } } }]);
    const everything: string[] = [];
    let summaries = 0;
    for (let turn = 0; turn < 200; turn++) {
      const user = text(`u${turn}`, Role.USER, `Question ${turn}: what is the status of item ${turn}?`);
      const { result: compiled, asked } = await session({ conversationId: id, budget: window, currentTurn: { raw: user }, commit: { expectedVersion: version } }, (request) => {
        // What is asked is whole units only, never the current turn.
        expect(analyzeToolRounds(request.messages, { allowOpenTail: false }).violations).toEqual([]);
        expect(ids(request.messages)).not.toContain(user.id);
        return { summary: { role: Role.ASSISTANT, parts: [{ kind: { case: "text", value: { text: `Summary #${++summaries}: items up to ${turn - 1} were looked up.` } } }] } };
      });
      everything.push(user.id);
      const payload = compiled.payload!.history;
      expect(compiled.usage!.total).toBeLessThanOrEqual(600n);
      expect(analyzeToolRounds(payload, { allowOpenTail: false }).violations).toEqual([]);
      expect(payload.at(-1)!.id).toBe(user.id);
      // Only the head may be a summary.
      expect(payload.slice(1).every((message) => coveredBy(message).length === 0)).toBe(true);
      if (asked.length > 0) expect(coveredBy(payload[0])).toEqual(expect.arrayContaining(ids(asked[0]!.messages).filter((messageId) => !messageId.startsWith("summary:"))));
      // No summary ever covers another summary: an earlier one is replaced and named as such.
      expect(coveredBy(payload[0]).filter((messageId) => messageId.startsWith("summary:"))).toEqual([]);
      const previous = asked[0]?.previousSummary;
      if (previous) {
        const kind = payload[0]!.provenance!.kind;
        expect(kind.case === "summary" && kind.value.replacedSummaryIds.at(-1)).toBe(previous.id);
      }
      version = compiled.committedVersion;

      // The model answers: a tool round (two calls on even turns), then text.
      const callIds = turn % 2 === 0 ? [`c${turn}a`, `c${turn}b`] : [`c${turn}a`];
      const round = { assistant: call(`r${turn}`, callIds), results: callIds.map((callId) => result(`t${callId}`, callId)) };
      const answer = text(`a${turn}`, Role.ASSISTANT, `Item ${turn} is fine.`);
      version = await commit(id, [{ operation: { case: "appendToolRound", value: round } }, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: [answer] } } }]);
      everything.push(round.assistant.id, ...round.results.map((message) => message.id), answer.id);
    }
    expect(summaries).toBeGreaterThan(10);
    // Stored: one rolling summary at the head covering exactly what is no longer stored whole.
    const stored = await state(id);
    expect(ids(stored.system)).toEqual(["sys"]);
    const [head, ...rest] = stored.history;
    expect(rest.every((message) => coveredBy(message).length === 0)).toBe(true);
    expect([...coveredBy(head), ...ids(rest)]).toEqual(everything);
    const headKind = head!.provenance!.kind;
    expect(headKind.case === "summary" && headKind.value.replacedSummaryIds).toHaveLength(summaries - 1);
    expect(analyzeToolRounds(stored.history, { allowOpenTail: false }).violations).toEqual([]);
  });
});
