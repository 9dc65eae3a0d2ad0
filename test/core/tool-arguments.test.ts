import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import {
  CompileRequestSchema,
  EstimatorKind,
  ToolArgumentsRepair,
  TokenizerEncoding,
  TransformationAction,
  TransformationReason,
  type CompileRequest,
} from "#gen/contextd/v1/compile_pb";
import { Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, Segment, type ConversationState } from "#gen/contextd/v1/state_pb";
import { compile } from "../../src/core/compile/compile.js";
import { applyDeltas } from "../../src/core/deltas/apply-deltas.js";
import { encodingOfModel } from "../../src/core/tokens/model-encodings.js";
import { appendHistory, delta } from "../store/fixtures.js";
import { testContext } from "./compile-context.js";
import { assistant, call, message, result, user } from "./messages.js";

type Init = Parameters<typeof create<typeof CompileRequestSchema>>[1];
const request = (init: Init): CompileRequest => create(CompileRequestSchema, init);
const ids = (messages: readonly Message[]) => messages.map((m) => m.id);

function thrown(run: () => unknown): ConnectError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(ConnectError);
    return error as ConnectError;
  }
  throw new Error("expected an error");
}

async function rejected(promise: Promise<unknown>): Promise<ConnectError> {
  const error = await promise.then(() => undefined, (reason: unknown) => reason);
  expect(error).toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

/** A conversation stored before commits checked arguments. */
const legacy = (): ConversationState =>
  create(ConversationStateSchema, {
    conversationId: "c",
    version: 2n,
    history: [user("u1", "Weather in Oslo?"), message(Role.ASSISTANT, "a1", call("k1", "weather", "city=Oslo")), message(Role.TOOL, "t1", result("k1", "rain", "weather")), assistant("a2", "Rain."), user("u2", "Thanks")],
  });

describe("tool-call arguments at the door", () => {
  it("are refused at commit unless they are a JSON object, naming the delta, the path and the message", () => {
    const state = create(ConversationStateSchema, { conversationId: "c" });
    const context = { newMessageId: () => "new" };
    for (const [args, problem] of [["city=Oslo", "not valid JSON"], ["[1,2]", "not a JSON object but a JSON array"], ['"Oslo"', "not a JSON object but a JSON string"], ["null", "not a JSON object but null"]] as const) {
      const error = thrown(() => applyDeltas(state, [appendHistory(user("u", "hi")), appendHistory(message(Role.ASSISTANT, "a1", "ok", call("k1", "weather", args)))], context));
      expect(error.code).toBe(Code.InvalidArgument);
      expect(error.rawMessage).toBe(
        `deltas[1].append_messages: messages[0].parts[1].tool_call.arguments: the arguments of tool call "k1" must be a JSON object, got ${JSON.stringify(args)} (${problem}) (message "a1")`,
      );
    }
    // Arguments given as text are checked the same way.
    const textForm = thrown(() => applyDeltas(state, [delta({ case: "appendAssistant", value: { text: "Let me check.", toolCalls: [{ id: "k2", name: "weather", arguments: { text: "x y" } }] } })], context));
    expect(textForm.rawMessage).toBe('deltas[0].append_assistant: message.parts[1].tool_call.arguments: the arguments of tool call "k2" must be a JSON object, got "x y" (not valid JSON) (message "new")');
    // Objects, whitespace around them and no arguments at all pass.
    const ok = applyDeltas(state, [appendHistory(user("u", "hi"), message(Role.ASSISTANT, "a", call("k1", "weather", ' {"city":"Oslo"} '), call("k2", "weather", "")))], context);
    expect(ok.history).toHaveLength(2);
  });

  it("stored before the check may be stored again as they are, by replace_segment", () => {
    const state = legacy();
    const context = { newMessageId: () => "new" };
    const replace = (messages: Message[]) => delta({ case: "replaceSegment", value: { segment: Segment.HISTORY, messages } });
    // A compile-commit's writeback re-sends the stored history with the new turn.
    const next = applyDeltas(state, [replace([...state.history, user("u3", "And tomorrow?")])], context);
    expect(ids(next.history)).toEqual(["u1", "a1", "t1", "a2", "u2", "u3"]);
    // A changed invalid call, or one under a new id, is new input and refused.
    const changed = message(Role.ASSISTANT, "a1", call("k1", "weather", "city=Bergen"));
    expect(thrown(() => applyDeltas(state, [replace([state.history[0]!, changed, ...state.history.slice(2)])], context)).rawMessage).toContain('got "city=Bergen" (not valid JSON) (message "a1")');
    const renamed = message(Role.ASSISTANT, "a9", call("k1", "weather", "city=Oslo"));
    expect(thrown(() => applyDeltas(state, [replace([state.history[0]!, renamed, ...state.history.slice(2)])], context)).rawMessage).toContain('(message "a9")');
  });

  it("are refused when a provider response is appended", () => {
    const state = create(ConversationStateSchema, { conversationId: "c", history: [user("u", "hi")] });
    const body = { choices: [{ message: { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: "city=Oslo" } }] } }] };
    const error = thrown(() =>
      applyDeltas(state, [delta({ case: "appendProviderResponse", value: { provider: Provider.OPENAI_CHAT, json: new TextEncoder().encode(JSON.stringify(body)) } })], { newMessageId: () => "resp-1" }),
    );
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toBe(
      'deltas[0].append_provider_response: parsed[0].parts[0].tool_call.arguments: the arguments of tool call "call_1" must be a JSON object, got "city=Oslo" (not valid JSON) (message "resp-1")',
    );
  });

  it("are refused in compile requests: history, pending and the current turn", async () => {
    const bad = message(Role.ASSISTANT, "a1", call("k1", "weather", "city=Oslo"));
    const cases: [Init, string][] = [
      [{ history: { messages: [user("u", "x"), bad, message(Role.TOOL, "t1", result("k1", "r", "weather"))] } }, 'history[1].parts[0].tool_call.arguments: the arguments of tool call "k1" must be a JSON object, got "city=Oslo" (not valid JSON) (message "a1")'],
      [{ history: { messages: [user("u", "x")] }, pending: [bad] }, 'pending[0].parts[0].tool_call.arguments: the arguments of tool call "k1" must be a JSON object, got "city=Oslo" (not valid JSON) (message "a1")'],
      // A request override of a stored conversation is the caller's input too.
      [{ conversationId: "c", history: { messages: [user("u", "x"), bad] } }, 'history[1].parts[0].tool_call.arguments'],
    ];
    for (const [init, expected] of cases) {
      const error = await rejected(compile(request(init), { ...testContext(), stored: legacy() }));
      expect(error.code).toBe(Code.InvalidArgument);
      expect(error.rawMessage).toContain(expected);
    }
  });
});

describe("stored tool-call arguments that are not a JSON object", () => {
  const anthropic = { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-x" };
  const body = (json: Uint8Array) => JSON.parse(new TextDecoder().decode(json)) as { messages: { role: string; content: { type: string; input?: unknown }[] }[] };

  it("render as one string argument by default, without changing what is stored", async () => {
    const result = await compile(request({ conversationId: "c", render: anthropic }), { ...testContext(), stored: legacy() });
    const toolUse = body(result.rendered!.json).messages[1]!.content[0]!;
    expect(toolUse).toEqual({ type: "tool_use", id: "k1", name: "weather", input: { raw_arguments: "city=Oslo" } });
    expect(result.transformations["a1"]).toMatchObject({ action: TransformationAction.FORMATTED, reason: TransformationReason.TOOL_ARGUMENTS_REPAIR });
    expect(result.warnings.find((w) => w.code === "tool_arguments_repaired")!.message).toContain('history[1] (message "a1"): the arguments of tool call "k1" (not valid JSON) are not a JSON object');
    const storedCall = result.persistence!.history[1]!.parts[0]!.kind;
    expect(storedCall.case === "toolCall" && storedCall.value.arguments!.data).toBe("city=Oslo");
    // Gemini and the OpenAI bodies render too.
    for (const provider of [Provider.GEMINI, Provider.OPENAI_CHAT, Provider.OPENAI_RESPONSES]) {
      await expect(compile(request({ conversationId: "c", render: { provider, model: "m" } }), { ...testContext(), stored: legacy() })).resolves.toBeDefined();
    }
  });

  it("drop the whole round with DROP_ROUND", async () => {
    const result = await compile(request({ conversationId: "c", render: anthropic, toolArgumentsRepair: ToolArgumentsRepair.DROP_ROUND }), { ...testContext(), stored: legacy() });
    expect(ids(result.payload!.history)).toEqual(["u1", "a2", "u2"]);
    for (const id of ["a1", "t1"]) expect(result.transformations[id]).toMatchObject({ action: TransformationAction.DROPPED, reason: TransformationReason.TOOL_ARGUMENTS_REPAIR });
    expect(result.warnings.find((w) => w.code === "tool_arguments_repaired")!.message).toContain("dropped 2 message(s) of its round");
    expect(body(result.rendered!.json).messages.map((m) => m.role)).toEqual(["user", "assistant", "user"]);
    // A removal, like tool-round repair: the persistence projection leaves the round out too.
    expect(ids(result.persistence!.history)).toEqual(["u1", "a2", "u2"]);
  });

  it("apply to targets too", async () => {
    const result = await compile(request({ conversationId: "c", targets: [{ name: "claude", render: anthropic }] }), { ...testContext(), stored: legacy() });
    expect(body(result.projections[0]!.rendered!.json).messages[1]!.content[0]!.input).toEqual({ raw_arguments: "city=Oslo" });
  });
});

describe("the estimator picked from the render model", () => {
  it("maps model names to encodings by prefix", () => {
    expect(encodingOfModel("gpt-4o")).toBe(TokenizerEncoding.O200K_BASE);
    expect(encodingOfModel("gpt-4o-mini-2024-07-18")).toBe(TokenizerEncoding.O200K_BASE);
    expect(encodingOfModel("openai/gpt-4.1")).toBe(TokenizerEncoding.O200K_BASE);
    expect(encodingOfModel("o3-mini")).toBe(TokenizerEncoding.O200K_BASE);
    expect(encodingOfModel("gpt-4-turbo")).toBe(TokenizerEncoding.CL100K_BASE);
    expect(encodingOfModel("gpt-3.5-turbo")).toBe(TokenizerEncoding.CL100K_BASE);
    expect(encodingOfModel("gpt-oss-120b")).toBe(TokenizerEncoding.O200K_HARMONY);
    for (const unknown of ["claude-sonnet-4-5", "gemini-2.5-pro", "o1x", "gpt-40", "test-model", ""]) expect(encodingOfModel(unknown), unknown).toBeUndefined();
  });

  it("counts with the model's tokenizer when no estimator is set, and chars/4 otherwise", async () => {
    const history = { messages: [user("u", "Tokenizers count this sentence differently from chars/4.")] };
    const known = await compile(request({ history, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" } }), testContext());
    expect(known.usage!.estimator).toBe(EstimatorKind.TOKENIZER);
    const explicit = await compile(request({ history, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" }, budget: { estimator: { kind: EstimatorKind.TOKENIZER, encoding: TokenizerEncoding.O200K_BASE } } }), testContext());
    expect(known.usage!.total).toBe(explicit.usage!.total);
    const unknown = await compile(request({ history, render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-sonnet-4-5" } }), testContext());
    expect(unknown.usage!.estimator).toBe(EstimatorKind.CHAR_FALLBACK);
    const chosen = await compile(request({ history, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" }, budget: { estimator: { kind: EstimatorKind.CHAR_FALLBACK } } }), testContext());
    expect(chosen.usage!.estimator).toBe(EstimatorKind.CHAR_FALLBACK);
    const ratio = await compile(request({ history, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" }, budget: { estimator: { charsPerToken: 2 } } }), testContext());
    expect(ratio.usage!.estimator).toBe(EstimatorKind.CHAR_FALLBACK);
    // A target picks from its own render model.
    const targets = await compile(request({ history, targets: [{ name: "gpt", render: { provider: Provider.OPENAI_CHAT, model: "gpt-4.1-mini" } }, { name: "gemini", render: { provider: Provider.GEMINI, model: "gemini-2.5-pro" } }] }), testContext());
    expect(targets.projections.map((projection) => projection.usage!.estimator)).toEqual([EstimatorKind.TOKENIZER, EstimatorKind.CHAR_FALLBACK]);
  });
});
