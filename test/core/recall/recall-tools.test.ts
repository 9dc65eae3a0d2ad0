import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, ToolDefinitionSchema } from "#gen/contextd/v1/state_pb";
import { compile } from "../../../src/core/compile/compile.js";
import { recallAskOfToolCall, recallMessageToolName, searchHistoryToolName } from "../../../src/core/recall/recall-tools.js";
import { testContext } from "../compile-context.js";
import { user } from "../messages.js";
import { rejectsWith } from "../rejects.js";

const stored = create(ConversationStateSchema, { conversationId: "c", version: 3n, history: [user("u0", "hello")], toolDefinitions: [create(ToolDefinitionSchema, { name: "read_file", parameters: '{"type":"object"}' })] });
const stateful = (extra: Parameters<typeof create<typeof CompileRequestSchema>>[1] = {}) =>
  compile(create(CompileRequestSchema, { conversationId: "c", recallTools: true, ...extra }), { ...testContext(), stored });

describe("recall tools in the compiled prompt", () => {
  it("appends the two recall tools after the conversation's own, the same definitions in every compile", async () => {
    const first = await stateful();
    const names = first.payload!.toolDefinitions.map((definition) => definition.name);
    expect(names).toEqual(["read_file", recallMessageToolName, searchHistoryToolName]);
    const again = await stateful({ currentTurn: { raw: user("u1", "more") } });
    expect(again.payload!.toolDefinitions).toEqual(first.payload!.toolDefinitions);
    expect(first.payload!.toolDefinitions[2]!.description).toContain("left out of this prompt");
  });

  it("renders them for every provider, with their JSON Schema parameters", async () => {
    for (const provider of [Provider.OPENAI_CHAT, Provider.OPENAI_RESPONSES, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI]) {
      const result = await stateful({ render: { provider, model: "m" } });
      const body = new TextDecoder().decode(result.rendered!.json);
      expect(body, Provider[provider]).toContain(`"${searchHistoryToolName}"`);
      expect(body, Provider[provider]).toContain('"max_results"');
    }
  });

  it("refuses a user tool with a recall tool's name, and a stateless compile, naming why", async () => {
    const clash = create(ToolDefinitionSchema, { name: searchHistoryToolName });
    const message = await rejectsWith(stateful({ toolDefinitions: { toolDefinitions: [clash] } }), Code.InvalidArgument, /tool_definitions\[0\]: the name "contextd_search_history" is reserved/);
    expect(message).toContain("recall_tools");
    await rejectsWith(compile(create(CompileRequestSchema, { recallTools: true, history: { messages: [user("u0", "x")] } }), testContext()), Code.InvalidArgument, /recall_tools: needs a stateful compile/);
    // Off, the same name is the user's to use.
    const off = await stateful({ recallTools: false, toolDefinitions: { toolDefinitions: [clash] } });
    expect(off.payload!.toolDefinitions.map((definition) => definition.name)).toEqual([searchHistoryToolName]);
  });
});

describe("recall tool calls", () => {
  it("reads both tools' arguments", () => {
    expect(recallAskOfToolCall(recallMessageToolName, '{"message_ids":["a","b"]}')).toEqual({ kind: "ids", ids: ["a", "b"] });
    expect(recallAskOfToolCall(searchHistoryToolName, '{"query":"src/a.ts","max_results":3}')).toEqual({ kind: "search", query: "src/a.ts", maxResults: 3 });
    expect(recallAskOfToolCall(searchHistoryToolName, '{"query":"x"}')).toEqual({ kind: "search", query: "x", maxResults: 0 });
  });

  it("refuses another tool, arguments that are not an object, and fields of the wrong type, naming them", () => {
    const code = (run: () => unknown) => {
      try {
        run();
      } catch (error) {
        return `${(error as { code: Code }).code} ${(error as Error).message}`;
      }
      return "accepted";
    };
    expect(code(() => recallAskOfToolCall("read_file", "{}"))).toMatch(/^3 .*tool_call.name: "read_file" is not a recall tool/);
    expect(code(() => recallAskOfToolCall(searchHistoryToolName, "[1]"))).toMatch(/^3 .*tool_call.arguments: contextd_search_history takes a JSON object/);
    expect(code(() => recallAskOfToolCall(searchHistoryToolName, "{"))).toMatch(/^3 .*tool_call.arguments: not JSON text/);
    expect(code(() => recallAskOfToolCall(searchHistoryToolName, '{"query":1}'))).toMatch(/^3 .*tool_call.arguments.query/);
    expect(code(() => recallAskOfToolCall(searchHistoryToolName, '{"query":"a","max_results":1.5}'))).toMatch(/^3 .*tool_call.arguments.max_results/);
    expect(code(() => recallAskOfToolCall(recallMessageToolName, '{"message_ids":"a"}'))).toMatch(/^3 .*tool_call.arguments.message_ids/);
  });
});
