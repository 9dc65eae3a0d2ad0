import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import {
  CompileRequestSchema,
  CompileResultPart,
  SegmentFormatterSchema,
  TransformationAction,
  TransformationReason,
  type CompileRequest,
} from "#gen/contextd/v1/compile_pb";
import { Role, type Message } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment, ToolDefinitionSchema, type ToolDefinition } from "#gen/contextd/v1/state_pb";
import { compile } from "../../src/core/compile/compile.js";
import {
  normalizePractice,
  occursIn,
  toolCallRulesId,
  toolCallRulesText,
  toolGuidanceId,
  toolGuidanceText,
  withoutToolCallRules,
} from "../../src/core/compile/system-prompt.js";
import { applyDeltas } from "../../src/core/deltas/apply-deltas.js";
import { maxBestPracticeChars, maxPromptInjectionChars } from "../../src/core/deltas/tool-definitions.js";
import { emptyConversationState } from "../../src/store/commit-plan.js";
import { thrownConnectError } from "../support/thrown.js";
import { testContext } from "./compile-context.js";
import { message, system, text, user } from "./messages.js";
import { rejectsWith } from "./rejects.js";

const tool = (name: string, description = "", bestPractices: string[] = [], promptInjection = ""): ToolDefinition =>
  create(ToolDefinitionSchema, { name, description, bestPractices, promptInjection });

type RequestInit = Omit<MessageInitShape<typeof CompileRequestSchema>, "system" | "$typeName">;

function request(fields: Partial<{ system: Message[]; tools: ToolDefinition[]; guidance: boolean; rules: boolean }> & RequestInit): CompileRequest {
  const { system: systemMessages, tools, guidance, rules, ...rest } = fields;
  return create(CompileRequestSchema, {
    system: { messages: systemMessages ?? [system("sys", "You are helpful.")] },
    history: { messages: [user("u1", "hello")] },
    toolDefinitions: { toolDefinitions: tools ?? [tool("lookup", "Find a record.", ["Pass the record id."])] },
    systemPrompt: { toolGuidance: guidance ?? true, toolCallRules: rules ?? false },
    ...rest,
  });
}

const textOf = (message: Message) => message.parts.map((part) => (part.kind.case === "text" ? part.kind.value.text : "")).join("");

describe("normalizePractice", () => {
  it("removes backticks, collapses whitespace, lower-cases and drops one final dot", () => {
    expect(normalizePractice("  Use `site:`\t\tfilters.\n")).toBe("use site: filters");
    expect(normalizePractice("Use site: filters .")).toBe("use site: filters");
    expect(normalizePractice("Stop...")).toBe("stop..");
    expect(normalizePractice("a\u00a0\u2003b")).toBe("a b");
    expect(normalizePractice("``` . ")).toBe("");
  });

  it("agrees with the regex spelling of the same rules on mixed text", () => {
    const alphabet = ["a", "B", " ", "\t", "\n", "`", ".", "\u00a0", "é", "Z"];
    let seed = 7;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31);
    for (let round = 0; round < 500; round++) {
      let value = "";
      const length = next() % 20;
      for (let index = 0; index < length; index++) value += alphabet[next() % alphabet.length];
      let expected = value.replaceAll("`", "").replace(/\s+/g, " ").trim().toLowerCase();
      if (expected.endsWith(".")) expected = expected.slice(0, -1).trimEnd();
      expect(normalizePractice(value)).toBe(expected);
    }
  });
});

describe("occursIn", () => {
  it("finds every needle that occurs, overlapping and nested ones included", () => {
    expect(occursIn("aaaa", ["a", "aa", "aaaaa", "aaa"])).toEqual([true, true, false, true]);
    expect(occursIn("ushers", ["he", "she", "his", "hers"])).toEqual([true, true, false, true]);
    expect(occursIn("", ["x", ""])).toEqual([false, true]);
    expect(occursIn("abc", ["abc", "abc"])).toEqual([true, true]);
  });

  it("agrees with includes on random texts, small (searched with includes) and large (the automaton)", () => {
    let seed = 11;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31);
    const word = (length: number, letters: string) => Array.from({ length }, () => letters[next() % letters.length]).join("");
    for (const [rounds, haystackLength, needleLength, letters] of [
      [300, 40, 6, "ab"],
      [40, 3_000, 40, "ab"],
      [40, 3_000, 12, "abc"],
    ] as const) {
      for (let round = 0; round < rounds; round++) {
        const haystack = word(next() % haystackLength, letters);
        const needles = Array.from({ length: 1 + (next() % 30) }, () => word(1 + (next() % needleLength), letters));
        expect(occursIn(haystack, needles)).toEqual(needles.map((needle) => haystack.includes(needle)));
      }
    }
  });

  it("answers the adversarial shape (a long run of one letter, needles that almost match everywhere)", () => {
    const haystack = "a".repeat(200_000);
    const needles = Array.from({ length: 100 }, (_, index) => "a".repeat(1_000 + index) + "b");
    expect(occursIn(haystack, needles).every((found) => !found)).toBe(true);
    expect(occursIn(haystack + "b", needles).every((found) => found)).toBe(true);
  });
});

describe("withoutToolCallRules", () => {
  it("takes out every closed block and joins what is around it by one blank line", () => {
    expect(withoutToolCallRules("no rules here")).toBeUndefined();
    expect(withoutToolCallRules("Hi.\n<tool_call_rules>x</tool_call_rules>\n\n\nBye.")).toBe("Hi.\n\nBye.");
    expect(withoutToolCallRules("<tool_call_rules>x</tool_call_rules>")).toBe("");
    expect(withoutToolCallRules("A <tool_call_rules>1</tool_call_rules> B <tool_call_rules>2</tool_call_rules> C")).toBe("A\n\nB\n\nC");
    expect(withoutToolCallRules("A <tool_call_rules> never closed")).toBeUndefined();
    expect(withoutToolCallRules(`Base.\n\n${toolCallRulesText}`)).toBe("Base.");
  });
});

describe("toolGuidanceText", () => {
  it("is undefined without a named tool, and refuses two definitions with one name", () => {
    expect(toolGuidanceText([tool(""), tool(" \t")])).toBeUndefined();
    expect(thrownConnectError(() => toolGuidanceText([tool("a"), tool("b"), tool("a")])).rawMessage).toBe(
      'tool_definitions[2].name: duplicate tool name "a" (also tool_definitions[0]); the tool guidance block needs one definition per name',
    );
  });

  it("writes one entry per tool: name, description, numbered practices, injection", () => {
    expect(toolGuidanceText([tool("b", "Does B.", ["First.", "first", "Does B"], "Example: b()"), tool("a")])).toBe(
      [
        "<tool_guidance>",
        "Guidance for the tools you can call. Whenever you call one of them, follow the practices listed under it.",
        "",
        "Tool: a",
        "",
        "Tool: b",
        "Use it for: Does B.",
        "Practices:",
        "1. First.",
        "Example: b()",
        "</tool_guidance>",
      ].join("\n"),
    );
  });
});

describe("system-prompt assembly in a compile", () => {
  it("changes nothing without system_prompt, or with both blocks off", async () => {
    const plain = await compile(request({ systemPrompt: undefined }), testContext());
    const off = await compile(request({ guidance: false, rules: false }), testContext());
    for (const result of [plain, off]) {
      expect(result.payload!.system.map((message) => message.id)).toEqual(["sys"]);
      expect(result.introduced).toEqual([]);
    }
  });

  it("counts the blocks in the system tokens, reserved before history, and never trims them", async () => {
    const without = await compile(request({ guidance: false }), testContext());
    const withBlocks = await compile(request({ rules: true }), testContext());
    expect(withBlocks.usage!.system).toBeGreaterThan(without.usage!.system);
    expect(withBlocks.usage!.reserved - without.usage!.reserved).toBe(withBlocks.usage!.system - without.usage!.system);

    // A budget that fits history without the blocks but not with them: history is trimmed, the blocks stay.
    const history = { messages: [user("old", "x".repeat(400)), message(Role.ASSISTANT, "a1", "ok"), user("u1", "hello")] };
    const fitsWithout = await compile(request({ guidance: false, history }), testContext());
    const unbounded = await compile(request({ rules: true, history }), testContext());
    const limit = unbounded.usage!.total - 20n;
    expect(fitsWithout.usage!.total).toBeLessThan(limit);
    const trimmed = await compile(request({ rules: true, history, budget: { maxTokens: limit } }), testContext());
    expect(trimmed.payload!.system.map((message) => message.id)).toEqual([toolGuidanceId, "sys", toolCallRulesId]);
    expect(trimmed.payload!.history.map((message) => message.id)).toEqual(["u1"]);
    expect(trimmed.usage!.total).toBeLessThanOrEqual(limit);

    // Too small for the blocks themselves: the budget names the reserved system tokens.
    await rejectsWith(compile(request({ rules: true, budget: { maxTokens: 50n } }), testContext()), Code.ResourceExhausted, /reserved before any history \(system \d+,/);
  });

  it("never reaches persistence or the writeback; an emptied message persists unchanged", async () => {
    const base = system("sys", `You are helpful.\n\n${toolCallRulesText.replace("Call a tool", "Always call a tool")}`);
    const onlyRules = system("rules_only", "<tool_call_rules>\n- old\n</tool_call_rules>");
    const result = await compile(
      request({ system: [base, onlyRules], rules: true, include: [CompileResultPart.PERSISTENCE, CompileResultPart.WRITEBACK_SNAPSHOT, CompileResultPart.SOURCE] }),
      testContext(),
    );
    expect(result.payload!.system.map((message) => message.id)).toEqual([toolGuidanceId, "sys", toolCallRulesId]);
    expect(textOf(result.payload!.system[1]!)).toBe("You are helpful.");
    expect(result.transformations["sys"]).toMatchObject({ action: TransformationAction.FORMATTED, reason: TransformationReason.SYSTEM_PROMPT_ASSEMBLY });
    expect(result.transformations["rules_only"]).toMatchObject({ action: TransformationAction.DROPPED, reason: TransformationReason.SYSTEM_PROMPT_ASSEMBLY });
    expect(result.persistence!.system).toEqual([base, onlyRules]);
    expect(result.writeback!.snapshot!.system).toEqual([base, onlyRules]);
    expect(result.source!.snapshot!.system).toEqual([base, onlyRules]);
    expect(result.introduced.map((introduced) => [introduced.segment, introduced.message!.id])).toEqual([
      [Segment.SYSTEM, toolCallRulesId],
      [Segment.SYSTEM, toolGuidanceId],
    ]);
  });

  it("keeps the other parts of a message whose text part was only a rules block", async () => {
    const mixed = message(Role.SYSTEM, "mixed", text("<tool_call_rules>x</tool_call_rules>"), text("Keep me."));
    const result = await compile(request({ system: [mixed], guidance: false, rules: true }), testContext());
    expect(result.payload!.system.map((message) => [message.id, textOf(message)])).toEqual([
      ["mixed", "Keep me."],
      [toolCallRulesId, toolCallRulesText],
    ]);
  });

  it("lets later stages see the blocks: a join formatter makes one system message of them", async () => {
    const join = create(SegmentFormatterSchema, { segment: Segment.SYSTEM, kind: { case: "join", value: {} } });
    const result = await compile(request({ rules: true, formatters: [join] }), testContext());
    expect(result.payload!.system).toHaveLength(1);
    const joined = textOf(result.payload!.system[0]!);
    expect(joined.startsWith("<tool_guidance>\n")).toBe(true);
    expect(joined.endsWith(`\n\nYou are helpful.\n\n${toolCallRulesText}`)).toBe(true);
  });

  it("adds the blocks to a segment projection that includes the system segment", async () => {
    const result = await compile(request({ rules: true, targets: [{ name: "side", segments: [Segment.SYSTEM, Segment.HISTORY] }, { name: "no_system", segments: [Segment.HISTORY] }] }), testContext());
    expect(result.projections[0]!.messages.map((message) => message.id)).toEqual([toolGuidanceId, "sys", toolCallRulesId, "u1"]);
    expect(result.projections[1]!.messages.map((message) => message.id)).toEqual(["u1"]);
  });

  it("refuses a best practice or injection over its limit, naming the tool and the limit, at compile and at commit", async () => {
    const long = tool("lookup", "Find.", ["ok", "x".repeat(maxBestPracticeChars + 1)]);
    await rejectsWith(
      compile(request({ tools: [tool("other"), long] }), testContext()),
      Code.InvalidArgument,
      new RegExp(`^tool_definitions\\[1\\]\\.best_practices\\[1\\]: tool "lookup" has a best practice of ${maxBestPracticeChars + 1} characters, over the limit of ${maxBestPracticeChars}$`),
    );
    // Checked whether or not the block is on: the definition itself is invalid.
    await rejectsWith(
      compile(request({ tools: [tool("", "", [], "y".repeat(maxPromptInjectionChars + 1))], guidance: false }), testContext()),
      Code.InvalidArgument,
      new RegExp(`^tool_definitions\\[0\\]\\.prompt_injection: tool without a name has a prompt injection of ${maxPromptInjectionChars + 1} characters, over the limit of ${maxPromptInjectionChars}$`),
    );
    const atLimit = tool("lookup", "Find.", ["x".repeat(maxBestPracticeChars)], "y".repeat(maxPromptInjectionChars));
    expect((await compile(request({ tools: [atLimit] }), testContext())).payload!.system[0]!.id).toBe(toolGuidanceId);

    const commit = create(DeltaSchema, { operation: { case: "setToolDefinitions", value: { toolDefinitions: [long] } } });
    const error = thrownConnectError(() => applyDeltas(emptyConversationState("c"), [commit], { newMessageId: () => "m" }));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toBe(
      `deltas[0].set_tool_definitions: tool_definitions[0].best_practices[1]: tool "lookup" has a best practice of ${maxBestPracticeChars + 1} characters, over the limit of ${maxBestPracticeChars}`,
    );
  });

  it("obeys the compile text allowance", async () => {
    const tools = [tool("lookup", "Find.", Array.from({ length: 40 }, (_, index) => `Practice number ${index}.`))];
    const message = await rejectsWith(
      compile(request({ tools }), testContext({ maxCompileTextBytes: 200 })),
      Code.ResourceExhausted,
      /^system_prompt\.tool_guidance: the compile's text would grow to \d+ characters, over its limit of 200 /,
    );
    expect(message).toContain("--max-compile-text-bytes");
    await rejectsWith(compile(request({ guidance: false, rules: true }), testContext({ maxCompileTextBytes: 100 })), Code.ResourceExhausted, /^system_prompt\.tool_call_rules: /);
  });

  it("reads stored definitions and experiences of a stateful compile, with the request's system as the override", async () => {
    const stored = {
      ...emptyConversationState("c"),
      version: 2n,
      system: [system("stored_sys", "Stored prompt.")],
      history: [user("u1", "hello")],
      toolDefinitions: [tool("stored_tool", "From the state.", ["Be careful."])],
      experiences: [{ $typeName: "contextd.v1.Experience" as const, id: "exp_1", text: "likes tea" }],
    };
    const inherit = create(CompileRequestSchema, { conversationId: "c", systemPrompt: { toolGuidance: true, toolCallRules: true } });
    const inherited = await compile(inherit, testContext({ stored }));
    expect(inherited.payload!.system.map((message) => message.id)).toEqual([toolGuidanceId, "stored_sys", "experiences", toolCallRulesId]);
    expect(textOf(inherited.payload!.system[0]!)).toContain("Tool: stored_tool\nUse it for: From the state.\nPractices:\n1. Be careful.");
    const overridden = await compile({ ...inherit, system: { $typeName: "contextd.v1.MessageList", messages: [system("override", "Override.")] } }, testContext({ stored }));
    expect(overridden.payload!.system.map((message) => message.id)).toEqual([toolGuidanceId, "override", "experiences", toolCallRulesId]);
  });
});
