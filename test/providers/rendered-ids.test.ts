import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { RenderOptionsSchema, type CompiledPayload } from "#gen/contextd/v1/compile_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { renderRequest } from "../../src/core/providers/render.js";
import { parseProviderResponse } from "../../src/core/providers/parse-response.js";
import { acceptedCallId, acceptedChatName, callIdRules } from "../../src/core/providers/rendered-ids.js";
import { assistant, call, message, payload, reasoning, result, text, tool, user } from "./build-messages.js";

const render = (p: CompiledPayload, provider: Provider) => renderRequest(p, create(RenderOptionsSchema, { provider, model: "m" }));
const json = (p: CompiledPayload, provider: Provider) => JSON.parse(new TextDecoder().decode(render(p, provider).json));

/** Every (call id, result id) pair of a body, in order, whatever the provider's shape. */
function callAndResultIds(body: Record<string, unknown>, provider: Provider): { calls: string[]; results: string[] } {
  const calls: string[] = [];
  const results: string[] = [];
  const walk = (value: unknown): void => {
    if (Array.isArray(value)) return value.forEach(walk);
    if (value === null || typeof value !== "object") return;
    const object = value as Record<string, unknown>;
    if (provider === Provider.OPENAI_CHAT && typeof object["tool_call_id"] === "string") results.push(object["tool_call_id"]);
    if (provider === Provider.OPENAI_CHAT && object["type"] === "function" && typeof object["id"] === "string") calls.push(object["id"]);
    if (provider === Provider.OPENAI_RESPONSES && object["type"] === "function_call") calls.push(object["call_id"] as string);
    if (provider === Provider.OPENAI_RESPONSES && object["type"] === "function_call_output") results.push(object["call_id"] as string);
    if (provider === Provider.ANTHROPIC_MESSAGES && object["type"] === "tool_use") calls.push(object["id"] as string);
    if (provider === Provider.ANTHROPIC_MESSAGES && object["type"] === "tool_result") results.push(object["tool_use_id"] as string);
    if (provider === Provider.GEMINI && object["functionCall"]) calls.push((object["functionCall"] as { id: string }).id);
    if (provider === Provider.GEMINI && object["functionResponse"]) results.push((object["functionResponse"] as { id: string }).id);
    Object.values(object).forEach(walk);
  };
  walk(body);
  return { calls, results };
}

const providers = [Provider.OPENAI_CHAT, Provider.OPENAI_RESPONSES, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI];

/** Three rounds that all number their call `call_0`, as frameworks that count per turn do. */
function reusedIds(rounds: number): CompiledPayload {
  const history = [];
  for (let round = 0; round < rounds; round++) {
    history.push(user(`u${round}`, `question ${round}`), assistant(`a${round}`, call("call_0", "search", `{"q":${round}}`)), tool(`t${round}`, result("call_0", "search", { text: `answer ${round}` })));
  }
  return payload({ history });
}

describe("provider-constrained tool-call ids", () => {
  it("keeps ids every provider takes byte for byte", () => {
    expect(acceptedCallId("call_abc-123", callIdRules.openai_chat)).toBe("call_abc-123");
    expect(acceptedCallId("toolu_01A09q90qw90lq917835lq9", callIdRules.anthropic)).toBe("toolu_01A09q90qw90lq917835lq9");
  });

  it("renders other frameworks' ids in the alphabet and length of each provider, deterministically", () => {
    const weird = ["call/1@373", "functions.get_weather:0", `chatcmpl-tool-${"9".repeat(40)}`, "", "a b"];
    for (const [name, rule] of Object.entries(callIdRules)) {
      const forms = weird.map((id) => acceptedCallId(id, rule));
      for (const form of forms) expect(form, name).toMatch(new RegExp(`^[a-zA-Z0-9_-]{1,${rule.maxLength}}$`));
      expect(new Set(forms).size, name).toBe(forms.length);
      expect(weird.map((id) => acceptedCallId(id, rule)), name).toEqual(forms);
    }
    // Replaced characters alone do not make two ids one.
    expect(acceptedCallId("a.b", callIdRules.anthropic)).not.toBe(acceptedCallId("a:b", callIdRules.anthropic));
  });

  it("pairs results with their own round's call when every round reuses call_0, for all four providers", () => {
    for (const provider of providers) {
      const rendered = render(reusedIds(3), provider);
      const { calls, results } = callAndResultIds(JSON.parse(new TextDecoder().decode(rendered.json)), provider);
      expect(calls, Provider[provider]).toHaveLength(3);
      expect(new Set(calls).size, Provider[provider]).toBe(3);
      // The first keeps its id; each result carries its own round's form.
      expect(calls[0]).toBe("call_0");
      expect(results, Provider[provider]).toEqual(calls);
      expect(rendered.renamedToolCallIds.map((entry) => [entry.messageId, entry.stored, entry.rendered]), Provider[provider]).toEqual([
        ["a1", "call_0", calls[1]],
        ["a2", "call_0", calls[2]],
      ]);
    }
  });

  it("never renames what an earlier compile sent when the conversation grows (cache prefixes hold)", () => {
    for (const provider of providers) {
      const before = callAndResultIds(json(reusedIds(2), provider), provider);
      const after = callAndResultIds(json(reusedIds(4), provider), provider);
      expect(after.calls.slice(0, 2), Provider[provider]).toEqual(before.calls);
    }
  });

  it("renames an Anthropic id outside its pattern and a Chat id over 40 characters in call and result alike", () => {
    const long = `chatcmpl-tool-${"a1".repeat(20)}`;
    const p = payload({
      history: [
        user("u1", "hi"),
        assistant("a1", call("call/1@373", "search"), call(long, "search")),
        tool("t1", result("call/1@373", "search", { text: "one" }), result(long, "search", { text: "two" })),
      ],
    });
    const anthropic = callAndResultIds(json(p, Provider.ANTHROPIC_MESSAGES), Provider.ANTHROPIC_MESSAGES);
    expect(anthropic.calls[0]).toMatch(/^call_1_373_[0-9a-f]{12}$/);
    expect(anthropic.calls[1]).toBe(long);
    expect(anthropic.results).toEqual(anthropic.calls);
    const chat = callAndResultIds(json(p, Provider.OPENAI_CHAT), Provider.OPENAI_CHAT);
    expect(chat.calls[1]).toHaveLength(40);
    expect(chat.results).toEqual(chat.calls);
  });
});

describe("mapping rendered ids back", () => {
  it("lets a caller run an open round's calls from the body and commit results under the stored ids; a response's new calls need no mapping", () => {
    const open = [user("u1", "weather?"), assistant("a1", call("call/1@373", "get_weather", '{"city":"Oslo"}'))];
    const first = render(payload({ history: open }), Provider.ANTHROPIC_MESSAGES);
    const sent = callAndResultIds(JSON.parse(new TextDecoder().decode(first.json)), Provider.ANTHROPIC_MESSAGES).calls[0]!;
    expect(sent).not.toBe("call/1@373");
    // The caller found `sent` in the body; renamed_tool_call_ids says which stored call it is.
    const stored = first.renamedToolCallIds.find((entry) => entry.rendered === sent)!;
    expect([stored.messageId, stored.stored]).toEqual(["a1", "call/1@373"]);
    // The provider's next response makes a call of its own: stored with the provider's id.
    const [answer] = parseProviderResponse(
      Provider.ANTHROPIC_MESSAGES,
      new TextEncoder().encode(JSON.stringify({ type: "message", role: "assistant", content: [{ type: "tool_use", id: "toolu_01A", name: "get_weather", input: { city: "Rome" } }], stop_reason: "tool_use" })),
    );
    const history = [...open, tool("t1", result(stored.stored, "get_weather", { text: "4C" })), user("u2", "and Rome?"), { ...answer!, id: "a2" }, tool("t2", result("toolu_01A", "get_weather", { text: "19C" }))];
    const next = render(payload({ history }), Provider.ANTHROPIC_MESSAGES);
    const ids = callAndResultIds(JSON.parse(new TextDecoder().decode(next.json)), Provider.ANTHROPIC_MESSAGES);
    // Both rounds pair: the first under the same rendered id as before, the second as the provider issued it.
    expect(ids.calls).toEqual([sent, "toolu_01A"]);
    expect(ids.results).toEqual([sent, "toolu_01A"]);
  });
});

describe("OpenAI Chat sender names", () => {
  it("sends names outside ^[a-zA-Z0-9_-]{1,64}$ in that alphabet, two speakers staying two", () => {
    const p = payload({
      history: [message("u1", Role.USER, [text("hola")], { senderName: "Ana María" }), message("u2", Role.USER, [text("hi")], { senderName: "Ana Maria" }), message("u3", Role.USER, [text("yo")], { senderName: "bob_1" })],
    });
    const names = (json(p, Provider.OPENAI_CHAT).messages as Array<{ name?: string }>).map((entry) => entry.name);
    expect(names[0]).toMatch(/^Ana_Mar_a_[0-9a-f]{12}$/);
    expect(names[1]).toMatch(/^Ana_Maria_[0-9a-f]{12}$/);
    expect(names[2]).toBe("bob_1");
    expect(acceptedChatName("x".repeat(80))).toHaveLength(64);
  });
});

describe("Responses reasoning pairs", () => {
  it("sends a call's item id only beside its reasoning item, and never a reasoning item alone", () => {
    const p = payload({
      history: [
        user("u1", "q1"),
        // Reasoning cleared: the call keeps its call_id but goes without its fc_ id.
        assistant("a1", call("c1", "search", "{}", { itemId: "fc_1" })),
        tool("t1", result("c1", "search", { text: "r1" })),
        // Reasoning with its call: both go, with their ids.
        assistant("a2", reasoning(Provider.OPENAI_RESPONSES, { itemId: "rs_2", redactedData: "enc2" }), call("c2", "search", "{}", { itemId: "fc_2" })),
        tool("t2", result("c2", "search", { text: "r2" })),
        // A lone reasoning item (no text, no call) before the next user turn is left out.
        assistant("a3", reasoning(Provider.OPENAI_RESPONSES, { itemId: "rs_3", redactedData: "enc3" })),
        user("u4", "q4"),
      ],
    });
    const input = json(p, Provider.OPENAI_RESPONSES).input as Array<Record<string, unknown>>;
    expect(input.filter((item) => item["type"] === "reasoning").map((item) => item["id"])).toEqual(["rs_2"]);
    expect(input.filter((item) => item["type"] === "function_call").map((item) => item["id"] ?? null)).toEqual([null, "fc_2"]);
  });

  it("never sends an item id the API did not issue (the Agents SDK's __fake_id__)", () => {
    const p = payload({
      history: [user("u1", "q"), assistant("a1", reasoning(Provider.OPENAI_RESPONSES, { itemId: "rs_1", redactedData: "enc" }), call("c1", "search", "{}", { itemId: "__fake_id__" })), tool("t1", result("c1", "search", { text: "r" }))],
    });
    const calls = (json(p, Provider.OPENAI_RESPONSES).input as Array<Record<string, unknown>>).filter((item) => item["type"] === "function_call");
    expect(calls).toEqual([{ type: "function_call", call_id: "c1", name: "search", arguments: "{}" }]);
  });
});
