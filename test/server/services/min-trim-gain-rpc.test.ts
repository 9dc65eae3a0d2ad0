import { create } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EstimatorKind, TransformationReason, TrimStep } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { grpcJsClient, rpcFailure } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";

// Budget.min_trim_gain through a real sidecar: the rule weighs a step against the previous compile
// the sidecar remembers for cache_impact (on by default), and is off with --cache-impact-bytes 0.

const thinking = (index: number): Message =>
  create(MessageSchema, {
    id: `a${index}`,
    role: Role.ASSISTANT,
    parts: [
      { kind: { case: "reasoning", value: { text: `thinking ${index} `.repeat(10), signature: "sig", provider: Provider.ANTHROPIC_MESSAGES } } },
      { kind: { case: "text", value: { text: `answer ${index}` } } },
    ],
  });
const long = (id: string) => textMessage(id, Role.USER, `question ${id} `.repeat(400));

describe("minimum trim gain over gRPC (real sidecar)", () => {
  let sidecar: Sidecar;
  let forgetful: Sidecar;
  beforeAll(async () => {
    [sidecar, forgetful] = await Promise.all([startSidecar(), startSidecar(["--cache-impact-bytes", "0"])]);
  });
  afterAll(async () => {
    await Promise.all([sidecar?.stop(), forgetful?.stop()]);
  });

  /** Two turns of a stored conversation, compiled after each with reasoning clearing and the rule. */
  async function twoTurns(port: number, conversationId: string, minTrimGain: number) {
    const client = grpcJsClient(`127.0.0.1:${port}`);
    const request = {
      conversationId,
      budget: { estimator: { kind: EstimatorKind.CHAR_FALLBACK, charsPerToken: 4 }, reasoningClearing: { keepRecentTurns: 2 }, minTrimGain },
      render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-sonnet-4-5" },
    };
    const history = [textMessage("u0", Role.USER, "start"), thinking(0), textMessage("u1", Role.USER, "go on"), thinking(1), long("u2"), textMessage("a2", Role.ASSISTANT, "ok")];
    await client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(...history)] });
    const first = (await client.unary(ContextService.method.compile, request)).result!;
    await client.unary(ConversationService.method.commit, { conversationId, expectedVersion: 1n, deltas: [appendHistory(long("u3"))] });
    const second = (await client.unary(ContextService.method.compile, request)).result!;
    client.close();
    return { first, second };
  }

  it("skips the clearing that would re-write the cached turns, and says so in cache_impact", async () => {
    const { first, second } = await twoTurns(sidecar.port, "gain-on", 1);
    expect(first.transformations["a0"]?.reason).toBe(TransformationReason.REASONING_CLEARED);
    expect(second.transformations["a1"]?.reason).not.toBe(TransformationReason.REASONING_CLEARED);
    expect(second.cacheImpact!.trimSteps).toEqual([expect.objectContaining({ step: TrimStep.REASONING_CLEARING, needed: false, skipped: true, firstMessageId: "a1" })]);
    // Only the new question is written to the cache again.
    expect(second.cacheImpact!.rewrittenTokens).toBe(second.usage!.total - second.cacheImpact!.unchangedPrefixTokens);
    const body = JSON.parse(new TextDecoder().decode(second.rendered!.json)) as { messages: { content: { type: string }[] }[] };
    expect(body.messages.filter((message) => message.content.some((block) => block.type === "thinking"))).toHaveLength(1);
  });

  it("clears as without the rule when the rule is 0, or the sidecar remembers no compiles", async () => {
    for (const [port, id, ratio] of [[sidecar.port, "gain-off", 0], [forgetful.port, "gain-forgetful", 1]] as const) {
      const { second } = await twoTurns(port, id, ratio);
      expect(second.transformations["a1"]?.reason).toBe(TransformationReason.REASONING_CLEARED);
      expect(second.cacheImpact?.trimSteps ?? []).toEqual([]);
    }
  });

  it("refuses a ratio out of range with INVALID_ARGUMENT naming the field", async () => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    const error = await rpcFailure(client.unary(ContextService.method.compile, { history: { messages: [textMessage("u", Role.USER, "hi")] }, budget: { minTrimGain: 1001 } }));
    expect(error.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(error.details).toBe("budget.min_trim_gain must be a finite number from 0 to 1000, got 1001");
    client.close();
  });
});
