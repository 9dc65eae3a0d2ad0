import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { RenderOptionsSchema } from "#gen/contextd/v1/compile_pb";
import { Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { parseProviderResponse } from "../../src/core/providers/parse-response.js";
import { renderRequest } from "../../src/core/providers/render.js";
import { payload, tool, result, user } from "./build-messages.js";
import { thrownConnectError } from "../support/thrown.js";

const encode = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));


/** Renders `[user, parsed assistant, results for its calls]` back to the same provider. */
function renderBack(provider: Provider, parsed: Message): unknown {
  const messages = [user("u1", "go"), { ...parsed, id: "a1" }];
  const calls = parsed.parts.flatMap((part) => (part.kind.case === "toolCall" ? [part.kind.value] : []));
  if (calls.length > 0) messages.push(tool("t1", ...calls.map((c) => result(c.id, c.name, { text: "done" }))));
  const rendered = renderRequest(payload({ history: messages }), create(RenderOptionsSchema, { provider, model: "m" }));
  return JSON.parse(new TextDecoder().decode(rendered.json));
}

describe("OpenAI Responses ingestion", () => {
  const body = {
    id: "resp_1",
    object: "response",
    output: [
      { type: "reasoning", id: "rs_abc", summary: [{ type: "summary_text", text: "Step one." }, { type: "summary_text", text: "Step two." }], encrypted_content: "gAAA+enc==" },
      { type: "message", id: "msg_1", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Let me look.", annotations: [] }] },
      { type: "function_call", id: "fc_1", call_id: "call_9", name: "search", arguments: '{"q":"x"}', status: "completed" },
    ],
  };

  it("parses reasoning (id, summary, encrypted content), text and calls (with item ids) in order, and renders them back byte for byte", () => {
    const [parsed] = parseProviderResponse(Provider.OPENAI_RESPONSES, encode(body));
    expect(parsed!.role).toBe(Role.ASSISTANT);
    expect(parsed!.parts.map((part) => part.kind.case)).toEqual(["reasoning", "text", "toolCall"]);
    const kind = parsed!.parts[0]!.kind;
    expect(kind.case === "reasoning" && [kind.value.itemId, kind.value.text, kind.value.redactedData, kind.value.provider]).toEqual([
      "rs_abc",
      "Step one.\n\nStep two.",
      "gAAA+enc==",
      Provider.OPENAI_RESPONSES,
    ]);
    const call = parsed!.parts[2]!.kind;
    expect(call.case === "toolCall" && [call.value.id, call.value.itemId]).toEqual(["call_9", "fc_1"]);
    const rendered = renderBack(Provider.OPENAI_RESPONSES, parsed!) as { input: unknown[] };
    expect(rendered.input.slice(1, 4)).toEqual([
      { type: "reasoning", id: "rs_abc", summary: [{ type: "summary_text", text: "Step one.\n\nStep two." }], encrypted_content: "gAAA+enc==" },
      { type: "message", role: "assistant", content: "Let me look." },
      { type: "function_call", id: "fc_1", call_id: "call_9", name: "search", arguments: '{"q":"x"}' },
    ]);
  });

  it("sends the function_call item id back to Responses only", () => {
    const [parsed] = parseProviderResponse(Provider.OPENAI_RESPONSES, encode(body));
    for (const provider of [Provider.OPENAI_CHAT, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI]) {
      expect(JSON.stringify(renderBack(provider, parsed!)), Provider[provider]).not.toContain("fc_1");
    }
  });

  it("rejects an unknown output item type with its path", () => {
    const error = thrownConnectError(() => parseProviderResponse(Provider.OPENAI_RESPONSES, encode({ ...body, output: [{ type: "web_search_call", id: "ws" }] })));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toContain("output[0].type");
  });
});

describe("Anthropic ingestion", () => {
  const body = {
    id: "msg_1",
    type: "message",
    role: "assistant",
    model: "claude",
    content: [
      { type: "thinking", thinking: "Reasoning...", signature: "EqQB+sig==" },
      { type: "redacted_thinking", data: "EmwK+red==" },
      { type: "text", text: "Calling the tool." },
      { type: "tool_use", id: "toolu_1", name: "search", input: { q: "x", n: 2 } },
    ],
    stop_reason: "tool_use",
  };

  it("parses thinking, redacted thinking, text and tool_use, and renders them back unchanged", () => {
    const [parsed] = parseProviderResponse(Provider.ANTHROPIC_MESSAGES, encode(body));
    expect(parsed!.parts.map((part) => part.kind.case)).toEqual(["reasoning", "reasoning", "text", "toolCall"]);
    const call = parsed!.parts[3]!.kind;
    expect(call.case === "toolCall" && call.value.arguments?.data).toBe('{"q":"x","n":2}');
    const rendered = renderBack(Provider.ANTHROPIC_MESSAGES, parsed!) as { messages: Array<{ content: unknown }> };
    expect(rendered.messages[1]!.content).toEqual(body.content);
  });

  it("rejects a tool_use without an object input", () => {
    const error = thrownConnectError(() => parseProviderResponse(Provider.ANTHROPIC_MESSAGES, encode({ ...body, content: [{ type: "tool_use", id: "t", name: "n", input: "x" }] })));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toContain("content[0].input");
  });

  it("rejects bytes that are not JSON", () => {
    const error = thrownConnectError(() => parseProviderResponse(Provider.ANTHROPIC_MESSAGES, new TextEncoder().encode("{not json")));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toContain("at $");
  });
});

describe("Gemini ingestion", () => {
  const body = {
    candidates: [
      {
        content: {
          role: "model",
          parts: [
            { text: "Pondering.", thought: true, thoughtSignature: "CiQB+thought==" },
            { text: "Here is the answer.", thoughtSignature: "CiQB+text==" },
            { functionCall: { name: "search", args: { q: "x" } }, thoughtSignature: "CiQB+call==" },
          ],
        },
        finishReason: "STOP",
      },
    ],
  };

  it("parses thoughts, a signed text part and a call without id, and renders them back with every signature", () => {
    const [parsed] = parseProviderResponse(Provider.GEMINI, encode(body), { callIdSeed: "conv-1:v7" });
    expect(parsed!.parts.map((part) => part.kind.case)).toEqual(["reasoning", "text", "toolCall"]);
    const signed = parsed!.parts[1]!.kind;
    expect(signed.case === "text" && [signed.value.text, signed.value.signature]).toEqual(["Here is the answer.", "CiQB+text=="]);
    const call = parsed!.parts[2]!.kind;
    expect(call.case === "toolCall" && call.value.id).toMatch(/^gemini_[0-9a-f]{24}$/);
    const callId = call.case === "toolCall" ? call.value.id : "";
    const rendered = renderBack(Provider.GEMINI, parsed!) as { contents: Array<{ parts: unknown }> };
    expect(rendered.contents[1]!.parts).toEqual([
      { text: "Pondering.", thought: true, thoughtSignature: "CiQB+thought==" },
      { text: "Here is the answer.", thoughtSignature: "CiQB+text==" },
      { functionCall: { id: callId, name: "search", args: { q: "x" } }, thoughtSignature: "CiQB+call==" },
    ]);
  });

  it("sends text signatures back to Gemini only, and an empty signed text part too", () => {
    const [parsed] = parseProviderResponse(Provider.GEMINI, encode({ candidates: [{ content: { role: "model", parts: [{ text: "Done." }, { text: "", thoughtSignature: "CiQB+tail==" }] } }] }));
    const gemini = renderBack(Provider.GEMINI, parsed!) as { contents: Array<{ parts: unknown }> };
    expect(gemini.contents[1]!.parts).toEqual([{ text: "Done." }, { text: "", thoughtSignature: "CiQB+tail==" }]);
    for (const provider of [Provider.OPENAI_CHAT, Provider.OPENAI_RESPONSES, Provider.ANTHROPIC_MESSAGES]) {
      expect(JSON.stringify(renderBack(provider, parsed!)), Provider[provider]).not.toContain("CiQB+tail==");
    }
  });

  it("gives the same body different call ids under different seeds", () => {
    const idOf = (seed: string) => {
      const kind = parseProviderResponse(Provider.GEMINI, encode(body), { callIdSeed: seed })[0]!.parts[2]!.kind;
      return kind.case === "toolCall" ? kind.value.id : "";
    };
    expect(idOf("a")).not.toBe(idOf("b"));
    expect(idOf("a")).toBe(idOf("a"));
  });

  it("rejects a blocked prompt (no candidates) and unknown parts with their paths", () => {
    const blocked = thrownConnectError(() => parseProviderResponse(Provider.GEMINI, encode({ promptFeedback: { blockReason: "SAFETY" } })));
    expect(blocked.code).toBe(Code.InvalidArgument);
    expect(blocked.rawMessage).toContain("SAFETY");
    const unknown = thrownConnectError(() => parseProviderResponse(Provider.GEMINI, encode({ candidates: [{ content: { role: "model", parts: [{ executableCode: {} }] } }] })));
    expect(unknown.rawMessage).toContain("candidates[0].content.parts[0]");
  });
});

describe("provider selection", () => {
  it("rejects an unspecified provider", () => {
    expect(thrownConnectError(() => parseProviderResponse(Provider.UNSPECIFIED, encode({}))).code).toBe(Code.InvalidArgument);
  });
});

describe("malformed provider responses are described in JSON terms", () => {
  it("names the path and what JSON value was found, never JavaScript's typeof wording", () => {
    const cases: [Provider, unknown, string][] = [
      [Provider.ANTHROPIC_MESSAGES, { id: "msg_1", type: "message", role: "assistant" }, "malformed provider response at content: expected a JSON array, got nothing (the field is absent)"],
      [Provider.OPENAI_CHAT, { choices: "none" }, "malformed provider response at choices: expected a JSON array, got a JSON string"],
      [Provider.GEMINI, { candidates: [7] }, "malformed provider response at candidates[0]: expected a JSON object, got a JSON number"],
      [Provider.OPENAI_RESPONSES, { object: "response", output: { a: 1 } }, "malformed provider response at output: expected a JSON array, got a JSON object"],
      [Provider.ANTHROPIC_MESSAGES, { type: "message", role: "assistant", content: [{ type: "text", text: true }] }, "malformed provider response at content[0].text: expected a JSON string, got the JSON boolean true"],
    ];
    for (const [provider, body, message] of cases) {
      const error = thrownConnectError(() => parseProviderResponse(provider, encode(body)));
      expect(error.code).toBe(Code.InvalidArgument);
      expect(error.rawMessage).toBe(message);
      expect(error.rawMessage).not.toMatch(/\ba (undefined|object|string|number|boolean)\b/);
    }
  });
});
