import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  BudgetStrategy,
  CompileResultPart,
  EstimatorKind,
  IdentityPolicy,
  TokenizerEncoding,
  ToolRoundRepair,
  TransformationAction,
  TransformationReason,
  type CompileRequestSchema,
  type CompileResult,
} from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Provider, Role } from "#gen/contextd/v1/message_pb";
import type { ObserverEvent } from "#gen/contextd/v1/telemetry_pb";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";

// One vocabulary (DROPPED records, message_dropped events, contextd_messages_dropped_total; the
// same for clearing: FORMATTED records, message_cleared events, contextd_messages_cleared_total), one
// id format (UUIDs), one definition of a total (CountTokens and Usage agree), through the RPC.

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe("one vocabulary, one id format, one total (real sidecar)", () => {
  let sidecar: Sidecar;
  const transport = () => createGrpcTransport({ baseUrl: sidecar.url });

  beforeAll(async () => {
    sidecar = await startSidecar();
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  async function compileStream(request: MessageInitShape<typeof CompileRequestSchema>): Promise<{ events: ObserverEvent[]; result: CompileResult }> {
    const events: ObserverEvent[] = [];
    let result: CompileResult | undefined;
    for await (const message of createClient(ContextService, transport()).compileStream({ request })) {
      if (message.kind.case === "event") events.push(message.kind.value);
      else if (message.kind.case === "result") result = message.kind.value;
    }
    return { events, result: result! };
  }

  it("records every message left out of the prompt as DROPPED, reported once each by the observer events (the run at the head of the history by one history_head_dropped), counted by reason in the metric", async () => {
    const before = await (await fetch(`${sidecar.url}/metrics`)).text();
    const open = create(MessageSchema, { id: "a0", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "c0", name: "f" } } }] });
    const history = [textMessage("q0", Role.USER, "q0"), open, ...["q1", "a1", "q2", "a2"].map((id) => textMessage(id, id.startsWith("q") ? Role.USER : Role.ASSISTANT, id))];
    const { events, result } = await compileStream({
      history: { messages: history },
      // DROP drops every unit but the latest user message (protected); tool-round repair drops the
      // open round before the budget runs.
      budget: { maxTokens: 25n, strategy: BudgetStrategy.DROP, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } },
      repair: ToolRoundRepair.DROP_INCOMPLETE,
      include: [CompileResultPart.ALL_TRANSFORMATIONS],
    });
    const dropped = Object.entries(result.transformations).filter(([, record]) => record.action === TransformationAction.DROPPED);
    expect(Object.fromEntries(dropped.map(([id, record]) => [id, TransformationReason[record.reason]]))).toEqual({
      a0: "TOOL_ROUND_REPAIR",
      q0: "TOKEN_BUDGET_EXCEEDED",
      q1: "TOKEN_BUDGET_EXCEEDED",
      a1: "TOKEN_BUDGET_EXCEEDED",
      a2: "TOKEN_BUDGET_EXCEEDED",
    });
    expect(result.payload!.history.map((m) => m.id)).toEqual(["q2"]);
    // The budget's run at the head of the history (q0, q1, a1: a0 went in the repair first) is
    // one event; every other DROPPED record has its own.
    const headRuns = events.flatMap((event) => (event.event.case === "historyHeadDropped" ? [event.event.value] : []));
    expect(headRuns).toMatchObject([{ count: 3n, firstMessageId: "q0", lastMessageId: "a1" }]);
    const historyAfterRepair = history.map((m) => m.id).filter((id) => id !== "a0");
    const runIds = historyAfterRepair.slice(historyAfterRepair.indexOf(headRuns[0]!.firstMessageId), historyAfterRepair.indexOf(headRuns[0]!.lastMessageId) + 1);
    const eventDrops = [
      ...runIds.map((id) => [id, "TOKEN_BUDGET_EXCEEDED"]),
      ...events.flatMap((event) => (event.event.case === "messageDropped" ? [[event.event.value.messageId, TransformationReason[event.event.value.reason]]] : [])),
    ];
    expect(runIds).toHaveLength(Number(headRuns[0]!.count));
    expect(Object.fromEntries(eventDrops)).toEqual(Object.fromEntries(dropped.map(([id, record]) => [id, TransformationReason[record.reason]])));
    expect(eventDrops).toHaveLength(dropped.length);
    const after = await (await fetch(`${sidecar.url}/metrics`)).text();
    const count = (text: string, reason: string) => Number(new RegExp(`contextd_messages_dropped_total\\{reason="${reason}"\\} (\\d+)`).exec(text)?.[1] ?? 0);
    expect(count(after, "token_budget_exceeded") - count(before, "token_budget_exceeded")).toBe(4);
    expect(count(after, "tool_round_repair") - count(before, "tool_round_repair")).toBe(1);
    expect(after).not.toContain("contextd_evictions_total");
  });

  it("records every cleared message as FORMATTED with its clearing reason, with one message_cleared event each, counted with its freed tokens in the metrics", async () => {
    const before = await (await fetch(`${sidecar.url}/metrics`)).text();
    const reasoning = { kind: { case: "reasoning" as const, value: { text: "thinking ".repeat(100), signature: "s", provider: Provider.ANTHROPIC_MESSAGES } } };
    const history = Array.from({ length: 5 }, (_, index) => [
      textMessage(`u${index}`, Role.USER, `question ${index}`),
      create(MessageSchema, { id: `a${index}`, role: Role.ASSISTANT, parts: [reasoning, { kind: { case: "toolCall", value: { id: `c${index}`, name: "read_file" } } }] }),
      create(MessageSchema, { id: `t${index}`, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: `c${index}`, name: "read_file", payload: { text: "x".repeat(4_000) } } } }] }),
    ]).flat();
    const { events, result } = await compileStream({
      history: { messages: history },
      budget: { maxTokens: 4_000n, estimator: { kind: EstimatorKind.CHAR_FALLBACK, charsPerToken: 4 }, toolResultClearing: { keepRecent: 1 }, reasoningClearing: {} },
      include: [CompileResultPart.ALL_TRANSFORMATIONS],
    });
    const clearing = new Set([TransformationReason.TOOL_RESULT_CLEARED, TransformationReason.REASONING_CLEARED]);
    const cleared = Object.entries(result.transformations).filter(([, record]) => record.action === TransformationAction.FORMATTED && clearing.has(record.reason));
    const byReason = (reason: TransformationReason) => cleared.filter(([, record]) => record.reason === reason).length;
    expect(byReason(TransformationReason.TOOL_RESULT_CLEARED)).toBeGreaterThan(0);
    expect(byReason(TransformationReason.REASONING_CLEARED)).toBeGreaterThan(0);
    const eventClears = events.flatMap((event) => (event.event.case === "messageCleared" ? [event.event.value] : []));
    expect(Object.fromEntries(eventClears.map((event) => [event.messageId, event.reason]))).toEqual(Object.fromEntries(cleared.map(([id, record]) => [id, record.reason])));
    expect(eventClears).toHaveLength(cleared.length);
    const freed = eventClears.reduce((sum, event) => sum + event.freedTokens, 0n);
    expect(freed).toBe(result.usage!.clearedTokens);
    const after = await (await fetch(`${sidecar.url}/metrics`)).text();
    const metric = (text: string, name: string, reason: string) => Number(new RegExp(`${name}\\{reason="${reason}"\\} (\\d+)`).exec(text)?.[1] ?? 0);
    for (const [reason, name] of [[TransformationReason.TOOL_RESULT_CLEARED, "tool_result_cleared"], [TransformationReason.REASONING_CLEARED, "reasoning_cleared"]] as const) {
      expect(metric(after, "contextd_messages_cleared_total", name) - metric(before, "contextd_messages_cleared_total", name)).toBe(byReason(reason));
      const freedOf = eventClears.filter((event) => event.reason === reason).reduce((sum, event) => sum + Number(event.freedTokens), 0);
      expect(metric(after, "contextd_cleared_tokens_total", name) - metric(before, "contextd_cleared_tokens_total", name)).toBe(freedOf);
    }
  });

  it("assigns ids of one format: a commit and a RANDOM compile both give lowercase version 4 UUIDs, as does the compile id", async () => {
    const conversationId = `ids-${Date.now()}`;
    const committed = await createClient(ConversationService, transport()).commit({ conversationId, deltas: [appendHistory(textMessage("", Role.USER, "no id"))], includeState: true });
    expect(committed.state!.history[0]!.id).toMatch(uuid);
    const { events, result } = await compileStream({ history: { messages: [textMessage("", Role.USER, "no id either")] }, identity: { policy: IdentityPolicy.RANDOM } });
    expect(result.payload!.history[0]!.id).toMatch(uuid);
    expect(events[0]!.compileId).toMatch(uuid);
  });

  it("defines a total once: CountTokens gives the total a compile of the same messages reports, reply priming included", async () => {
    const messages = [textMessage("s", Role.SYSTEM, "Be brief."), textMessage("u", Role.USER, "What is the capital of Norway?")];
    const toolDefinitions = [{ name: "lookup", description: "Looks a city up.", parameters: '{"type":"object","properties":{"city":{"type":"string"}}}' }];
    const estimator = { kind: EstimatorKind.TOKENIZER, encoding: TokenizerEncoding.O200K_BASE, provider: Provider.OPENAI_CHAT };
    const counted = await createClient(ContextService, transport()).countTokens({ messages, toolDefinitions, estimator });
    expect(counted.replyPriming).toBe(3n); // OpenAI's recipe: 3 tokens prime the reply
    expect(counted.total).toBe(counted.perMessage.reduce((sum, n) => sum + n, 0n) + counted.toolDefinitions + counted.replyPriming);
    const { result } = await compileStream({ system: { messages: [messages[0]!] }, history: { messages: [messages[1]!] }, toolDefinitions: { toolDefinitions }, budget: { estimator } });
    const usage = result.usage!;
    expect(usage.total).toBe(counted.total);
    expect(usage.replyPriming).toBe(counted.replyPriming);
    expect(usage.reserved).toBe(usage.system + usage.memory + usage.tools + usage.toolDefinitions + usage.pending + usage.replyPriming);
    expect(usage.total).toBe(usage.reserved + usage.history);
  });
});
