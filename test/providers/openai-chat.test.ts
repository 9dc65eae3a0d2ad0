import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { RenderOptionsSchema } from "#gen/contextd/v1/compile_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { renderRequest } from "../../src/core/providers/render.js";
import { parseProviderResponse } from "../../src/core/providers/parse-response.js";
import { assistant, call, definition, image, message, payload, reasoning, result, system, tool, user } from "./build-messages.js";
import { thrownConnectError } from "../support/thrown.js";

const chat = create(RenderOptionsSchema, { provider: Provider.OPENAI_CHAT, model: "gpt-4.1" });
const renderJson = (p: Parameters<typeof renderRequest>[0]) => JSON.parse(new TextDecoder().decode(renderRequest(p, chat).json));


describe("OpenAI Chat rendering", () => {
  it("renders a tool round with parallel calls, images returned by a tool, and scratch last", () => {
    const body = renderJson(
      payload({
        system: [system("s1", "Be brief.")],
        history: [
          user("u1", "Weather in Paris and a map?"),
          assistant("a1", reasoning(Provider.ANTHROPIC_MESSAGES, { text: "hm", signature: "sig" }), call("c1", "weather", '{"city":"Paris"}'), call("c2", "map", '{"city":"Paris"}')),
          tool("t1", result("c1", "weather", { text: "18C" })),
          tool("t2", result("c2", "map", { text: "map attached" }, { contentParts: [image({ url: "https://x/map.png" })] })),
        ],
        scratch: [system("scratch1", "cwd=/tmp")],
        toolDefinitions: [definition("weather", "Weather by city", { type: "object", properties: { city: { type: "string" } } })],
      }),
    );
    expect(body).toEqual({
      model: "gpt-4.1",
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Weather in Paris and a map?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            { id: "c1", type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } },
            { id: "c2", type: "function", function: { name: "map", arguments: '{"city":"Paris"}' } },
          ],
        },
        { role: "tool", tool_call_id: "c1", content: "18C" },
        { role: "tool", tool_call_id: "c2", content: "map attached" },
        {
          role: "user",
          content: [
            { type: "text", text: "Content returned by tool call c2:" },
            { type: "image_url", image_url: { url: "https://x/map.png" } },
          ],
        },
        { role: "system", content: "cwd=/tmp" },
      ],
      tools: [
        { type: "function", function: { name: "weather", description: "Weather by city", parameters: { type: "object", properties: { city: { type: "string" } } } } },
      ],
    });
  });

  it("keeps an open round at the tail, with trailing memory placed before it", () => {
    const body = renderJson(
      payload({
        history: [user("u1", "go"), assistant("a1", call("c1", "run"), call("c2", "run")), tool("t1", result("c1", "run", { text: "ok" }))],
        memory: [system("m1", "remembered")],
      }),
    );
    expect(body.messages.map((m: { role: string }) => m.role)).toEqual(["user", "system", "assistant", "tool"]);
  });

  it("rejects a result without its call, naming the rule and the message id", () => {
    const error = thrownConnectError(() => renderRequest(payload({ history: [user("u1", "hi"), tool("t9", result("c9", "run", { text: "x" }))] }), chat));
    expect(error.code).toBe(Code.FailedPrecondition);
    expect(error.rawMessage).toContain("openai_chat.call_result_pairing");
    expect(error.rawMessage).toContain('"t9"');
  });

  it("rejects an open call that is not the last assistant turn", () => {
    const error = thrownConnectError(() =>
      renderRequest(payload({ history: [assistant("a1", call("c1", "run")), user("u2", "and?"), assistant("a2", "done")] }), chat),
    );
    expect(error.code).toBe(Code.FailedPrecondition);
    expect(error.rawMessage).toContain("openai_chat.open_call_position");
    expect(error.rawMessage).toContain('"a1"');
  });

  it("rejects an image in a system message", () => {
    const error = thrownConnectError(() => renderRequest(payload({ system: [message("s1", Role.SYSTEM, [image({ url: "https://x/a.png" })])] }), chat));
    expect(error.rawMessage).toContain("openai_chat.content_type");
    expect(error.rawMessage).toContain('"s1"');
  });
});

describe("OpenAI Chat ingestion", () => {
  const encode = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

  it("parses text and tool calls, keeping argument bytes", () => {
    const [parsed, ...rest] = parseProviderResponse(
      Provider.OPENAI_CHAT,
      encode({
        choices: [
          {
            index: 0,
            message: {
              role: "assistant",
              content: "Checking.",
              tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: '{ "city": "Paris" }' } }],
            },
            finish_reason: "tool_calls",
          },
        ],
      }),
    );
    expect(rest).toEqual([]);
    expect(parsed!.role).toBe(Role.ASSISTANT);
    expect(parsed!.parts.map((part) => part.kind.case)).toEqual(["text", "toolCall"]);
    const toolCall = parsed!.parts[1]!.kind;
    expect(toolCall.case === "toolCall" && toolCall.value.arguments?.data).toBe('{ "city": "Paris" }');
  });

  it("rejects a malformed body with the JSON path", () => {
    const error = thrownConnectError(() => parseProviderResponse(Provider.OPENAI_CHAT, encode({ choices: [{ message: { role: "assistant", tool_calls: [{ id: "x", type: "function", function: { name: 3 } }] } }] })));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toContain("choices[0].message.tool_calls[0].function.name");
  });
});
