import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import type * as grpc from "@grpc/grpc-js";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompileResultPart, EstimatorKind, ToolArgumentsRepair, ToolRoundRepair, TransformationReason, type CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, PartSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema } from "#gen/contextd/v1/state_pb";
import { conversationKeys } from "../../../src/store/redis-scripts.js";
import { grpcJsClient, rpcFailure } from "../../support/grpc-js.js";
import { startRedis, type RedisProcess } from "../../support/redis.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, delta, textMessage } from "../../store/fixtures.js";

const callPart = (id: string, args: string) => create(PartSchema, { kind: { case: "toolCall", value: { id, name: "get_weather", arguments: { data: args } } } });
const resultPart = (id: string, text: string) => create(PartSchema, { kind: { case: "toolResult", value: { toolCallId: id, name: "get_weather", payload: { text } } } });
const withParts = (id: string, role: Role, ...parts: ReturnType<typeof callPart>[]) => create(MessageSchema, { id, role, parts });
/** q0 "Question 0", a0 "Answer 0: ...", ... */
const exchange = (pairs: number): Message[] =>
  Array.from({ length: pairs }, (_, i) => [textMessage(`q${i}`, Role.USER, `Question ${i}?`), textMessage(`a${i}`, Role.ASSISTANT, `Answer ${i}: forty-two.`)]).flat();
const ten = { kind: EstimatorKind.FIXED, fixedPerMessage: 10n };
const json = (bytes: Uint8Array) => JSON.parse(new TextDecoder().decode(bytes)) as Record<string, unknown>;

describe("trimming and rendering over gRPC (real sidecar, real Redis)", () => {
  let redis: RedisProcess;
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  let run = 0;
  const newId = () => `trim-${Date.now()}-${++run}`;
  const compile = (request: MessageInitShape<typeof CompileRequestSchema>) => client.unary(ContextService.method.compile, request).then((response) => response.result!);

  beforeAll(async () => {
    redis = await startRedis();
    sidecar = await startSidecar(["--redis-url", redis.url]);
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
    await redis?.stop();
  });

  it("keeps whole exchanges when DROP_HEAD trims: every provider's body starts on the user's question", async () => {
    for (const provider of [Provider.OPENAI_CHAT, Provider.OPENAI_RESPONSES, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI]) {
      const result = await compile({
        system: { messages: [textMessage("sys", Role.SYSTEM, "Be brief.")] },
        history: { messages: exchange(10) },
        currentTurn: { raw: textMessage("now", Role.USER, "And question 10?") },
        // 90 tokens: system and the current turn take 20, so the budget alone would keep a6..a9.
        budget: { maxTokens: 90n, estimator: ten },
        render: { provider, model: "m" },
        include: [CompileResultPart.PAYLOAD],
      });
      expect(result.payload!.history.map((m) => m.id)).toEqual(["q7", "a7", "q8", "a8", "q9", "a9", "now"]);
      expect(result.transformations["a6"]!.reason).toBe(TransformationReason.HISTORY_ALIGNMENT);
      expect(result.warnings.find((w) => w.code === "history_aligned")!.message).toContain('("a6"), so it continues at message "q7"');
      const body = json(result.rendered!.json) as { messages?: { role: string }[]; input?: { role: string }[]; contents?: { role: string }[] };
      const turns = (body.messages ?? body.input ?? body.contents)!.filter((turn) => turn.role !== "system" && turn.role !== "developer");
      expect(turns[0]!.role, Provider[provider]).toBe("user");
    }
  });

  it("protects the committed user message the compile answers, and says why when it alone is too big", async () => {
    const conversationId = newId();
    // The README's flow: commit the user's message, then compile. 2 MB against max_tokens 8000.
    const huge = textMessage("huge", Role.USER, "x".repeat(2 * 1024 * 1024));
    await client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(...exchange(2), huge)] });
    const error = await rpcFailure(compile({ conversationId, budget: { maxTokens: 8000n }, render: { provider: Provider.OPENAI_CHAT, model: "m" } }));
    expect(error.code).toBe(8);
    expect(error.details).toMatch(
      /^budget exceeded: the latest user message "huge" \(history\[4\]\) needs 524288 tokens and is protected like the current turn \(set budget\.trim_latest_user_message to let the budget drop it\); 8000 are left after 0 reserved .*the limit is 8000$/,
    );
    const small = newId();
    await client.unary(ConversationService.method.commit, { conversationId: small, deltas: [appendHistory(...exchange(4), textMessage("last", Role.USER, "Question 4?"))] });
    const kept = await compile({ conversationId: small, budget: { maxTokens: 30n, estimator: ten } });
    expect(kept.payload!.history.map((m) => m.id)).toEqual(["q3", "a3", "last"]);
  });

  it("refuses an open call followed by the current turn with the same rule for every provider (with REJECT; the default repair closes the call)", async () => {
    for (const [provider, prefix] of [[Provider.OPENAI_CHAT, "openai_chat"], [Provider.OPENAI_RESPONSES, "openai_responses"], [Provider.ANTHROPIC_MESSAGES, "anthropic"], [Provider.GEMINI, "gemini"]] as const) {
      const error = await rpcFailure(
        compile({
          history: { messages: [textMessage("u1", Role.USER, "Weather in Oslo?"), withParts("a1", Role.ASSISTANT, callPart("oc1", '{"city":"Oslo"}'))] },
          currentTurn: { raw: textMessage("u2", Role.USER, "Never mind.") },
          render: { provider, model: "m" },
          repair: ToolRoundRepair.REJECT,
        }),
      );
      expect(error.code).toBe(9);
      expect(error.details).toBe(`provider rule ${prefix}.open_call_position violated at message "a1": tool calls "oc1" have no result, and message "u2" follows; an open call may only be the last assistant turn`);
    }
  });

  it("puts images a tool returned inside Gemini's functionResponse, so user and model turns alternate", async () => {
    const image = create(PartSchema, { kind: { case: "image", value: { data: new Uint8Array([0x89, 0x50, 0x4e, 0x47]), mimeType: "image/png" } } });
    const toolResult = create(PartSchema, { kind: { case: "toolResult", value: { toolCallId: "c1", name: "get_weather", payload: { text: "map attached" }, contentParts: [image] } } });
    const result = await compile({
      history: { messages: [textMessage("u1", Role.USER, "Show the map."), withParts("a1", Role.ASSISTANT, callPart("c1", "{}")), withParts("t1", Role.TOOL, toolResult), textMessage("a2", Role.ASSISTANT, "Here it is.")] },
      currentTurn: { raw: textMessage("u2", Role.USER, "Zoom in.") },
      render: { provider: Provider.GEMINI, model: "gemini-2.5-pro" },
    });
    const contents = (json(result.rendered!.json) as { contents: { role: string; parts: Record<string, unknown>[] }[] }).contents;
    expect(contents.map((content) => content.role)).toEqual(["user", "model", "user", "model", "user"]);
    expect(contents[2]!.parts).toEqual([{ functionResponse: { id: "c1", name: "get_weather", response: { output: "map attached" }, parts: [{ inlineData: { mimeType: "image/png", data: "iVBORw==" } }] } }]);
  });

  it("refuses tool-call arguments that are not a JSON object at commit, at ingestion and in stateless compiles", async () => {
    const conversationId = newId();
    const commitError = await rpcFailure(
      client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage("u1", Role.USER, "hi")), appendHistory(withParts("a1", Role.ASSISTANT, callPart("k1", "city=Oslo")))] }),
    );
    expect(commitError.code).toBe(3);
    expect(commitError.details).toBe('deltas[1].append_messages: messages[0].parts[0].tool_call.arguments: the arguments of tool call "k1" must be a JSON object, got "city=Oslo" (not valid JSON) (message "a1")');
    // Nothing of the batch was applied.
    expect((await client.unary(ConversationService.method.getState, { conversationId })).state?.version ?? 0n).toBe(0n);

    await client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] });
    const response = { choices: [{ message: { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "[1]" } }] } }] };
    const ingestError = await rpcFailure(
      client.unary(ConversationService.method.commit, {
        conversationId,
        deltas: [delta({ case: "appendProviderResponse", value: { provider: Provider.OPENAI_CHAT, json: new TextEncoder().encode(JSON.stringify(response)) } })],
      }),
    );
    expect(ingestError.code).toBe(3);
    expect(ingestError.details).toMatch(/^deltas\[0\]\.append_provider_response: parsed\[0\]\.parts\[0\]\.tool_call\.arguments: the arguments of tool call "call_1" must be a JSON object, got "\[1\]" \(not a JSON object but a JSON array\) \(message "[^"]+"\)$/);

    const compileError = await rpcFailure(compile({ history: { messages: [textMessage("u1", Role.USER, "hi"), withParts("a1", Role.ASSISTANT, callPart("k1", "city=Oslo")), withParts("t1", Role.TOOL, resultPart("k1", "rain"))] } }));
    expect(compileError.code).toBe(3);
    expect(compileError.details).toContain('history[1].parts[0].tool_call.arguments: the arguments of tool call "k1" must be a JSON object, got "city=Oslo" (not valid JSON) (message "a1")');
  });

  it("renders a conversation stored with invalid arguments before the check: as a string argument by default, or without the round", async () => {
    // A state written by an earlier contextd, straight into Redis as the store keeps it.
    const conversationId = newId();
    const state = create(ConversationStateSchema, {
      conversationId,
      version: 1n,
      history: [textMessage("u1", Role.USER, "Weather in Oslo?"), withParts("a1", Role.ASSISTANT, callPart("k1", "city=Oslo")), withParts("t1", Role.TOOL, resultPart("k1", "rain")), textMessage("a2", Role.ASSISTANT, "Rain."), textMessage("u2", Role.USER, "Thanks!")],
    });
    const writer = new Redis(redis.url);
    const keys = conversationKeys("contextd", conversationId);
    // The layout of docs/stores.md: a header hash, one list per segment, the version.
    const rest = Buffer.from(toBinary(ConversationStateSchema, create(ConversationStateSchema, { conversationId })));
    await writer.rpush(keys.segments[1]!, ...state.history.map((message) => Buffer.from(toBinary(MessageSchema, message))));
    await writer.hset(keys.header, { created: "earlier", rest, rest_at: "1", system: "0", system_at: "1", history: String(state.history.length), history_at: "1", memory: "0", memory_at: "1", tools: "0", tools_at: "1" });
    await writer.set(keys.version, "1");
    writer.disconnect();

    const anthropic = { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-sonnet-4-5" };
    const repaired = await compile({ conversationId, render: anthropic });
    const messages = (json(repaired.rendered!.json) as { messages: { role: string; content: Record<string, unknown>[] }[] }).messages;
    expect(messages[1]!.content[0]).toEqual({ type: "tool_use", id: "k1", name: "get_weather", input: { raw_arguments: "city=Oslo" } });
    expect(repaired.warnings.map((w) => w.code)).toContain("tool_arguments_repaired");
    const dropped = await compile({ conversationId, render: anthropic, toolArgumentsRepair: ToolArgumentsRepair.DROP_ROUND, include: [CompileResultPart.PAYLOAD] });
    expect(dropped.payload!.history.map((m) => m.id)).toEqual(["u1", "a2", "u2"]);
    const gemini = await compile({ conversationId, render: { provider: Provider.GEMINI, model: "gemini-2.5-pro" } });
    const contents = (json(gemini.rendered!.json) as { contents: { parts: { functionCall?: { args: unknown } }[] }[] }).contents;
    expect(contents[1]!.parts[0]!.functionCall!.args).toEqual({ raw_arguments: "city=Oslo" });

    // A compile-commit writes the stored history back with the new turn: the old call goes with it.
    const committed = await compile({ conversationId, currentTurn: { raw: textMessage("u3", Role.USER, "And tomorrow?") }, render: anthropic, commit: { expectedVersion: 1n } });
    expect(committed.committedVersion).toBe(2n);
    const stored = (await client.unary(ConversationService.method.getState, { conversationId })).state!;
    expect(stored.history.map((m) => m.id)).toEqual(["u1", "a1", "t1", "a2", "u2", "u3"]);
    const storedCall = stored.history[1]!.parts[0]!.kind;
    expect(storedCall.case === "toolCall" && storedCall.value.arguments!.data).toBe("city=Oslo");
  });

  it("holds a target without a budget of its own to the main budget", async () => {
    const result = await compile({
      history: { messages: exchange(20) },
      currentTurn: { raw: textMessage("now", Role.USER, "Next?") },
      budget: { maxTokens: 100n, estimator: ten },
      targets: [{ name: "claude", render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-sonnet-4-5" } }],
    });
    const projection = result.projections[0]!;
    expect(projection.usage!.limit).toBe(100n);
    expect(projection.usage!.total).toBeLessThanOrEqual(100n);
    expect(projection.usage!.historyBeforeTrim).toBe(400n);
  });

  it("counts with the render model's tokenizer when no estimator is set", async () => {
    const history = { messages: [textMessage("u1", Role.USER, "Count me with o200k_base, please.")] };
    const byModel = await compile({ history, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" } });
    expect(byModel.usage!.estimator).toBe(EstimatorKind.TOKENIZER);
    const unknown = await compile({ history, render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-sonnet-4-5" } });
    expect(unknown.usage!.estimator).toBe(EstimatorKind.CHAR_FALLBACK);
  });

  it("stores other frameworks' call ids, sends each provider its form, and says which were renamed (issue 27)", async () => {
    const conversationId = newId();
    await client.unary(ConversationService.method.commit, {
      conversationId,
      deltas: [appendHistory(textMessage("u1", Role.USER, "Weather in Oslo?"), withParts("a1", Role.ASSISTANT, callPart("call/1@373", '{"city":"Oslo"}')), withParts("t1", Role.TOOL, resultPart("call/1@373", "4C")))],
    });
    const anthropic = await compile({ conversationId, render: { provider: Provider.ANTHROPIC_MESSAGES, model: "m" } });
    const messages = json(anthropic.rendered!.json)["messages"] as Array<{ content: Array<{ type: string; id?: string; tool_use_id?: string }> }>;
    const rendered = anthropic.rendered!.renamedToolCallIds;
    expect(rendered.map((entry) => [entry.messageId, entry.stored])).toEqual([["a1", "call/1@373"]]);
    expect(rendered[0]!.rendered).toMatch(/^call_1_373_[0-9a-f]{12}$/);
    expect(messages[1]!.content[0]!.id).toBe(rendered[0]!.rendered);
    expect(messages[2]!.content[0]!.tool_use_id).toBe(rendered[0]!.rendered);
    // OpenAI Chat takes any 40 characters but the same alphabet is kept; the stored state is unchanged.
    const chat = await compile({ conversationId, render: { provider: Provider.OPENAI_CHAT, model: "m" } });
    expect(chat.rendered!.renamedToolCallIds.map((entry) => entry.rendered)).toEqual([rendered[0]!.rendered]);
    const stored = (await client.unary(ConversationService.method.getState, { conversationId })).state!;
    expect(stored.history[1]!.parts[0]!.kind.value).toMatchObject({ id: "call/1@373" });
  });

  it("keeps the pending user message and drops history's older question when they do not both fit (issue 27, E1)", async () => {
    const result = await compile({
      history: { messages: [textMessage("a", Role.USER, "first"), textMessage("b", Role.ASSISTANT, "answer"), textMessage("c", Role.USER, "older question")] },
      pending: [textMessage("p", Role.USER, "the question")],
      budget: { maxTokens: 15n, estimator: ten },
      render: { provider: Provider.ANTHROPIC_MESSAGES, model: "m" },
      include: [CompileResultPart.ALL_TRANSFORMATIONS],
    });
    expect(json(result.rendered!.json)["messages"]).toEqual([{ role: "user", content: [{ type: "text", text: "the question" }] }]);
    expect(result.transformations["c"]!.reason).toBe(TransformationReason.TOKEN_BUDGET_EXCEEDED);
  });
});
