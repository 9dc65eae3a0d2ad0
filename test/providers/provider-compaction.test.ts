import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { RenderOptionsSchema } from "#gen/contextd/v1/compile_pb";
import { MessageSchema, PartSchema, Provider, Role, type Part } from "#gen/contextd/v1/message_pb";
import { mergeProviderStream } from "../../src/core/providers/merge-stream.js";
import { parseProviderResponse } from "../../src/core/providers/parse-response.js";
import { cutAtLatestCompaction } from "../../src/core/providers/provider-compaction.js";
import { renderRequest } from "../../src/core/providers/render.js";
import { assistant, call, payload, result, text, tool, user } from "./build-messages.js";

// The edges of provider compaction the golden vectors do not show: failed compactions, results
// whose call was cut, parts before the item in its message, malformed blocks and streams.

const encode = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));
const anthropicBlock = (summary: string | undefined): Part =>
  create(PartSchema, { kind: { case: "providerCompaction", value: { provider: Provider.ANTHROPIC_MESSAGES, summary, encryptedContent: summary === undefined ? undefined : "ZW5j" } } });
const responsesItem = (itemId: string): Part => create(PartSchema, { kind: { case: "providerCompaction", value: { provider: Provider.OPENAI_RESPONSES, itemId, encryptedContent: "gAAA" } } });
const render = (history: ReturnType<typeof user>[], provider: Provider) =>
  JSON.parse(new TextDecoder().decode(renderRequest(payload({ history }), create(RenderOptionsSchema, { provider, model: "m" })).json)) as Record<string, unknown>;

function thrown(action: () => unknown): ConnectError {
  try {
    action();
  } catch (error) {
    if (error instanceof ConnectError) return error;
    throw error;
  }
  throw new Error("expected a ConnectError");
}

describe("provider compaction", () => {
  it("treats a block with null content as a failed compaction: nothing is cut and it is not sent", () => {
    const history = [user("u1", "q"), assistant("a1", anthropicBlock(undefined), text("answer")), user("u2", "next")];
    expect(cutAtLatestCompaction(history, Provider.ANTHROPIC_MESSAGES, "anthropic")).toBeUndefined();
    expect(render(history, Provider.ANTHROPIC_MESSAGES)["messages"]).toEqual([
      { role: "user", content: [{ type: "text", text: "q" }] },
      { role: "assistant", content: [{ type: "text", text: "answer" }] },
      { role: "user", content: [{ type: "text", text: "next" }] },
    ]);
    // Other providers have nothing to refuse either.
    expect(render(history, Provider.OPENAI_CHAT)["messages"]).toHaveLength(3);
  });

  it("cuts the item's own message before it, and a result whose call was cut", () => {
    const history = [
      user("u1", "q"),
      assistant("a1", call("call_1", "read_file")),
      assistant("a2", text("before"), responsesItem("cmp_1"), text("after")),
      tool("t1", result("call_1", "read_file", { text: "late result" })),
      user("u2", "next"),
    ];
    const cut = cutAtLatestCompaction(history, Provider.OPENAI_RESPONSES, "openai_responses")!;
    expect(cut.history.map((message) => message.id)).toEqual(["a2", "u2"]);
    expect(cut.dropped).toEqual(["u1", "a1", "t1"]);
    expect(cut.formatted).toEqual(["a2"]);
    expect(render(history, Provider.OPENAI_RESPONSES)["input"]).toEqual([
      { type: "compaction", id: "cmp_1", encrypted_content: "gAAA" },
      { type: "message", role: "assistant", content: "after" },
      { type: "message", role: "user", content: "next" },
    ]);
  });

  it("names the first message no summary covers when refusing another provider", () => {
    const summary = create(MessageSchema, { id: "s1", role: Role.USER, parts: [text("Summary: q.")], provenance: { kind: { case: "summary", value: { coveredMessageIds: ["u0"] } } } });
    const history = [summary, user("u1", "q"), assistant("a1", anthropicBlock("S"), text("answer"))];
    const error = thrown(() => render(history, Provider.GEMINI));
    expect(error.code).toBe(Code.FailedPrecondition);
    expect(error.rawMessage).toContain('provider rule gemini.provider_compaction violated at message "a1": part 0 is the Anthropic Messages compaction');
    expect(error.rawMessage).toContain('message "u1" before it is in no contextd summary');
  });

  it("refuses malformed compaction blocks and items, naming the JSON path", () => {
    const anthropicBody = (block: unknown) => encode({ type: "message", role: "assistant", content: [block] });
    expect(thrown(() => parseProviderResponse(Provider.ANTHROPIC_MESSAGES, anthropicBody({ type: "compaction", content: "", encrypted_content: null }))).rawMessage).toContain("content[0].content: a compaction block's content is a summary or null, never empty");
    expect(thrown(() => parseProviderResponse(Provider.ANTHROPIC_MESSAGES, anthropicBody({ type: "compaction", content: "S", encrypted_content: 7 }))).rawMessage).toContain("content[0].encrypted_content: expected a JSON string");
    expect(thrown(() => parseProviderResponse(Provider.ANTHROPIC_MESSAGES, anthropicBody({ type: "compaction", content: "S", encrypted_content: "e", tool_changes: [{ type: "tool_swap", tool: {} }] }))).rawMessage).toContain(
      'content[0].tool_changes[0].type: expected "tool_addition" or "tool_removal", got "tool_swap"',
    );
    expect(thrown(() => parseProviderResponse(Provider.OPENAI_RESPONSES, encode({ object: "response", output: [{ type: "compaction", id: "cmp_1" }] }))).rawMessage).toContain("output[0].encrypted_content: expected a JSON string");
    const compacted = thrown(() => parseProviderResponse(Provider.OPENAI_RESPONSES, encode({ object: "response.compaction", output: [] })));
    expect(compacted.code).toBe(Code.InvalidArgument);
    expect(compacted.rawMessage).toContain("a /responses/compact answer replaces the conversation's input");
  });

  it("merges a stream whose compaction_delta says the compaction failed (null content) into a block that cuts nothing", () => {
    const events = [
      { type: "message_start", message: { type: "message", role: "assistant", content: [] } },
      { type: "content_block_start", index: 0, content_block: { type: "compaction", content: null, encrypted_content: null } },
      { type: "content_block_delta", index: 0, delta: { type: "compaction_delta", content: null } },
      { type: "content_block_stop", index: 0 },
      { type: "message_stop" },
    ].map(encode);
    const merged = mergeProviderStream(Provider.ANTHROPIC_MESSAGES, events);
    expect(merged.complete).toBe(true);
    expect(merged.body["content"]).toEqual([{ type: "compaction", content: null, encrypted_content: null }]);
    const [message] = parseProviderResponse(Provider.ANTHROPIC_MESSAGES, encode(merged.body));
    const part = message!.parts[0]!.kind;
    expect(part.case === "providerCompaction" && [part.value.provider, part.value.summary, part.value.encryptedContent]).toEqual([Provider.ANTHROPIC_MESSAGES, undefined, undefined]);
    expect(cutAtLatestCompaction([user("u1", "q"), message!], Provider.ANTHROPIC_MESSAGES, "anthropic")).toBeUndefined();
    const wrongDelta = [events[0]!, encode({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }), encode({ type: "content_block_delta", index: 0, delta: { type: "compaction_delta", content: "S" } })];
    expect(thrown(() => mergeProviderStream(Provider.ANTHROPIC_MESSAGES, wrongDelta)).rawMessage).toContain("events[2]: malformed provider response at delta.type: a compaction_delta cannot extend a text block");
  });
});
