import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompileResultPart, EstimatorKind, TransformationAction, TransformationReason } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { appendHistory, delta, textMessage } from "../../store/fixtures.js";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

// CompileResult.message_tokens (COMPILE_RESULT_PART_MESSAGE_TOKENS) against a real sidecar over
// gRPC: what the budget counted per message, checked against the result's own usage and against
// CountTokens of the same messages with the same estimator.

const conversationId = "tokens/one";
const estimator = { kind: EstimatorKind.CHAR_FALLBACK, charsPerToken: 4 };

function toolRound(prefix: string, output: string): Message[] {
  return [
    create(MessageSchema, { id: `${prefix}-call`, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: `${prefix}-c`, name: "grep", arguments: { data: "{}" } } } }] }),
    create(MessageSchema, { id: `${prefix}-result`, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: `${prefix}-c`, name: "grep", payload: { text: output } } } }] }),
  ];
}

describe("CompileResult.message_tokens (real sidecar, gRPC)", () => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  const stored: Message[] = [];
  beforeAll(async () => {
    sidecar = await startSidecar();
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    stored.push(
      textMessage("u1", Role.USER, "find the bug ".repeat(20)),
      ...toolRound("r1", "match ".repeat(400)),
      textMessage("a1", Role.ASSISTANT, "found it ".repeat(10)),
      textMessage("u2", Role.USER, "now fix it"),
      ...toolRound("r2", "patched ".repeat(50)),
      textMessage("a2", Role.ASSISTANT, "fixed"),
    );
    await client.unary(ConversationService.method.commit, {
      conversationId,
      deltas: [delta({ case: "appendMessages", value: { segment: Segment.SYSTEM, messages: [textMessage("sys", Role.SYSTEM, "You fix bugs.")] } }), appendHistory(...stored)],
    });
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
  });

  it("is absent unless asked for; with the part, counts every message as the budget did: kept history adds up to usage.history, dropped ones cost what CountTokens says", async () => {
    const request = { conversationId, budget: { maxTokens: 120n, estimator } };
    const lean = (await client.unary(ContextService.method.compile, request)).result!;
    expect(lean.messageTokens).toEqual({});
    const result = (await client.unary(ContextService.method.compile, { ...request, include: [CompileResultPart.MESSAGE_TOKENS, CompileResultPart.ALL_TRANSFORMATIONS] })).result!;
    expect(result.usage).toEqual(lean.usage);
    const tokens = result.messageTokens;
    expect(Object.keys(tokens).sort()).toEqual(["sys", ...stored.map((message) => message.id)].sort());
    expect(tokens["sys"]).toBe(result.usage!.system);
    const dropped = stored.filter((message) => result.transformations[message.id]!.action === TransformationAction.DROPPED);
    expect(dropped.map((message) => message.id)).toContain("r1-result");
    const kept = stored.filter((message) => !dropped.includes(message));
    expect(kept.reduce((total, message) => total + tokens[message.id]!, 0n)).toBe(result.usage!.history);
    expect(stored.reduce((total, message) => total + tokens[message.id]!, 0n)).toBe(result.usage!.historyBeforeTrim);
    const counted = await client.unary(ContextService.method.countTokens, { messages: stored, estimator });
    expect(stored.map((message) => tokens[message.id])).toEqual(counted.perMessage);
  });

  it("counts a cleared tool result after clearing, and names the part in the include error", async () => {
    const result = (
      await client.unary(ContextService.method.compile, {
        conversationId,
        budget: { maxTokens: 400n, estimator, toolResultClearing: { keepRecent: 1 } },
        include: [CompileResultPart.MESSAGE_TOKENS, CompileResultPart.ALL_TRANSFORMATIONS],
      })
    ).result!;
    expect(result.transformations["r1-result"]!.reason).toBe(TransformationReason.TOOL_RESULT_CLEARED);
    const counted = await client.unary(ContextService.method.countTokens, { messages: [stored.find((message) => message.id === "r1-result")!], estimator });
    expect(result.messageTokens["r1-result"]! + result.usage!.clearedTokens).toBe(counted.perMessage[0]);
    await expect(client.unary(ContextService.method.compile, { conversationId, include: [999 as CompileResultPart] })).rejects.toMatchObject({
      details: expect.stringContaining("MESSAGE_TOKENS"),
    });
  });
});
