import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, RenderOptionsSchema } from "#gen/contextd/v1/compile_pb";
import { PartSchema, Provider, Role } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment, type Delta } from "#gen/contextd/v1/state_pb";
import { compile } from "../../src/core/compile/compile.js";
import { applyDeltas } from "../../src/core/deltas/apply-deltas.js";
import { jsonDepthExcess, maxJsonDepth } from "../../src/core/model/json-depth.js";
import { renderRequest } from "../../src/core/providers/render.js";
import { emptyConversationState } from "../../src/store/commit-plan.js";
import { payload } from "../providers/build-messages.js";
import { thrownConnectError } from "../support/thrown.js";
import { testContext } from "./compile-context.js";
import { call, message, result, user } from "./messages.js";
import { rejectsWith } from "./rejects.js";

const nestedArrays = (depth: number) => "[".repeat(depth) + "]".repeat(depth);
const nestedObjects = (depth: number) => '{"a":'.repeat(depth) + "1" + "}".repeat(depth);
const deep = 100_000;
const deltaContext = () => {
  let counter = 0;
  return { newMessageId: () => `m${++counter}` };
};

describe("jsonDepthExcess", () => {
  it("accepts the limit and names the path of the first container past it", () => {
    expect(jsonDepthExcess(nestedArrays(maxJsonDepth))).toBeUndefined();
    expect(jsonDepthExcess(nestedArrays(maxJsonDepth + 1))).toBe("$" + "[0]".repeat(maxJsonDepth));
    expect(jsonDepthExcess(nestedObjects(deep))).toBe("$" + ".a".repeat(maxJsonDepth));
    expect(jsonDepthExcess(`{"list":[1,2,{"odd key":${nestedArrays(70)}}]}`)).toBe(`$.list[2]["odd key"]` + "[0]".repeat(maxJsonDepth - 3));
  });

  it("skips brackets inside strings, escaped quotes included", () => {
    expect(jsonDepthExcess(JSON.stringify({ text: nestedArrays(200), quote: '\\"[[[' }))).toBeUndefined();
  });
});

describe("JSON depth is limited wherever a caller's JSON comes in", () => {
  it("refuses 100,000-deep tool-call arguments at a stateless compile, with the JSON path", async () => {
    const request = create(CompileRequestSchema, { history: { messages: [message(Role.ASSISTANT, "a1", call("c1", "lookup", nestedArrays(deep)))] } });
    await rejectsWith(
      compile(request, testContext()),
      Code.InvalidArgument,
      new RegExp(`^history\\[0\\]\\.parts\\[0\\]\\.tool_call\\.arguments\\.data: JSON nested deeper than 64 levels at \\$(\\[0\\]){64}$`),
    );
    const dataResult = create(PartSchema, { kind: { case: "toolResult", value: { toolCallId: "c1", name: "lookup", payload: { data: nestedObjects(deep) } } } });
    const pending = create(CompileRequestSchema, { pending: [message(Role.TOOL, "t1", dataResult)] });
    await rejectsWith(compile(pending, testContext()), Code.InvalidArgument, /^pending\[0\]\.parts\[0\]\.tool_result\.payload\.data: JSON nested deeper than 64 levels at \$(\.a){64}$/);
  });

  it("refuses them at commit, so nothing is stored that cannot be rendered", () => {
    const append: Delta = create(DeltaSchema, {
      operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: [user("u1", "go"), message(Role.ASSISTANT, "a1", call("c1", "lookup", nestedArrays(deep)))] } },
    });
    const error = thrownConnectError(() => applyDeltas(emptyConversationState("c"), [append], deltaContext()));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toMatch(/^deltas\[0\]\.append_messages: messages\[1\]\.parts\[0\]\.tool_call\.arguments\.data: JSON nested deeper than 64 levels at \$(\[0\]){64}$/);

    const tools: Delta = create(DeltaSchema, { operation: { case: "setToolDefinitions", value: { toolDefinitions: [{ name: "t", parameters: nestedObjects(deep) }] } } });
    const toolsError = thrownConnectError(() => applyDeltas(emptyConversationState("c"), [tools], deltaContext()));
    expect(toolsError.rawMessage).toMatch(/^deltas\[0\]\.set_tool_definitions: tool_definitions\[0\]\.parameters: JSON nested deeper than 64 levels at \$(\.a){64}$/);
  });

  it("refuses a 100,000-deep provider response at append_provider_response ingestion, with the JSON path", () => {
    const body = `{"id":"msg","type":"message","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":${nestedObjects(deep)}}]}`;
    const delta: Delta = create(DeltaSchema, {
      operation: { case: "appendProviderResponse", value: { provider: Provider.ANTHROPIC_MESSAGES, json: new TextEncoder().encode(body) } },
    });
    const error = thrownConnectError(() => applyDeltas(emptyConversationState("c"), [delta], deltaContext()));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toMatch(/^deltas\[0\]\.append_provider_response: malformed provider response at \$\.content\[0\]\.input(\.a){61}: JSON nested deeper than 64 levels$/);
  });

  it("renders deep JSON stored before the limit without overflowing the stack", () => {
    // Built directly, as an older version may have stored it.
    const stored = payload({ history: [user("u1", "go"), message(Role.ASSISTANT, "a1", call("c1", "lookup", nestedObjects(deep))), message(Role.TOOL, "t1", result("c1", "ok"))] });
    for (const provider of [Provider.ANTHROPIC_MESSAGES, Provider.GEMINI]) {
      const error = thrownConnectError(() => renderRequest(stored, create(RenderOptionsSchema, { provider, model: "m" })));
      expect(error.code).toBe(Code.FailedPrecondition);
      expect(error.rawMessage).toMatch(/arguments of tool call "c1" nest deeper than 64 levels at \$(\.a){64}$/);
    }
    // OpenAI takes arguments as text: sent as they are.
    const rendered = renderRequest(stored, create(RenderOptionsSchema, { provider: Provider.OPENAI_CHAT, model: "m" }));
    expect(rendered.json.length).toBeGreaterThan(2 * deep);
  });
});
