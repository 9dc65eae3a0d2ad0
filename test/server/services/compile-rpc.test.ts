import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompileResultPart, EstimatorKind, TransformationAction, TransformationReason } from "#gen/contextd/v1/compile_pb";
import { ContextService, type CompileStreamResponse } from "#gen/contextd/v1/context_service_pb";
import { MessageSchema, Provider, Role } from "#gen/contextd/v1/message_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

const message = (id: string, role: Role, text: string) => create(MessageSchema, { id, role, parts: [{ kind: { case: "text", value: { text } } }] });
const history = Array.from({ length: 6 }, (_, i) => message(`h${i}`, i % 2 ? Role.ASSISTANT : Role.USER, `turn ${i}`));

describe("ContextService over gRPC (real sidecar, grpc-js client)", () => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  beforeAll(async () => {
    sidecar = await startSidecar();
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
  });

  it("compiles with a budget, pending after history, and records by id", async () => {
    const request = {
      history: { messages: history },
      pending: [message("p", Role.USER, "pending")],
      budget: { maxTokens: 30n, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } },
    };
    const { result } = await client.unary(ContextService.method.compile, { ...request, include: [CompileResultPart.ALL_TRANSFORMATIONS] });
    expect(result!.payload!.history.map((m) => m.id)).toEqual(["h4", "h5", "p"]);
    expect(result!.transformations["h0"]!.action).toBe(TransformationAction.DROPPED);
    expect(result!.transformations["h4"]!.action).toBe(TransformationAction.PASSED);
    // By default the budget's drops are counted, and unchanged messages have no record.
    const lean = (await client.unary(ContextService.method.compile, request)).result!;
    expect(lean.payload).toEqual(result!.payload);
    expect(lean.transformations).not.toHaveProperty("h0");
    expect(lean.transformations).not.toHaveProperty("h4");
    expect(lean.budgetDroppedMessages).toBe(BigInt(Object.values(result!.transformations).filter((record) => record.reason === TransformationReason.TOKEN_BUDGET_EXCEEDED).length));
    expect(lean.budgetDroppedMessages).toBeGreaterThan(0n);
  });

  it("answers budget errors with RESOURCE_EXHAUSTED and bad input with INVALID_ARGUMENT", async () => {
    await expect(client.unary(ContextService.method.compile, { pending: [message("p", Role.USER, "x")], budget: { maxTokens: 5n, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } } })).rejects.toMatchObject({ code: 8, details: expect.stringMatching(/^pending exceeds budget/) });
    await expect(client.unary(ContextService.method.compile, { history: { messages: [history[0]!, history[0]!] } })).rejects.toMatchObject({ code: 3, details: expect.stringMatching(/duplicate message id "h0" at history\[1\]/) });
  });

  it("says which conversation is empty when a rendered compile has nothing to send", async () => {
    const render = { provider: Provider.OPENAI_CHAT, model: "gpt-4o" };
    await expect(client.unary(ContextService.method.compile, { conversationId: "compile-rpc/never-written", render })).rejects.toMatchObject({
      code: 9,
      details: 'conversation "compile-rpc/never-written" has no messages at version 0: commit some first (ConversationService.Commit, or commit.deltas on this compile) or send them in the request',
    });
    // Messages in the request, or no render, compile as before.
    const inline = await client.unary(ContextService.method.compile, { conversationId: "compile-rpc/never-written", render, history: { messages: [history[0]!] }, include: [CompileResultPart.PAYLOAD] });
    expect(inline.result!.payload!.history.map((entry) => entry.id)).toEqual(["h0"]);
    const unrendered = await client.unary(ContextService.method.compile, { conversationId: "compile-rpc/never-written" });
    expect(unrendered.result!.payload!.history).toEqual([]);
  });

  it("streams observer events before the result", async () => {
    const stream = client.serverStream(ContextService.method.compileStream, { request: { history: { messages: history }, budget: { maxTokens: 30n, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } } } });
    const received: CompileStreamResponse[] = [];
    for await (const item of stream) received.push(item as CompileStreamResponse);
    expect(received.at(-1)!.kind.case).toBe("result");
    const events = received.slice(0, -1).map((item) => (item.kind.case === "event" ? item.kind.value.event.case : "?"));
    expect(events).toContain("stageTiming");
    // h0..h2 for the budget (one event for the run at the head of the history), h3 (the answer
    // to h2) so that history starts on a user turn.
    const drops = received.flatMap((item) => (item.kind.case === "event" && (item.kind.value.event.case === "messageDropped" || item.kind.value.event.case === "historyHeadDropped") ? [item.kind.value.event] : []));
    expect(drops).toMatchObject([
      { case: "historyHeadDropped", value: { count: 3n, firstMessageId: "h0", lastMessageId: "h2" } },
      { case: "messageDropped", value: { messageId: "h3", reason: TransformationReason.HISTORY_ALIGNMENT } },
    ]);
    expect(events.at(-1)).toBe("pipelineCompiled");
  });

  it("counts special-token text as plain text with the tokenizer", async () => {
    const response = await client.unary(ContextService.method.countTokens, { messages: [message("a", Role.USER, "hello <|endoftext|> world")], estimator: { kind: EstimatorKind.TOKENIZER } });
    expect(response.perMessage).toHaveLength(1);
    expect(response.total).toBeGreaterThan(5n);
  });

  it("renders an inline snapshot as a view", async () => {
    const response = await client.unary(ContextService.method.render, { view: "flat_classifier", snapshot: { history: history.slice(0, 2) } });
    expect(response.text).toBe("user: turn 0\nassistant: turn 1\n");
  });
});
