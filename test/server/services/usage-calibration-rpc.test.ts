import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompileResultPart, EstimatorKind } from "../../../gen/ts/contextd/v1/compile_pb.js";
import { ContextService } from "../../../gen/ts/contextd/v1/context_service_pb.js";
import { ConversationService } from "../../../gen/ts/contextd/v1/conversation_service_pb.js";
import { Provider, Role } from "../../../gen/ts/contextd/v1/message_pb.js";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
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

/** The gRPC error a call failed with. */
async function failure(call: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await call;
  } catch (error) {
    return error as grpc.ServiceError;
  }
  throw new Error("expected the call to fail");
}
