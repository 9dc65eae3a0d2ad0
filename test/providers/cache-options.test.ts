import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { RenderOptionsSchema } from "#gen/contextd/v1/compile_pb";
import { MessageSchema, Provider, Role } from "#gen/contextd/v1/message_pb";
import { renderRequest } from "../../src/core/providers/render.js";
import { rejectsWith } from "../core/rejects.js";
import { assistant, definition, message, payload, reasoning, system, text, user } from "./build-messages.js";

type Block = { type: string; cache_control?: { type: string; ttl?: string } };
type Body = { system?: Block[]; tools?: { name: string; cache_control?: object }[]; messages: { role: string; content: Block[] }[]; prompt_cache_key?: string };

const render = (provider: Provider, fields: Parameters<typeof payload>[0], options: { autoCacheBreakpoints?: boolean; promptCacheKey?: string } = {}) => {
  const rendered = renderRequest(payload(fields), create(RenderOptionsSchema, { provider, model: "m", ...options }));
  return { body: JSON.parse(new TextDecoder().decode(rendered.json)) as Body, warnings: rendered.warnings.map((warning) => warning.code) };
};
const marked = (blocks: readonly Block[] | undefined) => (blocks ?? []).map((block) => block.cache_control !== undefined);

const summary = create(MessageSchema, { id: "sum", role: Role.USER, parts: [text("what happened so far")], provenance: { kind: { case: "summary", value: { coveredMessageIds: ["old"] } } } });
const conversation = {
  system: [system("s1", "be careful"), system("s2", "use the tools")],
  toolDefinitions: [definition("read", "reads", { type: "object" }), definition("grep", "searches", { type: "object" })],
  history: [summary, assistant("a0", "ok"), user("u1", "next question"), assistant("a1", reasoning(Provider.ANTHROPIC_MESSAGES, { text: "hm", signature: "sig" }), "answer"), user("u2", "and now?")],
};

describe("Anthropic automatic cache breakpoints", () => {
  it("go on the last tool, the last system block, the summary and the last message", () => {
    const { body, warnings } = render(Provider.ANTHROPIC_MESSAGES, conversation, { autoCacheBreakpoints: true });
    expect(warnings).toEqual([]);
    expect(body.tools!.map((tool) => tool.cache_control !== undefined)).toEqual([false, true]);
    expect(marked(body.system)).toEqual([false, true]);
    expect(body.messages.map((turn) => marked(turn.content).some(Boolean))).toEqual([true, false, false, false, true]);
    expect(body.messages[0]!.content[0]!.cache_control).toEqual({ type: "ephemeral" });
  });

  it("are off by default, and never on a thinking block", () => {
    expect(JSON.stringify(render(Provider.ANTHROPIC_MESSAGES, conversation).body)).not.toContain("cache_control");
    const endsInThought = { history: [user("u", "q"), assistant("a", "visible", reasoning(Provider.ANTHROPIC_MESSAGES, { text: "t", signature: "sig" }))] };
    const { body } = render(Provider.ANTHROPIC_MESSAGES, endsInThought, { autoCacheBreakpoints: true });
    const last = body.messages.at(-1)!.content;
    expect(last.map((block) => [block.type, block.cache_control !== undefined])).toEqual([
      ["text", true],
      ["thinking", false],
    ]);
  });

  it("count with message hints against the limit of 4, and give way to a longer-lived hint after them", () => {
    const hinted = { ...conversation, history: conversation.history.map((item, index) => (index === 2 ? message("u1", Role.USER, [text("next question")], { cacheTtl: "1h" }) : item)) };
    const { body, warnings } = render(Provider.ANTHROPIC_MESSAGES, hinted, { autoCacheBreakpoints: true });
    // The 1h hint on u1 comes after the tools', system's and summary's 5-minute ones: those go.
    expect(body.tools!.some((tool) => tool.cache_control)).toBe(false);
    expect(marked(body.system).some(Boolean)).toBe(false);
    expect(body.messages.map((turn) => turn.content.map((block) => block.cache_control?.ttl ?? (block.cache_control ? "5m" : "-")).join())).toEqual(["-", "-", "1h", "-,-", "5m"]);
    expect(warnings).toEqual([]);
    const many = { history: ["a", "b", "c", "d", "e"].map((id, index) => message(id, index % 2 ? Role.ASSISTANT : Role.USER, [text(id)], { cacheTtl: "" })), system: [system("s", "sys")] };
    expect(render(Provider.ANTHROPIC_MESSAGES, many, { autoCacheBreakpoints: true }).warnings).toEqual(["anthropic_cache_breakpoints_dropped"]);
  });

  it("are ignored by the other providers", () => {
    for (const provider of [Provider.OPENAI_CHAT, Provider.OPENAI_RESPONSES, Provider.GEMINI]) {
      expect(JSON.stringify(render(provider, conversation, { autoCacheBreakpoints: true }).body)).not.toContain("cache_control");
    }
  });
});

describe("OpenAI prompt_cache_key", () => {
  it("is sent by OpenAI Chat and Responses, and elsewhere is a warning", () => {
    for (const provider of [Provider.OPENAI_CHAT, Provider.OPENAI_RESPONSES]) expect(render(provider, conversation, { promptCacheKey: "conv-42" }).body.prompt_cache_key).toBe("conv-42");
    for (const provider of [Provider.ANTHROPIC_MESSAGES, Provider.GEMINI]) {
      const { body, warnings } = render(provider, conversation, { promptCacheKey: "conv-42" });
      expect(body.prompt_cache_key).toBeUndefined();
      expect(warnings).toEqual(["prompt_cache_key_ignored"]);
    }
  });

  it("is refused over 1,024 bytes", async () => {
    await rejectsWith(
      (async () => render(Provider.OPENAI_CHAT, conversation, { promptCacheKey: "é".repeat(513) }))(),
      Code.InvalidArgument,
      /render\.prompt_cache_key has 1026 bytes, at most 1024 are allowed/,
    );
  });
});
