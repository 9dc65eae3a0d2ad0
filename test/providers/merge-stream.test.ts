import { create, toBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { MessageSchema, Provider, type Message } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, type Delta } from "#gen/contextd/v1/state_pb";
import { applyDeltas } from "../../src/core/deltas/apply-deltas.js";
import { readErrorDetails } from "../../src/core/model/error-details.js";
import { maxStreamEvents } from "../../src/core/providers/stream-events.js";
import { emptyConversationState } from "../../src/store/commit-plan.js";
import { thrownConnectError } from "../support/thrown.js";

const encode = (value: unknown) => new TextEncoder().encode(typeof value === "string" ? value : JSON.stringify(value));

function streamDelta(provider: Provider, events: unknown[], options: { interrupted?: boolean; abortReason?: string } = {}): Delta {
  return create(DeltaSchema, {
    operation: { case: "appendProviderStream", value: { provider, events: events.map(encode), interrupted: options.interrupted ?? false, abortReason: options.abortReason ?? "" } },
  });
}

function bodyDelta(provider: Provider, body: unknown): Delta {
  return create(DeltaSchema, { operation: { case: "appendProviderResponse", value: { provider, json: encode(body) } } });
}

function history(deltas: Delta[], conversationId = "c1"): Message[] {
  let counter = 0;
  return applyDeltas(emptyConversationState(conversationId), deltas, { newMessageId: () => `m${++counter}` }).history;
}

const hex = (messages: Message[]) => messages.map((message) => Buffer.from(toBinary(MessageSchema, message)).toString("hex"));

const anthropicStart = { type: "message_start", message: { id: "msg_1", type: "message", role: "assistant", content: [] } };
const anthropicText = [
  anthropicStart,
  { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
  { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Hel" } },
  { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "lo" } },
];

describe("append_provider_stream: OpenAI Chat", () => {
  const chunk = (delta: unknown, finish: string | null = null) => ({ object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] });

  it("gives a refusal the same text part the body gives", () => {
    const stream = streamDelta(Provider.OPENAI_CHAT, [chunk({ role: "assistant", refusal: "I can" }), chunk({ refusal: "not help." }), chunk({}, "stop")]);
    const body = bodyDelta(Provider.OPENAI_CHAT, { choices: [{ message: { role: "assistant", content: null, refusal: "I cannot help." } }] });
    expect(hex(history([stream]))).toEqual(hex(history([body])));
  });

  it("takes [DONE] as the end of a stream without a finish_reason", () => {
    const [message] = history([streamDelta(Provider.OPENAI_CHAT, [chunk({ content: "hi" }), "[DONE]"])]);
    expect(message!.parts[0]!.kind).toMatchObject({ case: "text", value: { text: "hi" } });
  });

  it("refuses a second choice, naming the event and the path", () => {
    const events = [chunk({ content: "a" }), { object: "chat.completion.chunk", choices: [{ index: 1, delta: { content: "b" } }] }];
    const error = thrownConnectError(() => history([streamDelta(Provider.OPENAI_CHAT, events)]));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toContain("deltas[0].append_provider_stream: events[1]: malformed provider response at choices[0].index");
  });

  it("refuses a tool call index that skips ahead", () => {
    const events = [chunk({ tool_calls: [{ index: 5, id: "c", type: "function", function: { name: "f", arguments: "" } }] })];
    const error = thrownConnectError(() => history([streamDelta(Provider.OPENAI_CHAT, events)]));
    expect(error.rawMessage).toContain("events[0]: malformed provider response at choices[0].delta.tool_calls[0].index: index 5 skips ahead");
  });

  it("says a streamed chunk sent as a body belongs in append_provider_stream", () => {
    const error = thrownConnectError(() => history([bodyDelta(Provider.OPENAI_CHAT, chunk({ content: "hi" }))]));
    expect(error.rawMessage).toContain("this is a stream event (chat.completion.chunk), not a response body: send a stream's events in append_provider_stream");
  });

  it("reports an error event instead of completing", () => {
    const error = thrownConnectError(() => history([streamDelta(Provider.OPENAI_CHAT, [chunk({ content: "a" }), { error: { message: "overloaded" } }, chunk({}, "stop")])]));
    expect(error.rawMessage).toContain('the stream reported error: {"message":"overloaded"}');
  });
});

describe("append_provider_stream: OpenAI Responses", () => {
  it("rebuilds items whose output_item.done never came from their deltas", () => {
    const events = [
      { type: "response.output_item.added", output_index: 0, item: { id: "rs_1", type: "reasoning", summary: [] } },
      { type: "response.reasoning_summary_text.delta", output_index: 0, summary_index: 0, delta: "Think" },
      { type: "response.reasoning_summary_text.delta", output_index: 0, summary_index: 1, delta: "More" },
      { type: "response.output_item.added", output_index: 1, item: { id: "msg_1", type: "message", role: "assistant", content: [] } },
      { type: "response.output_text.delta", output_index: 1, content_index: 0, delta: "Hi" },
      { type: "response.refusal.delta", output_index: 1, content_index: 1, delta: "No" },
      { type: "response.output_item.added", output_index: 2, item: { id: "fc_1", type: "function_call", call_id: "call_1", name: "f", arguments: "" } },
      { type: "response.function_call_arguments.delta", output_index: 2, delta: '{"a":' },
      { type: "response.function_call_arguments.delta", output_index: 2, delta: "1}" },
      { type: "response.completed", response: { object: "response" } },
    ];
    const body = {
      object: "response",
      output: [
        { id: "rs_1", type: "reasoning", summary: [{ type: "summary_text", text: "Think" }, { type: "summary_text", text: "More" }] },
        { id: "msg_1", type: "message", role: "assistant", content: [{ type: "output_text", text: "Hi" }, { type: "refusal", refusal: "No" }] },
        { id: "fc_1", type: "function_call", call_id: "call_1", name: "f", arguments: '{"a":1}' },
      ],
    };
    expect(hex(history([streamDelta(Provider.OPENAI_RESPONSES, events)]))).toEqual(hex(history([bodyDelta(Provider.OPENAI_RESPONSES, body)])));
  });

  it("refuses a built-in tool item at the event that announces it", () => {
    const events = [{ type: "response.output_item.added", output_index: 0, item: { id: "ws_1", type: "web_search_call" } }];
    const error = thrownConnectError(() => history([streamDelta(Provider.OPENAI_RESPONSES, events)]));
    expect(error.rawMessage).toContain('events[0]: malformed provider response at item.type: unknown output item type "web_search_call"');
    expect(readErrorDetails(error).errorInfo?.metadata["json_path"]).toBe("item.type");
  });

  it("does not complete a failed response", () => {
    const events = [{ type: "response.failed", response: { error: { code: "server_error" } } }];
    const error = thrownConnectError(() => history([streamDelta(Provider.OPENAI_RESPONSES, events)]));
    expect(error.rawMessage).toContain('the stream reported response.failed: {"code":"server_error"}');
  });
});

describe("append_provider_stream: Anthropic", () => {
  it("appends an interrupted stream's text with the truncate_assistant text", () => {
    const [message] = history([streamDelta(Provider.ANTHROPIC_MESSAGES, anthropicText, { interrupted: true })]);
    expect(message!.parts[0]!.kind).toMatchObject({ case: "text", value: { text: "Hello<Truncated due to cancel from user.>" } });
  });

  it("refuses a stream cut off without interrupted, and appends nothing of the batch", () => {
    const error = thrownConnectError(() => history([streamDelta(Provider.ANTHROPIC_MESSAGES, anthropicText)]));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toContain("the stream is not complete (content block 0 (started at events[1]) never stopped)");
  });

  it("refuses a delta that does not fit its block", () => {
    const events = [...anthropicText.slice(0, 2), { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: "{}" } }];
    const error = thrownConnectError(() => history([streamDelta(Provider.ANTHROPIC_MESSAGES, events)]));
    expect(error.rawMessage).toContain("events[2]: malformed provider response at delta.type: a input_json_delta cannot extend a text block");
  });

  it("refuses tool input that is not a JSON object, at the stop event", () => {
    const events = [
      anthropicStart,
      { type: "content_block_start", index: 0, content_block: { type: "tool_use", id: "t1", name: "f", input: {} } },
      { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: "[1," } },
      { type: "content_block_stop", index: 0 },
    ];
    const error = thrownConnectError(() => history([streamDelta(Provider.ANTHROPIC_MESSAGES, events)]));
    expect(error.rawMessage).toContain("events[3]: malformed provider response at index: the input_json_delta text of the tool_use block started at events[1] is not JSON");
  });

  it("refuses a server tool block like the body parser does", () => {
    const events = [anthropicStart, { type: "content_block_start", index: 0, content_block: { type: "server_tool_use", id: "s", name: "web_search" } }];
    const error = thrownConnectError(() => history([streamDelta(Provider.ANTHROPIC_MESSAGES, events)]));
    expect(error.rawMessage).toContain('events[1]: malformed provider response at content_block.type: unknown content block type "server_tool_use"');
  });

  it("names an event that is not JSON", () => {
    const delta = create(DeltaSchema, { operation: { case: "appendProviderStream", value: { provider: Provider.ANTHROPIC_MESSAGES, events: [encode(anthropicStart), encode("{oops")] } } });
    const error = thrownConnectError(() => history([delta]));
    expect(error.rawMessage).toContain("events[1]: malformed provider response at $: not a Anthropic Messages stream event");
  });
});

describe("append_provider_stream: Gemini", () => {
  it("gives calls without ids the ids the equivalent body gets", () => {
    const chunk = (parts: unknown[], finishReason?: string) => ({ candidates: [{ content: { role: "model", parts }, ...(finishReason ? { finishReason } : {}) }] });
    const stream = streamDelta(Provider.GEMINI, [chunk([{ text: "Look" }]), chunk([{ text: "ing." }]), chunk([{ functionCall: { name: "search", args: { q: "x" } } }], "STOP")]);
    const body = bodyDelta(Provider.GEMINI, chunk([{ text: "Looking." }, { functionCall: { name: "search", args: { q: "x" } } }]));
    const fromStream = history([stream]);
    expect(fromStream[0]!.parts[1]!.kind).toMatchObject({ case: "toolCall", value: { id: expect.stringMatching(/^gemini_[0-9a-f]{24}$/) } });
    expect(hex(fromStream)).toEqual(hex(history([body])));
  });

  it("keeps a signed text part apart from the text after it", () => {
    const chunk = (parts: unknown[], finishReason?: string) => ({ candidates: [{ content: { role: "model", parts }, ...(finishReason ? { finishReason } : {}) }] });
    const [message] = history([streamDelta(Provider.GEMINI, [chunk([{ text: "a", thoughtSignature: "s1" }]), chunk([{ text: "b" }], "STOP")])]);
    expect(message!.parts.map((part) => part.kind.case === "text" && [part.kind.value.text, part.kind.value.signature])).toEqual([
      ["a", "s1"],
      ["b", ""],
    ]);
  });

  it("reports a blocked prompt", () => {
    const error = thrownConnectError(() => history([streamDelta(Provider.GEMINI, [{ promptFeedback: { blockReason: "SAFETY" } }])]));
    expect(error.rawMessage).toContain('the stream reported prompt blocked: {"blockReason":"SAFETY"}');
  });
});

describe("append_provider_stream limits", () => {
  it(`refuses more than ${maxStreamEvents} events before decoding any`, () => {
    const events = new Array<Uint8Array>(maxStreamEvents + 1).fill(new Uint8Array([0x7b]));
    const delta = create(DeltaSchema, { operation: { case: "appendProviderStream", value: { provider: Provider.OPENAI_CHAT, events } } });
    const error = thrownConnectError(() => history([delta]));
    expect(error.code).toBe(Code.ResourceExhausted);
    // Counted per commit over every stream delta (issue 29 #9), so the message names the batch, not one delta.
    expect(error.rawMessage).toBe(`deltas: the append_provider_stream deltas carry ${maxStreamEvents + 1} events, more than the limit of ${maxStreamEvents} per commit`);
  });

  it("refuses an event nested deeper than the JSON depth limit", () => {
    const deep = `{"type":"ping","x":${"[".repeat(70)}${"]".repeat(70)}}`;
    const error = thrownConnectError(() => history([streamDelta(Provider.ANTHROPIC_MESSAGES, [anthropicStart, deep])]));
    expect(error.rawMessage).toContain("events[1]: malformed provider response at $.x");
  });

  it("refuses a missing provider", () => {
    const error = thrownConnectError(() => history([streamDelta(Provider.UNSPECIFIED, [{}])]));
    expect(error.rawMessage).toBe("deltas[0].append_provider_stream: provider: a provider is required");
  });
});
