import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EstimatorKind, TransformationReason } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { appendHistory, textMessage } from "../../store/fixtures.js";
import { startOtlpGrpcReceiver, startOtlpReceiver, type ReceivedSpan } from "../../support/otlp-receiver.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

// Tracing end to end: a real sidecar process configured only by the standard OTEL_* variables
// exports OTLP/HTTP protobuf to a receiver in this test, which decodes the spans.

// The compile's stages, in order, as a compile reports them in `stage_timings`.
const stagesOf = (result: { stageTimings: { stage: string }[] } | undefined) => result!.stageTimings.map((timing) => `compile.${timing.stage}`);

describe("OpenTelemetry tracing (real sidecar, real OTLP/HTTP receiver)", () => {
  let receiver: Awaited<ReturnType<typeof startOtlpReceiver>>;
  let sidecar: Sidecar;
  let context: ReturnType<typeof createClient<typeof ContextService>>;
  let conversations: ReturnType<typeof createClient<typeof ConversationService>>;

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    sidecar = await startSidecar([], {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_SERVICE_NAME: "contextd-under-test",
      OTEL_RESOURCE_ATTRIBUTES: "deployment.environment.name=test",
      OTEL_BSP_SCHEDULE_DELAY: "50",
    });
    const transport = createConnectTransport({ baseUrl: sidecar.url, httpVersion: "1.1" });
    context = createClient(ContextService, transport);
    conversations = createClient(ConversationService, transport);
  });
  afterAll(async () => {
    await sidecar?.stop();
    await receiver?.close();
  });

  const spansOf = async (traceId: string, atLeast: number): Promise<ReceivedSpan[]> => {
    await expect.poll(() => receiver.spans.filter((span) => span.traceId === traceId).length, { timeout: 10_000 }).toBeGreaterThanOrEqual(atLeast);
    return receiver.spans.filter((span) => span.traceId === traceId);
  };

  it("makes a span per RPC under the caller's traceparent, with stage and store spans as its children and GenAI attributes", async () => {
    const conversationId = "traced/one";
    await conversations.commit({
      conversationId,
      expectedVersion: 0n,
      deltas: [appendHistory(textMessage("u1", Role.USER, "a".repeat(400)), textMessage("a1", Role.ASSISTANT, "b".repeat(400)))],
    });
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
    const callerSpan = "00f067aa0ba902b7";
    const response = await context.compile(
      {
        conversationId,
        currentTurn: { raw: textMessage("u2", Role.USER, "and now?") },
        render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" },
        budget: { maxTokens: 150n, estimator: { kind: EstimatorKind.CHARS } },
        commit: { expectedVersion: 1n },
      },
      { headers: { traceparent: `00-${traceId}-${callerSpan}-01` } },
    );
    expect(response.result!.committedVersion).toBe(2n);
    const stages = stagesOf(response.result);
    expect(stages.length).toBeGreaterThanOrEqual(12);

    const spans = await spansOf(traceId, 1 + stages.length + 2);
    const rpc = spans.find((span) => span.name === "contextd.v1.ContextService/Compile")!;
    expect(rpc, spans.map((span) => span.name).join(", ")).toBeDefined();
    expect(rpc.parentSpanId).toBe(callerSpan);
    expect(rpc.kind).toBe(2); // SPAN_KIND_SERVER
    expect(rpc.resource["service.name"]).toBe("contextd-under-test");
    expect(rpc.resource["deployment.environment.name"]).toBe("test");
    expect(rpc.attributes).toMatchObject({
      "rpc.system": "grpc",
      "rpc.service": "contextd.v1.ContextService",
      "rpc.method": "Compile",
      "rpc.grpc.status_code": 0,
      "gen_ai.provider.name": "openai",
      "gen_ai.request.model": "gpt-4o",
      "contextd.conversation.id": conversationId,
      "contextd.conversation.version": 1,
      "contextd.conversation.committed_version": 2,
      "gen_ai.usage.input_tokens": Number(response.result!.usage!.total),
      "contextd.tokens.limit": 150,
      "contextd.tokens.trimmed": Number(response.result!.usage!.historyBeforeTrim - response.result!.usage!.history),
    });
    expect(rpc.attributes["contextd.tokens.trimmed"]).toBeGreaterThan(0);
    // The budget trimmed the head of the history: one span event for the run, with its size.
    const headRun = rpc.events.find((event) => event.name === "contextd.history_head_dropped");
    expect(headRun?.attributes["contextd.messages.count"]).toBeGreaterThan(0);

    const children = spans.filter((span) => span.parentSpanId === rpc.spanId);
    expect(children.filter((span) => span.name.startsWith("compile.")).map((span) => span.name)).toEqual(stages);
    // The first compile rendering for gpt-4o reads its calibration correction from the store.
    expect(children.filter((span) => span.name.startsWith("store.")).map((span) => span.name).sort()).toEqual(["store.commit", "store.load", "store.read_calibration"]);
    const load = children.find((span) => span.name === "store.load")!;
    expect(load.attributes["contextd.conversation.id"]).toBe(conversationId);
    // Every child lies within the RPC's span.
    for (const child of children) {
      expect(child.startNs >= rpc.startNs && child.endNs <= rpc.endNs, child.name).toBe(true);
    }
  });

  it("adds a contextd.message_cleared event per cleared message to the compile's span, with its reason and freed tokens", async () => {
    const traceId = "6bf92f3577b34da6a3ce929d0e0e4738";
    const rounds = Array.from({ length: 4 }, (_, index) => [
      textMessage(`u${index}`, Role.USER, `question ${index}`),
      { id: `a${index}`, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall" as const, value: { id: `c${index}`, name: "read_file" } } }] },
      { id: `t${index}`, role: Role.TOOL, parts: [{ kind: { case: "toolResult" as const, value: { toolCallId: `c${index}`, name: "read_file", payload: { text: "x".repeat(2_000) } } } }] },
    ]).flat();
    const response = await context.compile(
      { history: { messages: rounds }, budget: { maxTokens: 3_000n, estimator: { kind: EstimatorKind.CHARS }, toolResultClearing: { keepRecent: 1 } } },
      { headers: { traceparent: `00-${traceId}-00f067aa0ba902b9-01` } },
    );
    const spans = await spansOf(traceId, 1);
    const rpc = spans.find((span) => span.name === "contextd.v1.ContextService/Compile")!;
    const cleared = rpc.events.filter((event) => event.name === "contextd.message_cleared");
    expect(cleared.map((event) => event.attributes["contextd.message.id"]).sort()).toEqual(["t0", "t1", "t2"]);
    expect(cleared.every((event) => event.attributes["contextd.reason"] === TransformationReason.TOOL_RESULT_CLEARED)).toBe(true);
    expect(cleared.reduce((sum, event) => sum + Number(event.attributes["contextd.freed_tokens"]), 0)).toBe(Number(response.result!.usage!.clearedTokens));
  });

  it("starts a new trace without traceparent, and marks a failed RPC with its gRPC code", async () => {
    const before = new Set(receiver.spans.map((span) => span.spanId));
    await expect(conversations.getState({ conversationId: "" })).rejects.toThrow();
    await expect.poll(() => receiver.spans.some((span) => !before.has(span.spanId) && span.name === "contextd.v1.ConversationService/GetState"), { timeout: 10_000 }).toBe(true);
    const failed = receiver.spans.find((span) => !before.has(span.spanId) && span.name === "contextd.v1.ConversationService/GetState")!;
    expect(failed.parentSpanId).toBe("");
    expect(failed.attributes["rpc.grpc.status_code"]).toBe(3); // INVALID_ARGUMENT
    expect(failed.statusCode).toBe(2);
    expect(failed.statusMessage).toContain("conversation_id");
  });

  it("spans a streaming compile's stages under its RPC span", async () => {
    const traceId = "5bf92f3577b34da6a3ce929d0e0e4737";
    const stream = context.compileStream(
      { request: { history: { messages: [textMessage("u1", Role.USER, "hello")] }, budget: { maxTokens: 100n, estimator: { kind: EstimatorKind.CHARS } } } },
      { headers: { traceparent: `00-${traceId}-00f067aa0ba902b8-01` } },
    );
    let result;
    for await (const item of stream) if (item.kind.case === "result") result = item.kind.value;
    const stages = stagesOf(result);
    const spans = await spansOf(traceId, 1 + stages.length);
    const rpc = spans.find((span) => span.name === "contextd.v1.ContextService/CompileStream")!;
    expect(spans.filter((span) => span.parentSpanId === rpc.spanId && span.name.startsWith("compile.")).length).toBe(stages.length);
  });
});

describe("tracing is off by default", () => {
  it("exports nothing when OTEL_SDK_DISABLED=true, even with an endpoint set", async () => {
    const receiver = await startOtlpReceiver();
    const sidecar = await startSidecar([], { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_SDK_DISABLED: "true", OTEL_BSP_SCHEDULE_DELAY: "10" });
    try {
      const transport = createConnectTransport({ baseUrl: sidecar.url, httpVersion: "1.1" });
      await createClient(ContextService, transport).compile({ history: { messages: [textMessage("u1", Role.USER, "hello")] } });
      const started = JSON.parse(sidecar.logs.find((line) => line.includes("contextd listening"))!) as { tracing: string };
      expect(started.tracing).toBe("off");
    } finally {
      expect(await sidecar.stop()).toBe(0);
      await receiver.close();
    }
    // The sidecar has exited, so anything it would have exported has been sent.
    expect(receiver.requests).toEqual([]);
  });

  it("exports over OTLP/gRPC with OTEL_EXPORTER_OTLP_PROTOCOL=grpc", async () => {
    const receiver = await startOtlpGrpcReceiver();
    const sidecar = await startSidecar([], { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_EXPORTER_OTLP_PROTOCOL: "grpc", OTEL_BSP_SCHEDULE_DELAY: "50" });
    try {
      const transport = createConnectTransport({ baseUrl: sidecar.url, httpVersion: "1.1" });
      const traceId = "6bf92f3577b34da6a3ce929d0e0e4738";
      const response = await createClient(ContextService, transport).compile({ history: { messages: [textMessage("u1", Role.USER, "hello")] } }, { headers: { traceparent: `00-${traceId}-00f067aa0ba902b9-01` } });
      const stages = stagesOf(response.result);
      await expect.poll(() => receiver.spans.filter((span) => span.traceId === traceId).length, { timeout: 10_000 }).toBeGreaterThanOrEqual(1 + stages.length);
      const rpc = receiver.spans.find((span) => span.traceId === traceId && span.name === "contextd.v1.ContextService/Compile")!;
      expect(rpc.parentSpanId).toBe("00f067aa0ba902b9");
      expect(receiver.spans.filter((span) => span.parentSpanId === rpc.spanId).map((span) => span.name)).toEqual(stages);
    } finally {
      await sidecar.stop();
      await receiver.close();
    }
  });

  it("refuses an OTLP protocol it does not speak, naming the variable", async () => {
    await expect(startSidecar([], { OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:1", OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" })).rejects.toThrow(/OTEL_EXPORTER_OTLP_TRACES_PROTOCOL "http\/json"/);
  });
});
