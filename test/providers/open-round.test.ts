import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { RenderOptionsSchema, type CompiledPayload } from "#gen/contextd/v1/compile_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { renderRequest } from "../../src/core/providers/render.js";
import { assistant, call, payload, result, system, tool, user } from "./build-messages.js";

const providers = [
  [Provider.OPENAI_CHAT, "openai_chat"],
  [Provider.OPENAI_RESPONSES, "openai_responses"],
  [Provider.ANTHROPIC_MESSAGES, "anthropic"],
  [Provider.GEMINI, "gemini"],
] as const;

function refusal(p: CompiledPayload, provider: Provider): ConnectError | undefined {
  try {
    renderRequest(p, create(RenderOptionsSchema, { provider, model: "m" }));
    return undefined;
  } catch (error) {
    return ConnectError.from(error);
  }
}

describe("an open tool call followed by another message", () => {
  const cases: [string, CompiledPayload][] = [
    ["no result, then the user's turn", payload({ history: [user("u1", "Weather?"), assistant("a1", call("oc1", "get_weather")), user("u2", "Never mind")] })],
    // Anthropic merges the next user text into the user turn holding the one result.
    [
      "one of two results, then the user's turn",
      payload({ history: [user("u1", "Weather?"), assistant("a1", call("oc1", "get_weather"), call("oc2", "get_weather")), tool("t1", result("oc1", "get_weather", { text: "18C" })), user("u2", "And?")] }),
    ],
    ["no result, then the assistant again", payload({ system: [system("s", "be brief")], history: [user("u1", "Weather?"), assistant("a1", call("oc1", "get_weather")), assistant("a2", "It is sunny.")] })],
  ];
  for (const [name, p] of cases) {
    it(`is refused by every provider with one rule and the assistant message: ${name}`, () => {
      const missing = name.startsWith("one of two") ? '"oc2"' : '"oc1"';
      for (const [provider, prefix] of providers) {
        const error = refusal(p, provider);
        expect(error?.code, prefix).toBe(Code.FailedPrecondition);
        expect(error!.rawMessage).toMatch(new RegExp(`^provider rule ${prefix}\\.open_call_position violated at message "a1": tool calls ${missing} have no result, and message "(u2|a2)" follows`));
      }
    });
  }

  it("is still rendered when the open round is last (the turn in progress)", () => {
    const p = payload({ history: [user("u1", "Weather?"), assistant("a1", call("oc1", "get_weather"), call("oc2", "get_weather")), tool("t1", result("oc1", "get_weather", { text: "18C" }))] });
    for (const [provider] of providers) expect(refusal(p, provider)).toBeUndefined();
  });
});
