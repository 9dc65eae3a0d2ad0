import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { validateAnthropic } from "../../src/core/providers/anthropic/validate.js";
import type { AnthropicMessagesBody } from "../../src/core/providers/anthropic/body.js";
import { validateGemini } from "../../src/core/providers/gemini/validate.js";
import type { GeminiBody } from "../../src/core/providers/gemini/body.js";
import { validateOpenAIResponses } from "../../src/core/providers/openai-responses/validate.js";
import type { OpenAIResponsesBody } from "../../src/core/providers/openai-responses/body.js";
import { validateOpenAIChat } from "../../src/core/providers/openai-chat/validate.js";
import { assistant, call, payload, reasoning, text, user } from "./build-messages.js";

/**
 * Each rule fed a body that breaks it (bodies the renderers never produce, so the validators are
 * shown to catch renderer bugs too). The payload is empty: opaque and system-slot checks come
 * after the structural ones.
 */
function ruleOf(action: () => void): string {
  try {
    action();
  } catch (error) {
    const connect = ConnectError.from(error);
    expect(connect.code).toBe(Code.FailedPrecondition);
    return /provider rule (\S+) violated at (.*?):/.exec(connect.rawMessage)!.slice(1).join(" @ ");
  }
  return "no error";
}

const empty = payload({});
const origin = (messageId: string, role = Role.USER) => ({ messageId, role });

describe("Anthropic validator", () => {
  const check = (body: AnthropicMessagesBody, roles: Role[] = []) =>
    ruleOf(() => validateAnthropic(body, body.messages.map((_, index) => origin(`m${index}`, roles[index])), empty));

  it("names each broken rule and the message", () => {
    expect(check({ messages: [] })).toBe("anthropic.messages_non_empty @ request");
    expect(check({ messages: [{ role: "user", content: [{ type: "text", text: "a" }] }, { role: "user", content: [{ type: "text", text: "b" }] }] })).toBe(
      'anthropic.role_alternation @ message "m1"',
    );
    expect(
      check({
        messages: [
          { role: "user", content: [{ type: "text", text: "q" }] },
          { role: "assistant", content: [{ type: "tool_use", id: "c1", name: "f", input: {} }] },
          { role: "user", content: [{ type: "text", text: "x" }, { type: "tool_result", tool_use_id: "c1", content: "r" }] },
        ],
      }),
    ).toBe('anthropic.tool_result_first @ message "m2"');
    expect(
      check({
        messages: [
          { role: "user", content: [{ type: "text", text: "q" }] },
          { role: "assistant", content: [{ type: "tool_use", id: "c1", name: "f", input: {} }] },
          { role: "user", content: [{ type: "text", text: "x" }] },
          { role: "assistant", content: [{ type: "text", text: "y" }] },
        ],
      }),
    ).toBe('anthropic.open_call_position @ message "m1"');
    expect(check({ messages: [{ role: "user", content: [{ type: "text", text: "q" }] }, { role: "assistant", content: [{ type: "thinking", thinking: "t", signature: "" }] }] })).toBe(
      'anthropic.thinking_signature @ message "m1"',
    );
    // Bodies that start on the assistant's turn, and a prefill ending in whitespace (issue 27).
    expect(check({ messages: [{ role: "assistant", content: [{ type: "text", text: "Hi." }] }] })).toBe('anthropic.first_turn_user @ message "m0"');
    expect(check({ messages: [{ role: "user", content: [{ type: "text", text: "q" }] }, { role: "assistant", content: [{ type: "text", text: "Sure: " }] }] })).toBe(
      'anthropic.prefill_trailing_whitespace @ message "m1"',
    );
    expect(check({ messages: [{ role: "user", content: [{ type: "text", text: "q" }] }, { role: "assistant", content: [{ type: "tool_use", id: "call/1", name: "f", input: {} }] }] })).toBe(
      'anthropic.tool_use_id @ message "m1"',
    );
    const cached = (ttl?: "5m" | "1h") => ({ type: "text" as const, text: "x", cache_control: { type: "ephemeral" as const, ...(ttl ? { ttl } : {}) } });
    expect(check({ messages: [{ role: "user", content: [cached(), cached(), cached(), cached(), cached()] }] })).toBe('anthropic.cache_breakpoints @ message "m0"');
    expect(check({ messages: [{ role: "user", content: [cached("5m"), cached("1h")] }] })).toBe('anthropic.cache_ttl_order @ message "m0"');
  });
});

describe("Gemini validator", () => {
  const check = (body: GeminiBody, roles: Role[] = []) => ruleOf(() => validateGemini(body, body.contents.map((_, index) => origin(`m${index}`, roles[index])), empty));

  it("names each broken rule and the message", () => {
    expect(check({ contents: [] })).toBe("gemini.contents_non_empty @ request");
    expect(
      check({
        contents: [
          { role: "user", parts: [{ text: "q" }] },
          { role: "model", parts: [{ functionCall: { id: "c1", name: "f", args: {} } }] },
          { role: "user", parts: [{ functionResponse: { id: "c1", name: "f", response: {} } }, { text: "mixed" }] },
        ],
      }),
    ).toBe('gemini.function_response_content @ message "m2"');
    expect(check({ contents: [{ role: "user", parts: [{ text: "a" }] }, { role: "user", parts: [{ text: "b" }] }] })).toBe('gemini.role_alternation @ message "m1"');
    expect(
      check({
        contents: [
          { role: "user", parts: [{ text: "q" }] },
          { role: "model", parts: [{ functionCall: { id: "c1", name: "f", args: {} } }] },
          { role: "user", parts: [{ functionResponse: { id: "c2", name: "f", response: {} } }] },
        ],
      }),
    ).toBe('gemini.call_result_pairing @ message "m2"');
    expect(
      check({ contents: [{ role: "user", parts: [{ text: "q" }] }, { role: "model", parts: [{ functionCall: { id: "c1", name: "f", args: {} } }] }, { role: "user", parts: [{ text: "next" }] }] }),
    ).toBe('gemini.open_call_position @ message "m1"');
    // A body that starts with a function call turn (issue 27).
    expect(check({ contents: [{ role: "model", parts: [{ functionCall: { id: "c1", name: "f", args: {} } }] }] })).toBe('gemini.function_call_turn_position @ message "m0"');
  });
});

describe("opaque passthrough", () => {
  const signedTurn = payload({ history: [user("u1", "hi"), assistant("a1", text("Hello.", "CiQB+text=="), call("c1", "f", "{}", { itemId: "fc_1" }))] });

  it("catches a Gemini text part that lost or changed its signature", () => {
    const body = (thoughtSignature?: string): GeminiBody => ({
      contents: [
        { role: "user", parts: [{ text: "hi" }] },
        { role: "model", parts: [{ text: "Hello.", ...(thoughtSignature !== undefined ? { thoughtSignature } : {}) }, { functionCall: { id: "c1", name: "f", args: {} } }] },
      ],
    });
    const origins = [origin("u1"), origin("a1", Role.ASSISTANT)];
    expect(ruleOf(() => validateGemini(body("CiQB+text=="), origins, signedTurn))).toBe("no error");
    expect(ruleOf(() => validateGemini(body(), origins, signedTurn))).toBe("gemini.opaque_passthrough @ opaque value 0");
    expect(ruleOf(() => validateGemini(body("CiQB+text="), origins, signedTurn))).toBe("gemini.opaque_passthrough @ opaque value 0");
  });

  it("catches a Responses function_call that lost its item id beside its reasoning", () => {
    const reasoned = payload({
      history: [user("u1", "hi"), assistant("a1", reasoning(Provider.OPENAI_RESPONSES, { itemId: "rs_1", redactedData: "enc" }), text("Hello."), call("c1", "f", "{}", { itemId: "fc_1" }))],
    });
    const body = (id?: string): OpenAIResponsesBody => ({
      input: [
        { type: "message", role: "user", content: "hi" },
        { type: "reasoning", id: "rs_1", summary: [], encrypted_content: "enc" },
        { type: "message", role: "assistant", content: "Hello." },
        { type: "function_call", ...(id !== undefined ? { id } : {}), call_id: "c1", name: "f", arguments: "{}" },
      ],
    });
    const origins = [origin("u1"), origin("a1", Role.ASSISTANT), origin("a1", Role.ASSISTANT), origin("a1", Role.ASSISTANT)];
    expect(ruleOf(() => validateOpenAIResponses(body("fc_1"), origins, reasoned))).toBe("no error");
    expect(ruleOf(() => validateOpenAIResponses(body(), origins, reasoned))).toBe("openai_responses.opaque_passthrough @ opaque value 1");
  });

  it("refuses a Responses item id without its reasoning item, and a reasoning item without its following item", () => {
    // Without the reasoning (cleared, trimmed, never stored) the call goes without its item id.
    const withId: OpenAIResponsesBody = {
      input: [
        { type: "message", role: "user", content: "hi" },
        { type: "function_call", id: "fc_1", call_id: "c1", name: "f", arguments: "{}" },
      ],
    };
    expect(ruleOf(() => validateOpenAIResponses(withId, [origin("u1"), origin("a1", Role.ASSISTANT)], signedTurn))).toBe('openai_responses.reasoning_pair @ message "a1"');
    const lone: OpenAIResponsesBody = {
      input: [
        { type: "message", role: "user", content: "hi" },
        { type: "reasoning", id: "rs_1", summary: [] },
        { type: "message", role: "user", content: "next" },
      ],
    };
    expect(ruleOf(() => validateOpenAIResponses(lone, [origin("u1"), origin("a1", Role.ASSISTANT), origin("u2")], empty))).toBe('openai_responses.reasoning_pair @ message "a1"');
  });
});

describe("OpenAI Responses validator", () => {
  const check = (body: OpenAIResponsesBody, origins = body.input.map((_, index) => origin(`m${index}`))) =>
    ruleOf(() => validateOpenAIResponses(body, origins, empty));

  it("names each broken rule and the message", () => {
    expect(check({ input: [] })).toBe("openai_responses.input_non_empty @ request");
    expect(check({ input: [{ type: "function_call_output", call_id: "c1", output: "x" }] })).toBe('openai_responses.call_result_pairing @ message "m0"');
    expect(
      check({
        input: [
          { type: "function_call", call_id: "c1", name: "f", arguments: "{}" },
          { type: "function_call_output", call_id: "c1", output: "x".repeat(256_001) },
        ],
      }),
    ).toBe('openai_responses.output_length @ message "m1"');
    expect(check({ input: [{ type: "reasoning", id: "", summary: [] }] })).toBe('openai_responses.reasoning_item_id @ message "m0"');
    expect(
      check({
        input: [
          { type: "function_call", call_id: "c1", name: "f", arguments: "{}" },
          { type: "message", role: "user", content: "next" },
        ],
      }),
    ).toBe('openai_responses.open_call_position @ message "m0"');
    expect(check({ input: [{ type: "message", role: "user", content: "x" }] }, [origin("s1", Role.SYSTEM)])).toBe('openai_responses.system_slot @ message "s1"');
  });
});

describe("OpenAI Chat validator", () => {
  it("catches a system message rendered under another role and a tool message after the round ended", () => {
    expect(ruleOf(() => validateOpenAIChat({ messages: [{ role: "user", content: "x" }] }, [origin("s1", Role.SYSTEM)], empty))).toBe('openai_chat.system_slot @ message "s1"');
    expect(
      ruleOf(() =>
        validateOpenAIChat(
          {
            messages: [
              { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] },
              { role: "tool", tool_call_id: "c1", content: "r" },
              { role: "tool", tool_call_id: "c1", content: "again" },
            ],
          },
          [origin("a1", Role.ASSISTANT), origin("t1", Role.TOOL), origin("t2", Role.TOOL)],
          empty,
        ),
      ),
    ).toBe('openai_chat.call_result_pairing @ message "t2"');
  });
});
