import * as grpc from "@grpc/grpc-js";
import { create, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { CompileSessionRequestSchema, ContextService } from "#gen/contextd/v1/context_service_pb";
import { CommitRequestSchema, ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Provider, Role } from "#gen/contextd/v1/message_pb";
import { TelemetryService } from "#gen/contextd/v1/telemetry_service_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { stringLimits } from "../../../src/core/model/string-limits.js";
import { grpcJsClient } from "../../support/grpc-js.js";
import { sidecarStores, startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, delta, textMessage } from "../../store/fixtures.js";

// Every id, key, model and name a request carries is bounded (core/model/string-limits.ts) and
// refused at the door with INVALID_ARGUMENT naming the field and the limit: on every store, on the
// direct gRPC path, through connect (binary and JSON), unary and streaming, and for what a
// provider body brings in. Ids at the limit are stored, also by Postgres, whose btree refused
// ids over 2,704 bytes with INTERNAL (issue 29 #11).
describe.each(sidecarStores)("request string limits (%s, real sidecar)", (_name, startStore) => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  let stopStore: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    const store = await startStore();
    stopStore = store.stop;
    sidecar = await startSidecar(store.args);
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
    await stopStore?.();
  });

  const longId = (prefix: string, bytes: number) => prefix + "x".repeat(bytes - prefix.length);
  const refusal = (field: string, bytes: number, limit: number, what: string) =>
    `${field} has ${bytes} bytes, over the limit of ${limit} bytes for ${what} (docs/limits.md)`;
  const stillServing = async () => expect((await client.unary(Health.method.check, { service: "" })).status).toBe(ServingStatus.SERVING);

  it("stores a conversation id and an idempotency key at the limit, and replays the key", async () => {
    const conversationId = longId("limits/at-", stringLimits.id);
    const key = longId("key-", stringLimits.idempotencyKey);
    const request = { conversationId, idempotencyKey: key, deltas: [appendHistory(textMessage(longId("m", stringLimits.id), Role.USER, "hi"))] };
    expect(await client.unary(ConversationService.method.commit, request)).toMatchObject({ version: 1n, replayed: false });
    expect(await client.unary(ConversationService.method.commit, request)).toMatchObject({ version: 1n, replayed: true });
    const state = (await client.unary(ConversationService.method.getState, { conversationId })).state!;
    expect(state.history[0]!.id).toHaveLength(stringLimits.id);
  });

  it("refuses an id or key one byte over on the direct gRPC path, naming the field and the limit; nothing is stored", async () => {
    const conversationId = longId("limits/over-", stringLimits.id + 1);
    await expect(client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] })).rejects.toMatchObject({
      code: grpc.status.INVALID_ARGUMENT,
      details: refusal("conversation_id", stringLimits.id + 1, stringLimits.id, "ids"),
    });
    await expect(
      client.unary(ConversationService.method.commit, { conversationId: "limits/key", idempotencyKey: "k".repeat(stringLimits.idempotencyKey + 1), deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] }),
    ).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: refusal("idempotency_key", 1025, 1024, "idempotency keys") });
    // Bytes, not characters: 342 three-byte characters are 1,026 bytes.
    const wide = "€".repeat(342);
    await expect(client.unary(ConversationService.method.getState, { conversationId: wide })).rejects.toMatchObject({
      code: grpc.status.INVALID_ARGUMENT,
      details: refusal("conversation_id", 1026, 1024, "ids"),
    });
    expect((await client.unary(ConversationService.method.getState, { conversationId: "limits/key" })).state!.version).toBe(0n);
    await stillServing();
  });

  it("answers a 3,000-byte id or key INVALID_ARGUMENT, not INTERNAL (Postgres: index row size exceeds btree)", async () => {
    for (const request of [
      { conversationId: longId("limits/pg-", 3_000), deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] },
      { conversationId: "limits/pg-key", idempotencyKey: "k".repeat(3_000), deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] },
    ]) {
      await expect(client.unary(ConversationService.method.commit, request)).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: expect.stringMatching(/has 3000 bytes, over the limit of 1024 bytes/) });
    }
    await stillServing();
  });

  it("names the path of a nested id: messages, tool calls, results and stream item ids", async () => {
    const over = "i".repeat(stringLimits.id + 1);
    const cases: [object, string][] = [
      [appendHistory(textMessage(over, Role.USER, "hi")), "deltas[0].append_messages.messages[0].id"],
      [
        appendHistory(create(MessageSchema, { id: "a1", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: over, name: "lookup" } } }] })),
        "deltas[0].append_messages.messages[0].parts[0].tool_call.id",
      ],
      [
        appendHistory(create(MessageSchema, { id: "a1", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "c1", name: "lookup", itemId: over } } }] })),
        "deltas[0].append_messages.messages[0].parts[0].tool_call.item_id",
      ],
      [delta({ case: "removeMessages", value: { ids: ["ok", over] } }), "deltas[0].remove_messages.ids[1]"],
      [delta({ case: "appendToolResult", value: { toolCallId: over, name: "lookup", payload: { text: "r" } } }), "deltas[0].append_tool_result.tool_call_id"],
    ];
    for (const [operation, field] of cases) {
      await expect(client.unary(ConversationService.method.commit, { conversationId: "limits/nested", deltas: [operation as never] })).rejects.toMatchObject({
        code: grpc.status.INVALID_ARGUMENT,
        details: refusal(field, stringLimits.id + 1, stringLimits.id, "ids"),
      });
    }
    const toolName = "t".repeat(stringLimits.name + 1);
    await expect(
      client.unary(ConversationService.method.commit, {
        conversationId: "limits/nested",
        deltas: [appendHistory(create(MessageSchema, { id: "a1", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "c1", name: toolName } } }] }))],
      }),
    ).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: refusal("deltas[0].append_messages.messages[0].parts[0].tool_call.name", 257, 256, "names") });
    expect((await client.unary(ConversationService.method.getState, { conversationId: "limits/nested" })).state!.version).toBe(0n);
  });

  it("bounds ids a provider body brings in like the request's own", async () => {
    const body = { id: "msg_1", type: "message", role: "assistant", model: "m", content: [{ type: "tool_use", id: "c".repeat(stringLimits.id + 1), name: "lookup", input: {} }], stop_reason: "tool_use" };
    const error = await client
      .unary(ConversationService.method.commit, {
        conversationId: "limits/provider",
        deltas: [delta({ case: "appendProviderResponse", value: { provider: Provider.ANTHROPIC_MESSAGES, json: new TextEncoder().encode(JSON.stringify(body)) } })],
      })
      .catch((caught: grpc.ServiceError) => caught);
    expect(error).toMatchObject({ code: grpc.status.INVALID_ARGUMENT });
    expect((error as grpc.ServiceError).details).toContain(refusal("messages[0].parts[0].tool_call.id", 1025, 1024, "ids"));
    expect((error as grpc.ServiceError).details).toMatch(/^deltas\[0\]/);
  });

  it("bounds render.model at compile and compile-commit, and ReportUsage's model", async () => {
    const model = "m".repeat(stringLimits.model + 1);
    await expect(client.unary(ContextService.method.compile, { render: { provider: Provider.ANTHROPIC_MESSAGES, model } })).rejects.toMatchObject({
      code: grpc.status.INVALID_ARGUMENT,
      details: refusal("render.model", 257, 256, "models"),
    });
    await expect(
      client.unary(ContextService.method.compile, {
        conversationId: "limits/compile-commit",
        commit: { idempotencyKey: "k".repeat(1025), deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] },
      }),
    ).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: refusal("commit.idempotency_key", 1025, 1024, "idempotency keys") });
    await expect(
      client.unary(ContextService.method.reportUsage, { provider: Provider.ANTHROPIC_MESSAGES, model, estimator: EstimatorKind.FIXED, estimatedTokens: 10n, actualInputTokens: 10n }),
    ).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: refusal("model", 257, 256, "models") });
    await stillServing();
  });

  it("checks streamed requests message by message: CompileSession, WatchEvents, Watch", async () => {
    const session = client.bidiStream(ContextService.method.compileSession);
    const ended = new Promise<grpc.ServiceError>((resolve) => session.on("error", resolve));
    session.on("data", () => {});
    session.write(create(CompileSessionRequestSchema, { kind: { case: "compile", value: { conversationId: "s".repeat(1025) } } }));
    expect(await ended).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: refusal("compile.conversation_id", 1025, 1024, "ids") });
    for (const stream of [
      client.serverStream(TelemetryService.method.watchEvents, { conversationId: "w".repeat(1025) }),
      client.serverStream(ConversationService.method.watch, { conversationId: "w".repeat(1025) }),
    ]) {
      stream.on("data", () => {});
      const error = await new Promise<grpc.ServiceError>((resolve) => stream.on("error", resolve));
      expect(error).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: refusal("conversation_id", 1025, 1024, "ids") });
    }
  });

  it("answers the same through connect, binary and JSON", async () => {
    const conversationId = "c".repeat(1025);
    const message = refusal("conversation_id", 1025, 1024, "ids");
    const json = await fetch(`${sidecar.url}/contextd.v1.ConversationService/Commit`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ conversationId, deltas: [{ appendMessages: { segment: "SEGMENT_HISTORY", messages: [{ id: "u1", role: "ROLE_USER" }] } }] }),
    });
    expect(json.status).toBe(400);
    expect(await json.json()).toMatchObject({ code: "invalid_argument", message });
    const binary = await fetch(`${sidecar.url}/contextd.v1.ConversationService/Commit`, {
      method: "POST",
      headers: { "content-type": "application/proto" },
      body: toBinary(CommitRequestSchema, create(CommitRequestSchema, { conversationId, deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] })),
    });
    expect(binary.status).toBe(400);
    expect(await binary.json()).toMatchObject({ code: "invalid_argument", message });
    await stillServing();
  });
});

describe("tenants are bounded when the sidecar starts", () => {
  it("refuses a tenant longer than the limit, naming it", async () => {
    const tenant = "t".repeat(stringLimits.tenant + 1);
    await expect(startSidecar([], { CONTEXTD_AUTH_TOKENS: `token-0123456789abcdef=${tenant}` })).rejects.toThrow(
      new RegExp(`${stringLimits.tenant + 1} characters, at most ${stringLimits.tenant}`),
    );
  });
});

// Issue 29 #3: render.model had no limit and the calibration cache kept up to 1,024 model
// strings whole: 60 compiles with distinct 4 MB models took +348 MB, 56 killed a 256 MB heap.
describe("long models on a 512 MB heap (real sidecar)", () => {
  it("refuses 60 compiles with distinct 4 MB models at the door and keeps serving", async () => {
    const sidecar = await startSidecar([], { NODE_OPTIONS: "--max-old-space-size=512" });
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    try {
      for (let index = 0; index < 60; index++) {
        const model = `${index}-`.padEnd(4 * 1024 * 1024, "m");
        await expect(client.unary(ContextService.method.compile, { render: { provider: Provider.ANTHROPIC_MESSAGES, model } })).rejects.toMatchObject({
          code: grpc.status.INVALID_ARGUMENT,
          details: `render.model has ${4 * 1024 * 1024} bytes, over the limit of 256 bytes for models (docs/limits.md)`,
        });
      }
      expect((await client.unary(Health.method.check, { service: "" })).status).toBe(ServingStatus.SERVING);
      expect(sidecar.process.exitCode).toBeNull();
    } finally {
      client.close();
      await sidecar.stop();
    }
  }, 120_000);
});

