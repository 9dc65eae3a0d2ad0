import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";

// CompileResult.cache_impact from a real sidecar: on by default, off with --cache-impact-bytes 0.
describe("cache impact over gRPC (real sidecar)", () => {
  let sidecar: Sidecar;
  let off: Sidecar;
  beforeAll(async () => {
    [sidecar, off] = await Promise.all([startSidecar(), startSidecar(["--cache-impact-bytes", "0"])]);
  });
  afterAll(async () => {
    await Promise.all([sidecar?.stop(), off?.stop()]);
  });

  it("reports the prefix the previous compile of the conversation shares with this one", async () => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    const compileRequest = { conversationId: "cache-1", budget: { estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } }, render: { provider: Provider.ANTHROPIC_MESSAGES, model: "m", autoCacheBreakpoints: true } };
    await client.unary(ConversationService.method.commit, { conversationId: "cache-1", deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] });
    const first = (await client.unary(ContextService.method.compile, compileRequest)).result!;
    expect(first.cacheImpact).toMatchObject({ previousVersion: 0n, rewrittenTokens: 10n });
    await client.unary(ConversationService.method.commit, { conversationId: "cache-1", expectedVersion: 1n, deltas: [appendHistory(textMessage("a1", Role.ASSISTANT, "hello"), textMessage("u2", Role.USER, "and?"))] });
    const second = (await client.unary(ContextService.method.compile, compileRequest)).result!;
    expect(second.cacheImpact).toMatchObject({ previousVersion: 1n, unchangedPrefixTokens: 10n, rewrittenTokens: 20n, unchangedPrefixMessages: 1n });
    client.close();
    const offClient = grpcJsClient(`127.0.0.1:${off.port}`);
    await offClient.unary(ConversationService.method.commit, { conversationId: "cache-1", deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] });
    expect((await offClient.unary(ContextService.method.compile, compileRequest)).result!.cacheImpact).toBeUndefined();
    offClient.close();
  });
});
