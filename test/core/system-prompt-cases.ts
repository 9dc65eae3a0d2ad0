import { create } from "@bufbuild/protobuf";
import { CompileRequestSchema, type CompileRequest } from "#gen/contextd/v1/compile_pb";
import { ToolDefinitionSchema, type ToolDefinition } from "#gen/contextd/v1/state_pb";
import { developer, system, user } from "../providers/build-messages.js";

/** The requests behind test/golden/system-prompt/*.json (format in that folder's README). */
export interface SystemPromptCase {
  name: string;
  description: string;
  /** A stateless CompileRequest without `render`; the golden file adds one per provider. */
  request: CompileRequest;
  model: string;
  /** False when the definitions themselves cannot be rendered (a tool without a name). */
  renders: boolean;
}

const tool = (name: string, description: string, bestPractices: string[] = [], promptInjection = ""): ToolDefinition =>
  create(ToolDefinitionSchema, {
    name,
    description,
    parameters: JSON.stringify({ type: "object", properties: { q: { type: "string" } } }),
    bestPractices,
    promptInjection,
  });

const question = user("u1", "What is the weather in Oslo, and any news about it?");

function request(fields: {
  system: ReturnType<typeof system>[];
  tools: ToolDefinition[];
  toolGuidance?: boolean;
  toolCallRules?: boolean;
  experiences?: { id: string; text: string }[];
}): CompileRequest {
  return create(CompileRequestSchema, {
    system: { messages: fields.system },
    history: { messages: [question] },
    toolDefinitions: { toolDefinitions: fields.tools },
    ...(fields.experiences ? { experiences: { experiences: fields.experiences } } : {}),
    systemPrompt: { toolGuidance: fields.toolGuidance ?? false, toolCallRules: fields.toolCallRules ?? false },
  });
}

export const systemPromptCases: SystemPromptCase[] = [
  {
    name: "overlapping_practices",
    description:
      "Two tools given out of name order. Repeats inside one tool (case, backticks, spacing, a final dot) are shown once, " +
      "in their first spelling; a practice both tools share stays under each.",
    model: "test-model",
    renders: true,
    request: request({
      system: [system("sys", "You are a travel assistant.")],
      tools: [
        tool("web_search", "Search the web and return the top pages.", [
          "Use `site:` to stay on one domain.",
          "use site: to stay on one   domain",
          "Prefer one call with all the terms over several calls.",
          "USE `SITE:` TO STAY ON ONE DOMAIN",
        ]),
        tool("get_weather", "Current weather for a city.", [
          "Prefer one call with all the terms over several calls",
          "Give the city in English.",
          "  give the city\tin English .  ",
        ]),
      ],
      toolGuidance: true,
    }),
  },
  {
    name: "practice_in_description",
    description:
      "Practices equal to the description, or contained in it after normalisation, are left out; the others are numbered " +
      "from 1; the prompt injection ends the entry verbatim.",
    model: "test-model",
    renders: true,
    request: request({
      system: [system("sys", "You are a travel assistant.")],
      tools: [
        tool(
          "get_weather",
          "Look up the current weather for a city by its name.",
          [
            "Look up the current weather for a city by its name",
            "`current weather` for a city",
            "Ask which country when the city name is ambiguous.",
          ],
          'Example call: get_weather({"q": "Oslo"})',
        ),
      ],
      toolGuidance: true,
    }),
  },
  {
    name: "tool_without_name",
    description:
      "Definitions with an empty name or a name of only spaces get no entry; the named one does. (Providers refuse the " +
      "nameless definitions, so there are no bodies.)",
    model: "test-model",
    renders: false,
    request: request({
      system: [system("sys", "You are a travel assistant.")],
      tools: [tool("", "A tool nobody can call.", ["Never shown."]), tool("   ", "Neither can this one."), tool("get_weather", "Current weather for a city.")],
      toolGuidance: true,
    }),
  },
  {
    name: "no_named_tool",
    description: "Tool guidance on, but no definition has a name: no block, the system segment is sent as it is.",
    model: "test-model",
    renders: false,
    request: request({
      system: [system("sys", "You are a travel assistant.")],
      tools: [tool("", "A tool nobody can call.", ["Never shown."])],
      toolGuidance: true,
    }),
  },
  {
    name: "rules_block_on",
    description: "The rules block alone: it comes last in the system segment, after the experiences block.",
    model: "test-model",
    renders: true,
    request: request({
      system: [system("sys", "You are a travel assistant."), developer("dev", "Answer in English.")],
      tools: [tool("get_weather", "Current weather for a city.")],
      experiences: [{ id: "exp_1", text: "The user lives in Oslo." }],
      toolCallRules: true,
    }),
  },
  {
    name: "rules_block_off",
    description:
      "Tool guidance on, rules off: a rules block the caller wrote into the system prompt is left where it is, and none is added.",
    model: "test-model",
    renders: true,
    request: request({
      system: [system("sys", "You are a travel assistant.\n\n<tool_call_rules>\n- Our own rule.\n</tool_call_rules>")],
      tools: [tool("get_weather", "Current weather for a city.", ["Give the city in English."])],
      toolGuidance: true,
    }),
  },
  {
    name: "existing_rules_block",
    description:
      "Both blocks on, and the base prompt already holds rules blocks: they are taken out (the text around them joined by a " +
      "blank line; a message that was only a rules block is left out), so the rules appear once, at the end.",
    model: "test-model",
    renders: true,
    request: request({
      system: [
        system("sys", "You are a travel assistant.\n\n<tool_call_rules>\n- An older wording of the rules.\n</tool_call_rules>\n\nAnswer briefly."),
        system("old_rules", "<tool_call_rules>\n- Another copy.\n</tool_call_rules>\n"),
      ],
      tools: [tool("get_weather", "Current weather for a city.", ["Give the city in English."])],
      toolGuidance: true,
      toolCallRules: true,
    }),
  },
];
