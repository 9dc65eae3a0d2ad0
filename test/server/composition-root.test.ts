import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { EstimatorKind, EstimatorSchema } from "#gen/contextd/v1/compile_pb";
import { ContextService, ReportUsageRequestSchema } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { Codec } from "../../src/codec/codec.js";
import { createEstimator } from "../../src/core/tokens/estimator.js";
import { composeApplication, composeSidecar } from "../../src/server/composition-root.js";
import { defaultConfig, type Config } from "../../src/server/operations/config.js";
import { createLogger } from "../../src/server/operations/logger.js";
import { contextService } from "../../src/server/services/context-service.js";
import { conversationService } from "../../src/server/services/conversation-service.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { appendHistory, textMessage } from "../store/fixtures.js";

// The composition root over a real in-memory store: the services it hands its objects to answer
// as the server's do, and the objects are bounded by the configuration they were built from.

const usage = create(ReportUsageRequestSchema, { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-composed", estimator: EstimatorKind.FIXED, estimatedTokens: 100n, actualInputTokens: 200n });

function composed(config: Partial<Config> = {}) {
  const codec = new Codec();
  const store = new MemoryConversationStore({ codec });
  return composeApplication({ ...defaultConfig, ...config }, store, codec);
}

async function failure(promise: Promise<unknown>): Promise<ConnectError> {
  const error = await promise.then(() => undefined, (reason: unknown) => reason);
  expect(error, "expected the call to fail").toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

describe("composeSidecar", () => {
  it("hands the services the objects it built: compiles and commits go through the observed store, their events reach the metrics", async () => {
    const codec = new Codec();
    const sidecar = composeSidecar({ ...defaultConfig }, { store: new MemoryConversationStore({ codec }), codec, logger: createLogger("error", () => undefined) });
    const transport = createRouterTransport((router) => sidecar.registerServices(router));
    const conversations = createClient(ConversationService, transport);
    const context = createClient(ContextService, transport);
    await conversations.commit({ conversationId: "root-1", deltas: [appendHistory(textMessage("u1", Role.USER, "hello there"))] });
    const compiled = await context.compile({ conversationId: "root-1", budget: { maxTokens: 1_000n } });
    expect(compiled.result?.version).toBe(1n);
    expect((await conversations.getState({ conversationId: "root-1" })).state?.history.map((message) => message.id)).toEqual(["u1"]);
    const metrics = await sidecar.metricsText();
    expect(metrics).toMatch(/^contextd_store_operation_duration_seconds_count\{operation="commit"[^}]*\} 1$/m);
    expect(metrics).toMatch(/^contextd_compiles_total 1$/m);
    await sidecar.application.regexSearch.close();
  });
});

describe("composeApplication", () => {
  it("builds the calibration --calibration-keys asks for, and none at 0 (ReportUsage is then FAILED_PRECONDITION)", async () => {
    const on = composed();
    const answer = await contextService({ ...on, publish: () => {}, summarizeTimeoutMs: 1_000 }).reportUsage!(usage, undefined as never);
    expect(answer).toMatchObject({ correction: 2, reports: 1n });
    const off = composed({ calibrationKeys: 0 });
    expect(off.calibration).toBeUndefined();
    const refused = await failure(Promise.resolve().then(() => contextService({ ...off, publish: () => {}, summarizeTimeoutMs: 1_000 }).reportUsage!(usage, undefined as never)));
    expect(refused.code).toBe(Code.FailedPrecondition);
    expect(refused.rawMessage).toContain("--calibration-keys 0");
  });

  it("bounds GetState by --max-request-bytes through the reads it builds", async () => {
    const application = composed({ maxRequestBytes: 2_048 });
    const service = conversationService({ store: application.store, shutdown: new AbortController().signal, watchHeartbeatMs: 1_000, reads: application.reads });
    const client = createClient(ConversationService, createRouterTransport(({ service: register }) => register(ConversationService, service)));
    await client.commit({ conversationId: "big", deltas: [appendHistory(textMessage("u1", Role.USER, "x".repeat(4_096)))] });
    const refused = await failure(client.getState({ conversationId: "big" }));
    expect(refused.code).toBe(Code.ResourceExhausted);
    expect(refused.rawMessage).toContain("message limit of 2048 bytes (--max-request-bytes)");
  });

  it("bounds the token counts' last counted lists by --token-count-list-bytes", async () => {
    const bound = 20_000;
    const { tokenCounts } = composed({ tokenCountListBytes: bound });
    const chars = await createEstimator(create(EstimatorSchema, { kind: EstimatorKind.CHARS }), Provider.UNSPECIFIED, "estimator");
    for (let conversation = 0; conversation < 20; conversation++) {
      await tokenCounts.countAll(chars, Array.from({ length: 10 }, (_, index) => textMessage(`c${conversation}-${index}`, Role.USER, "words ".repeat(30))));
      expect(tokenCounts.keptLists.bytes).toBeLessThanOrEqual(bound);
    }
    expect(tokenCounts.keptLists.count).toBeGreaterThan(0);
    expect(tokenCounts.keptLists.count).toBeLessThan(20);
  });

  it("gives each composition its own caches", () => {
    const first = composed();
    const second = composed();
    expect(first.tokenCounts).not.toBe(second.tokenCounts);
    expect(first.compiler).not.toBe(second.compiler);
    expect(first.compiler.tokenCounts).toBe(first.tokenCounts);
    expect(first.reads.windows).not.toBe(second.reads.windows);
  });
});

describe("conversationService without reads", () => {
  it("serves commits and answers UNIMPLEMENTED for GetState, ReadMessages and ReadToolResult", async () => {
    const store = new MemoryConversationStore();
    const service = conversationService({ store, shutdown: new AbortController().signal, watchHeartbeatMs: 1_000 });
    const client = createClient(ConversationService, createRouterTransport(({ service: register }) => register(ConversationService, service)));
    expect((await client.commit({ conversationId: "c", deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] })).version).toBe(1n);
    for (const call of [client.getState({ conversationId: "c" }), client.readMessages({ conversationId: "c" }), client.readToolResult({ conversationId: "c", toolCallId: "t" })]) {
      expect((await failure(call)).code).toBe(Code.Unimplemented);
    }
  });
});
