import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EstimatorKind, RedactionPattern } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { grpcJsClient } from "../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../support/sidecar.js";

// The engine-side defects of issue 15, each sent to a real sidecar as an attacker would. Each call
// has a 3 s deadline that the old code exceeded many times over (figures per case), and a health
// check sent while it runs must answer SERVING within its own 2 s deadline: on the old code the
// event loop was blocked, so it could not.

const text = (value: string) => ({ kind: { case: "text" as const, value: { text: value } } });
const userMessage = (id: string, value: string) => ({ id, role: Role.USER, parts: [text(value)] });
const toolCallMessage = (id: string, args: string) => ({
  id,
  role: Role.ASSISTANT,
  parts: [{ kind: { case: "toolCall" as const, value: { id: "c1", name: "lookup", arguments: { data: args } } } }],
});
const nestedArrays = (depth: number) => "[".repeat(depth) + "]".repeat(depth);

describe("adversarial requests to the engine (real sidecar)", () => {
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

  const withDeadline = (ms: number): grpc.CallOptions => ({ deadline: Date.now() + ms });

  /** Runs `attack`; a Health.Check goes out 100 ms later (the attack is on the server by then) and must answer. */
  async function whileHealthAnswers<T>(attack: () => Promise<T>): Promise<{ outcome: T | grpc.ServiceError }> {
    const running = attack().then(
      (value) => value,
      (error: grpc.ServiceError) => error,
    );
    await new Promise((resolve) => setTimeout(resolve, 100));
    const health = await client.unary(Health.method.check, { service: "" }, new grpc.Metadata(), withDeadline(2_000));
    expect(health.status).toBe(ServingStatus.SERVING);
    return { outcome: await running };
  }

  function expectError(outcome: unknown, code: grpc.status, pattern: RegExp): void {
    expect(outcome).toBeInstanceOf(Error);
    const error = outcome as grpc.ServiceError;
    expect(grpc.status[error.code]).toBe(grpc.status[code]);
    expect(error.details).toMatch(pattern);
  }

  it("28 nested {{content}}{{content}} templates over 1 KB: RESOURCE_EXHAUSTED naming formatter, message and limit (old: heap exhaustion or INTERNAL)", async () => {
    const formatters = Array.from({ length: 28 }, () => ({ segment: Segment.SYSTEM, kind: { case: "template" as const, value: { template: "{{content}}{{content}}" } } }));
    const { outcome } = await whileHealthAnswers(() =>
      client.unary(ContextService.method.compile, { system: { messages: [{ id: "s1", role: Role.SYSTEM, parts: [text("x".repeat(1_000))] }] }, formatters }, new grpc.Metadata(), withDeadline(3_000)),
    );
    expectError(outcome, grpc.status.RESOURCE_EXHAUSTED, /^formatters\[9\] \(message "s1"\): the compile's text would grow to 2046000 characters, over its limit of 1056576 .*--max-compile-text-bytes/);
  });

  it("{{v}} 1M times with a 400-character value: RESOURCE_EXHAUSTED before the 400 MB string (old: 22 s, 910 MB RSS)", async () => {
    const deferredBlocks = [{ segment: Segment.MEMORY, messages: [userMessage("d1", "{{v}}".repeat(1_000_000))] }];
    const { outcome } = await whileHealthAnswers(() =>
      client.unary(ContextService.method.compile, { deferredBlocks, resolveVars: { v: "y".repeat(400) } }, new grpc.Metadata(), withDeadline(3_000)),
    );
    expectError(outcome, grpc.status.RESOURCE_EXHAUSTED, /^deferred_blocks\[0\]\.messages\[0\] \(message "d1"\): resolve_vars: the compile's text would grow to 414\d{5} characters, over its limit of 41048576 /);
  });

  it("(a+)+$ over 30 a's and !: answered, unredacted (old: 16 s, doubling per character)", async () => {
    const hooks = [{ kind: { case: "redaction" as const, value: { customPatterns: [{ name: "x", regex: "(a+)+$" }] } } }];
    const { outcome } = await whileHealthAnswers(() =>
      client.unary(ContextService.method.compile, { history: { messages: [userMessage("u1", "a".repeat(30) + "!")] }, hooks }, new grpc.Metadata(), withDeadline(3_000)),
    );
    expect(outcome).not.toBeInstanceOf(Error);
    const result = (outcome as { result?: { payload?: { history: { parts: { kind: { value: { text: string } } }[] }[] } } }).result;
    expect(result!.payload!.history[0]!.parts[0]!.kind.value.text).toBe("a".repeat(30) + "!");
  });

  it("a backreference pattern: INVALID_ARGUMENT naming the pattern (RE2 runs in linear time and has none)", async () => {
    const hooks = [{ kind: { case: "redaction" as const, value: { customPatterns: [{ name: "x", regex: "(a+)\\1" }] } } }];
    const { outcome } = await whileHealthAnswers(() => client.unary(ContextService.method.compile, { hooks }, new grpc.Metadata(), withDeadline(3_000)));
    expectError(outcome, grpc.status.INVALID_ARGUMENT, /^hooks\[0\]\.redaction\.custom_patterns\[0\]\.regex is not a valid regular expression for RE2, which has no backreferences or lookaround: "\(a\+\)\\\\1": /);
  });

  it("100 KB of hex through EMAIL redaction: answered, unchanged (old: 13 s)", async () => {
    const hex = Array.from({ length: 100_000 }, (_, index) => "0123456789abcdef"[(index * 7 + 3) % 16]).join("");
    const hooks = [{ kind: { case: "redaction" as const, value: { patterns: [RedactionPattern.EMAIL] } } }];
    const { outcome } = await whileHealthAnswers(() =>
      client.unary(ContextService.method.compile, { history: { messages: [userMessage("u1", hex)] }, hooks }, new grpc.Metadata(), withDeadline(3_000)),
    );
    expect(outcome).not.toBeInstanceOf(Error);
    const result = (outcome as { result?: { payload?: { history: { parts: { kind: { value: { text: string } } }[] }[] } } }).result;
    expect(result!.payload!.history[0]!.parts[0]!.kind.value.text).toBe(hex);
  });

  it("100 KB of = through CountTokens TOKENIZER: the exact count (old: 10 s)", async () => {
    const estimator = { kind: EstimatorKind.TOKENIZER, provider: Provider.OPENAI_CHAT };
    const { outcome } = await whileHealthAnswers(() =>
      client.unary(ContextService.method.countTokens, { messages: [userMessage("u1", "=".repeat(100_000))], estimator }, new grpc.Metadata(), withDeadline(3_000)),
    );
    expect(outcome).not.toBeInstanceOf(Error);
    // 1,562 tokens of text (gpt-tokenizer's exact count) plus OpenAI's per-message framing.
    const perMessage = (outcome as { perMessage: bigint[] }).perMessage[0]!;
    expect(perMessage - 1_562n).toBeGreaterThanOrEqual(0n);
    expect(perMessage - 1_562n).toBeLessThan(10n);
  });

  it("a count that outlasts its deadline gives up with DEADLINE_EXCEEDED, and the sidecar answers meanwhile", async () => {
    // 6 MB of letters without a space: 4 to 7 s of BPE even in chunks (0.7 to 1.2 µs per character,
    // bench/token-splitting.ts), so without the deadline checks the health check below (sent at
    // 100 ms, 2 s deadline) could not be answered; the call's deadline is 1 s.
    let state = 1;
    const letters = Buffer.alloc(6_000_000);
    for (let index = 0; index < letters.length; index++) letters[index] = 97 + (((state = (Math.imul(state, 1103515245) + 12345) >>> 0) >>> 8) % 26);
    const estimator = { kind: EstimatorKind.TOKENIZER };
    const { outcome } = await whileHealthAnswers(() =>
      client.unary(ContextService.method.countTokens, { messages: [userMessage("u1", letters.toString("latin1"))], estimator }, new grpc.Metadata(), withDeadline(1_000)),
    );
    // The client's own timer ends the call at the same moment as the server's check, so either may say it.
    expectError(outcome, grpc.status.DEADLINE_EXCEEDED, /deadline/i);
  });

  it("max_tokens = 2^63-1: INVALID_ARGUMENT naming the field (old: INTERNAL)", async () => {
    const { outcome } = await whileHealthAnswers(() =>
      client.unary(ContextService.method.compile, { history: { messages: [userMessage("u1", "hi")] }, budget: { maxTokens: 2n ** 63n - 1n } }, new grpc.Metadata(), withDeadline(3_000)),
    );
    expectError(outcome, grpc.status.INVALID_ARGUMENT, /^budget\.max_tokens must be from 0 to 9007199254740991, got 9223372036854775807$/);
  });

  it("chars_per_token = 1e-300: INVALID_ARGUMENT naming the field (old: INTERNAL)", async () => {
    const { outcome } = await whileHealthAnswers(() =>
      client.unary(ContextService.method.countTokens, { messages: [userMessage("u1", "hi")], estimator: { charsPerToken: 1e-300 } }, new grpc.Metadata(), withDeadline(3_000)),
    );
    expectError(outcome, grpc.status.INVALID_ARGUMENT, /^estimator\.chars_per_token must be 0 \(= 4\) or a finite number of at least 0\.001, got 1e-300$/);
  });

  it("tool-call arguments nested 100,000 deep: INVALID_ARGUMENT with the JSON path at compile and at commit, nothing stored (old: INTERNAL, stack overflow)", async () => {
    const deep = nestedArrays(100_000);
    const path = /JSON nested deeper than 64 levels at \$(\[0\]){64}$/;
    const compiled = await whileHealthAnswers(() =>
      client.unary(ContextService.method.compile, { history: { messages: [userMessage("u1", "go"), toolCallMessage("a1", deep)] } }, new grpc.Metadata(), withDeadline(3_000)),
    );
    expectError(compiled.outcome, grpc.status.INVALID_ARGUMENT, /^history\[1\]\.parts\[0\]\.tool_call\.arguments\.data: /);
    expectError(compiled.outcome, grpc.status.INVALID_ARGUMENT, path);

    const deltas = [{ operation: { case: "appendMessages" as const, value: { segment: Segment.HISTORY, messages: [userMessage("u1", "go"), toolCallMessage("a1", deep)] } } }];
    const committed = await whileHealthAnswers(() =>
      client.unary(ConversationService.method.commit, { conversationId: "adversarial-deep", deltas }, new grpc.Metadata(), withDeadline(3_000)),
    );
    expectError(committed.outcome, grpc.status.INVALID_ARGUMENT, /^deltas\[0\]\.append_messages: messages\[1\]\.parts\[0\]\.tool_call\.arguments\.data: /);
    const state = await client.unary(ConversationService.method.getState, { conversationId: "adversarial-deep" });
    expect(state.state?.history ?? []).toHaveLength(0);

    const body = `{"id":"m","type":"message","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":${deep}}}]}`;
    const ingested = await whileHealthAnswers(() =>
      client.unary(
        ConversationService.method.commit,
        { conversationId: "adversarial-deep", deltas: [{ operation: { case: "appendProviderResponse", value: { provider: Provider.ANTHROPIC_MESSAGES, json: new TextEncoder().encode(body) } } }] },
        new grpc.Metadata(),
        withDeadline(3_000),
      ),
    );
    expectError(ingested.outcome, grpc.status.INVALID_ARGUMENT, /^deltas\[0\]\.append_provider_response: malformed provider response at \$\.content\[0\]\.input\.a(\[0\]){60}: JSON nested deeper than 64 levels$/);
  });
});

describe("the compile text limit of a sidecar started with CONTEXTD_MAX_COMPILE_TEXT_BYTES", () => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  beforeAll(async () => {
    sidecar = await startSidecar([], { CONTEXTD_MAX_COMPILE_TEXT_BYTES: "4096" });
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
  });

  it("refuses a prefix that takes the compile past 4,096 characters, and names the setting", async () => {
    const formatters = [{ segment: Segment.SYSTEM, kind: { case: "prefix" as const, value: { text: "p".repeat(5_000) } } }];
    const error = await client.unary(ContextService.method.compile, { system: { messages: [{ id: "s1", role: Role.SYSTEM, parts: [text("x")] }] }, formatters }).then(
      () => undefined,
      (thrown: grpc.ServiceError) => thrown,
    );
    expect(error?.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(error?.details).toMatch(/^formatters\[0\] \(message "s1"\): the compile's text would grow to 5001 characters, over its limit of 4096 \(.*at most 4096: --max-compile-text-bytes\)$/);
  });
});
