import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompileResultPart, EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startRedis } from "../../support/redis.js";
import { sidecarStores, startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";

// ReportUsage and CompileResult.calibration from a real sidecar: a report changes the budget of
// the next compile; off with --calibration-keys 0.
describe("token calibration over gRPC (real sidecar)", () => {
  let sidecar: Sidecar;
  let off: Sidecar;
  beforeAll(async () => {
    [sidecar, off] = await Promise.all([startSidecar(), startSidecar(["--calibration-keys", "0"])]);
  });
  afterAll(async () => {
    await Promise.all([sidecar?.stop(), off?.stop()]);
  });

  const messages = Array.from({ length: 12 }, (_, index) => textMessage(`m${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, `message ${index}`));
  const compileRequest = {
    conversationId: "calibrated-1",
    budget: { maxTokens: 100n, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } },
    render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-calibrated" },
    include: [CompileResultPart.PAYLOAD],
  };

  it("trims the next compile to the corrected budget and reports the correction", async () => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    await client.unary(ConversationService.method.commit, { conversationId: "calibrated-1", deltas: [appendHistory(...messages)] });
    const first = (await client.unary(ContextService.method.compile, compileRequest)).result!;
    expect(first.payload!.history).toHaveLength(10);
    expect(first.calibration).toMatchObject({ provider: Provider.ANTHROPIC_MESSAGES, model: "claude-calibrated", estimator: EstimatorKind.FIXED, estimatedTokens: 100n, correction: 1, reports: 0n, requestedLimit: 100n });

    // The provider counted 125 input tokens for the 100 estimated: later budgets allow 100 / 1.25 = 80.
    const calibration = first.calibration!;
    const reported = await client.unary(ContextService.method.reportUsage, {
      provider: calibration.provider,
      model: calibration.model,
      estimator: calibration.estimator,
      estimatedTokens: calibration.estimatedTokens,
      actualInputTokens: 125n,
    });
    expect(reported).toMatchObject({ correction: 1.25, reports: 1n, relativeError: 0.2, meanAbsoluteRelativeError: 0.2 });

    const second = (await client.unary(ContextService.method.compile, compileRequest)).result!;
    expect(second.payload!.history.map((entry) => entry.id)).toEqual(messages.slice(4).map((entry) => entry.id));
    expect(second.usage).toMatchObject({ limit: 80n, total: 80n });
    expect(second.calibration).toMatchObject({ estimatedTokens: 80n, correction: 1.25, correctedTokens: 100n, requestedLimit: 100n, reports: 1n, meanAbsoluteRelativeError: 0.2 });

    // A stateless compile for another model is not corrected.
    const other = (await client.unary(ContextService.method.compile, { ...compileRequest, conversationId: "", history: { messages }, render: { provider: Provider.ANTHROPIC_MESSAGES, model: "other" } })).result!;
    expect(other.payload!.history).toHaveLength(10);
    expect(other.calibration).toMatchObject({ correction: 1, reports: 0n });

    const bad = await failure(client.unary(ContextService.method.reportUsage, { provider: Provider.ANTHROPIC_MESSAGES, model: "m", estimator: EstimatorKind.FIXED, estimatedTokens: 0n, actualInputTokens: 1n }));
    expect(bad.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(bad.details).toBe("report_usage.estimated_tokens must be from 1 to 9007199254740991, got 0");
    // Nothing was learnt from it.
    expect((await client.unary(ContextService.method.compile, compileRequest)).result!.calibration!.reports).toBe(1n);
    client.close();
  });

  it("keeps a tenant's corrections to that tenant's compiles", async () => {
    const acmeToken = "acme-token-0123456789abcdef";
    const adminToken = "admin-token-0123456789abcdef";
    const scoped = await startSidecar([], { CONTEXTD_AUTH_TOKENS: `${adminToken},${acmeToken}=acme` });
    const client = grpcJsClient(`127.0.0.1:${scoped.port}`);
    try {
      const bearer = (token: string) => {
        const metadata = new grpc.Metadata();
        metadata.set("authorization", `Bearer ${token}`);
        return metadata;
      };
      await client.unary(ConversationService.method.commit, { conversationId: "acme/c", deltas: [appendHistory(...messages)] }, bearer(acmeToken));
      const reported = await client.unary(ContextService.method.reportUsage, { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-calibrated", estimator: EstimatorKind.FIXED, estimatedTokens: 100n, actualInputTokens: 200n }, bearer(acmeToken));
      expect(reported.correction).toBe(2);
      const acme = (await client.unary(ContextService.method.compile, { ...compileRequest, conversationId: "acme/c" }, bearer(acmeToken))).result!;
      expect(acme.usage!.limit).toBe(50n);
      expect(acme.payload!.history).toHaveLength(4);
      const admin = (await client.unary(ContextService.method.compile, { ...compileRequest, conversationId: "acme/c" }, bearer(adminToken))).result!;
      expect(admin.usage!.limit).toBe(100n);
      expect(admin.calibration).toMatchObject({ correction: 1, reports: 0n });
    } finally {
      client.close();
      await scoped.stop();
    }
  });

  it("is off with --calibration-keys 0: FAILED_PRECONDITION, and no calibration in results", async () => {
    const client = grpcJsClient(`127.0.0.1:${off.port}`);
    const refused = await failure(client.unary(ContextService.method.reportUsage, { provider: Provider.ANTHROPIC_MESSAGES, model: "m", estimator: EstimatorKind.FIXED, estimatedTokens: 10n, actualInputTokens: 12n }));
    expect(refused.code).toBe(grpc.status.FAILED_PRECONDITION);
    expect(refused.details).toBe("report_usage: this sidecar keeps no token calibration (--calibration-keys 0)");
    const result = (await client.unary(ContextService.method.compile, { ...compileRequest, conversationId: "", history: { messages } })).result!;
    expect(result.calibration).toBeUndefined();
    expect(result.usage!.limit).toBe(100n);
    client.close();
  });
});

// The corrections live in the store: a second sidecar on the same store compiles with what the
// first learnt, concurrent reports to both are all counted, and a restarted sidecar still has them.
describe.each(sidecarStores.slice(1))("token calibration kept in the %s (real sidecars)", (_name, startStore) => {
  let stopStore: (() => Promise<void>) | undefined;
  let storeArgs: string[];
  beforeAll(async () => {
    ({ args: storeArgs, stop: stopStore } = await startStore());
  }, 30_000);
  afterAll(async () => {
    await stopStore?.();
  });

  const messages = Array.from({ length: 12 }, (_, index) => textMessage(`m${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, `message ${index}`));
  const stateless = {
    history: { messages },
    budget: { maxTokens: 100n, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } },
    render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-shared" },
    include: [CompileResultPart.PAYLOAD],
  };
  const usage = (actualInputTokens: bigint) => ({ provider: Provider.ANTHROPIC_MESSAGES, model: "claude-shared", estimator: EstimatorKind.FIXED, estimatedTokens: 100n, actualInputTokens });

  it("shares corrections between sidecars, counts concurrent reports to both, and keeps them across a restart", async () => {
    let [a, b] = await Promise.all([startSidecar(storeArgs), startSidecar(storeArgs)]);
    let clientA = grpcJsClient(`127.0.0.1:${a.port}`);
    const clientB = grpcJsClient(`127.0.0.1:${b.port}`);
    try {
      expect(await clientA.unary(ContextService.method.reportUsage, usage(200n))).toMatchObject({ correction: 2, reports: 1n });
      // B never read the key: its first compile reads the store.
      const onB = (await clientB.unary(ContextService.method.compile, stateless)).result!;
      expect(onB.calibration).toMatchObject({ correction: 2, reports: 1n, storeReadError: "" });
      expect(onB.usage!.limit).toBe(50n);
      expect(onB.payload!.history).toHaveLength(4);

      // 40 reports at once, half to each sidecar: each one saw the one before it.
      const answers = await Promise.all(Array.from({ length: 40 }, (_, index) => (index % 2 === 0 ? clientA : clientB).unary(ContextService.method.reportUsage, usage(200n))));
      expect(answers.map((answer) => Number(answer.reports)).sort((x, y) => x - y)).toEqual(Array.from({ length: 40 }, (_, index) => index + 2));

      clientA.close();
      await a.stop();
      a = await startSidecar(storeArgs);
      clientA = grpcJsClient(`127.0.0.1:${a.port}`);
      const afterRestart = (await clientA.unary(ContextService.method.compile, stateless)).result!;
      expect(afterRestart.calibration).toMatchObject({ correction: 2, reports: 41n, storeReadError: "" });
      expect(afterRestart.usage!.limit).toBe(50n);
    } finally {
      clientA.close();
      clientB.close();
      await Promise.all([a.stop(), b.stop()]);
    }
  });
});

describe("token calibration while the store is down (real sidecar, real redis-server)", () => {
  it("compiles with the last known correction, saying the store could not be read, and answers reports UNAVAILABLE until it is back", async () => {
    const redis = await startRedis();
    const sidecar = await startSidecar(["--redis-url", redis.url, "--calibration-refresh-ms", "0"]);
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    const stateless = {
      history: { messages: [textMessage("u", Role.USER, "hello")] },
      budget: { maxTokens: 100n, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } },
      render: { provider: Provider.OPENAI_CHAT, model: "gpt-down" },
    };
    const usage = { provider: Provider.OPENAI_CHAT, model: "gpt-down", estimator: EstimatorKind.FIXED, estimatedTokens: 100n, actualInputTokens: 150n };
    try {
      await client.unary(ContextService.method.reportUsage, usage);
      await redis.stop();
      const compiled = (await client.unary(ContextService.method.compile, stateless)).result!;
      expect(compiled.calibration).toMatchObject({ correction: 1.5, reports: 1n });
      expect(compiled.calibration!.storeReadError).toMatch(/^reading the correction from the store failed: redis store unavailable while reading a token calibration at redis:\/\/127\.0\.0\.1:\d+\/?: /);
      expect(compiled.usage!.limit).toBe(66n);
      const refused = await failure(client.unary(ContextService.method.reportUsage, usage));
      expect(refused.code).toBe(grpc.status.UNAVAILABLE);
      expect(refused.details).toMatch(/^redis store unavailable while reporting usage at /);
      await redis.restart();
      await expect.poll(async () => (await client.unary(ContextService.method.reportUsage, usage).catch(() => undefined))?.reports, { timeout: 10_000 }).toBe(2n);
      expect((await client.unary(ContextService.method.compile, stateless)).result!.calibration).toMatchObject({ correction: 1.5, reports: 2n, storeReadError: "" });
    } finally {
      client.close();
      await sidecar.stop();
      await redis.stop();
    }
  });
});

/** The gRPC error a call failed with. */
async function failure(call: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await call;
  } catch (error) {
    return error as grpc.ServiceError;
  }
  throw new Error("expected the call to fail");
}
