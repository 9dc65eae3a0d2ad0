import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { clone, create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompiledPayloadSchema, CompileRequestSchema, RenderOptionsSchema, type CompileRequest } from "#gen/contextd/v1/compile_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { compile } from "../../src/core/compile/compile.js";
import type { CompileContext } from "../../src/core/compile/compile-context.js";
import { renderRequest } from "../../src/core/providers/render.js";
import { testContext } from "../core/compile-context.js";
import { dropsUnsupportedMedia, generateConversation, type GeneratedConversation } from "./conversations.js";
import { checkProviderRules, type ProviderName } from "./provider-rules.js";

/**
 * The conformance harness (issue 27): 320 seeded conversations, compiled and rendered for the four
 * providers, stateless and stateful, each body checked against the providers' official SDK
 * request types (sdk_request_types.py, in the repository's .venv) and against the documented
 * rules (provider-rules.ts). A compile may refuse instead, but only with a documented code: a
 * provider rule named in docs/provider-bodies.md (FAILED_PRECONDITION) or the budget's
 * RESOURCE_EXHAUSTED. Failures print the seed, the mode, the path and the rule.
 */

const conversations = 340;
const providers: Array<{ provider: Provider; name: ProviderName; model: string }> = [
  { provider: Provider.OPENAI_CHAT, name: "openai_chat", model: "gpt-4.1" },
  { provider: Provider.OPENAI_RESPONSES, name: "openai_responses", model: "gpt-4.1" },
  { provider: Provider.ANTHROPIC_MESSAGES, name: "anthropic", model: "claude-sonnet-4-5" },
  { provider: Provider.GEMINI, name: "gemini", model: "gemini-2.5-pro" },
];
const documentedRules = readFileSync(new URL("../../docs/provider-bodies.md", import.meta.url), "utf8");
const python = new URL("../../.venv/bin/python", import.meta.url).pathname;
const sdkCheck = new URL("./sdk_request_types.py", import.meta.url).pathname;

interface Rendered {
  key: string;
  provider: ProviderName;
  body: Record<string, unknown>;
}

async function renderAll(conversation: GeneratedConversation, refusals: Map<string, number>, problems: string[]): Promise<Rendered[]> {
  const rendered: Rendered[] = [];
  for (const target of providers) {
    for (const mode of ["stateless", "stateful"] as const) {
      const key = `seed ${conversation.seed} ${target.name} ${mode} [${conversation.traits.join(" ")}]`;
      const base = mode === "stateless" ? conversation.stateless : conversation.stateful.request;
      const request = clone(CompileRequestSchema, base);
      request.render = create(RenderOptionsSchema, { provider: target.provider, model: target.model, dropUnsupportedMedia: dropsUnsupportedMedia(conversation.seed) });
      const context = mode === "stateless" ? testContext() : { ...testContext(), stored: conversation.stateful.stored };
      try {
        const json = await renderedJson(conversation, request, context);
        rendered.push({ key, provider: target.name, body: JSON.parse(new TextDecoder().decode(json)) as Record<string, unknown> });
      } catch (error) {
        const refusal = documentedRefusal(error);
        if (refusal === undefined) problems.push(`${key}: undocumented refusal: ${String(error)}`);
        else refusals.set(refusal, (refusals.get(refusal) ?? 0) + 1);
      }
    }
  }
  return rendered;
}

/**
 * The compile's rendered body. Conversations that reuse call ids every round are what the
 * compile takes once tool-call ids need be unique only within a round (issue 28); until then it
 * refuses them (`duplicate_tool_call_id`), and their segments are rendered directly, which is the
 * renderer's part of the path (ids made unique in the body: rendered-ids.ts).
 */
async function renderedJson(conversation: GeneratedConversation, request: CompileRequest, context: CompileContext): Promise<Uint8Array> {
  try {
    return (await compile(request, context)).rendered!.json;
  } catch (error) {
    const reused = conversation.traits.includes("ids:reused") && error instanceof ConnectError && error.rawMessage.includes("(duplicate_tool_call_id)");
    if (!reused) throw error;
    const { stateless } = conversation;
    const history = [...stateless.history!.messages, ...stateless.pending, ...(stateless.currentTurn?.raw ? [stateless.currentTurn.raw] : [])];
    const payload = create(CompiledPayloadSchema, { system: stateless.system!.messages, history, toolDefinitions: stateless.toolDefinitions!.toolDefinitions });
    return renderRequest(payload, request.render!).json;
  }
}

/** The rule or code of a documented refusal, or undefined for anything else. */
function documentedRefusal(error: unknown): string | undefined {
  if (!(error instanceof ConnectError)) return undefined;
  if (error.code === Code.ResourceExhausted && /budget exceeded|pending exceeds budget/.test(error.rawMessage)) return "RESOURCE_EXHAUSTED budget";
  const rule = /^provider rule ([a-z_]+\.[a-z_]+) violated at /.exec(error.rawMessage)?.[1];
  if (error.code === Code.FailedPrecondition && rule !== undefined && documentedRules.includes(`\`${rule}\``)) return rule;
  return undefined;
}

describe("conformance: bodies every provider accepts", () => {
  it("renders 340 conversations for 4 providers, stateless and stateful, with no SDK type or provider rule broken", async () => {
    const refusals = new Map<string, number>();
    const problems: string[] = [];
    const bodies: Rendered[] = [];
    for (let seed = 1; seed <= conversations; seed++) bodies.push(...(await renderAll(generateConversation(seed), refusals, problems)));

    const violations = bodies.flatMap((entry) => checkProviderRules(entry.provider, entry.body).map((violation) => `${entry.key}: ${violation.path}: ${violation.rule} (${violation.source}): ${violation.detail}`));

    const directory = mkdtempSync(join(tmpdir(), "contextd-conformance-"));
    let sdk: { checked: number; failures: Array<{ key: string; error: string }>; controls: { run: number; refused: number } };
    try {
      const file = join(directory, "bodies.jsonl");
      writeFileSync(file, bodies.map((entry) => JSON.stringify(entry)).join("\n"));
      const run = spawnSync(python, [sdkCheck, file], { encoding: "utf8", maxBuffer: 64 << 20 });
      expect(run.status, run.stderr).toBe(0);
      sdk = JSON.parse(run.stdout) as typeof sdk;
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }

    // Bodies that carry a provider compaction part went through the SDK check too (Anthropic's beta types).
    const compacted = (provider: ProviderName) => bodies.filter((entry) => entry.provider === provider && JSON.stringify(entry.body).includes('"type":"compaction"')).length;
    console.log(`conformance: ${bodies.length} bodies (${compacted("anthropic")} Anthropic and ${compacted("openai_responses")} Responses ones with a compaction), ${violations.length} rule violations, ${sdk.failures.length} SDK type failures, refusals ${JSON.stringify(Object.fromEntries(refusals))}`);
    expect(compacted("anthropic")).toBeGreaterThan(0);
    expect(compacted("openai_responses")).toBeGreaterThan(0);
    expect(sdk.failures.slice(0, 5)).toEqual([]);
    expect(violations.slice(0, 20)).toEqual([]);
    expect(problems.slice(0, 20)).toEqual([]);
    expect(sdk.checked).toBe(bodies.length);
    expect(bodies.length).toBeGreaterThanOrEqual(2000);
    // The negative controls: the SDK check refused every broken copy it was given.
    expect(sdk.controls.run).toBe(3 * providers.length + 1);
    expect(sdk.controls.refused).toBe(sdk.controls.run);
  });

  it("has a rules checker that catches each of issue 27's broken bodies", () => {
    const rules = (provider: ProviderName, body: Record<string, unknown>) => checkProviderRules(provider, body).map((violation) => violation.rule);
    expect(rules("openai_chat", { messages: [{ role: "user", content: "q", name: "Ana María" }] })).toEqual(["openai_chat.name_pattern"]);
    expect(rules("openai_chat", { messages: [{ role: "user", content: [{ type: "file", file: { file_id: "https://example.com/a.pdf" } }] }] })).toEqual(["openai_chat.file_parts"]);
    const long = "c".repeat(41);
    expect(rules("openai_chat", { messages: [{ role: "user", content: "q" }, { role: "assistant", content: null, tool_calls: [{ id: long, type: "function", function: { name: "f", arguments: "{}" } }] }, { role: "tool", tool_call_id: long, content: "r" }] })).toEqual([
      "openai_chat.tool_call_id_length",
      "openai_chat.tool_call_id_length",
    ]);
    expect(rules("openai_responses", { input: [{ type: "message", role: "user", content: "q" }, { type: "function_call", id: "fc_1", call_id: "c1", name: "f", arguments: "{}" }, { type: "function_call_output", call_id: "c1", output: "r" }] })).toEqual(["openai_responses.reasoning_pairs"]);
    expect(rules("openai_responses", { input: [{ type: "message", role: "user", content: "q" }, { type: "reasoning", id: "rs_1", summary: [] }, { type: "message", role: "user", content: "next" }] })).toEqual(["openai_responses.reasoning_pairs"]);
    expect(rules("openai_responses", { input: [{ type: "message", role: "user", content: [{ type: "input_file", file_data: "data:application/pdf;base64,JVBERg==" }] }] })).toEqual(["openai_responses.input_file"]);
    expect(rules("anthropic", { messages: [{ role: "assistant", content: [{ type: "text", text: "Hi." }] }] })).toEqual(["anthropic.first_turn_user"]);
    expect(rules("anthropic", { messages: [{ role: "user", content: [{ type: "text", text: "q" }] }, { role: "assistant", content: [{ type: "tool_use", id: "call/1@373", name: "f", input: {} }] }] })).toEqual(["anthropic.tool_use_id_pattern"]);
    expect(rules("anthropic", { messages: [{ role: "user", content: [{ type: "text", text: "q" }] }, { role: "assistant", content: [{ type: "text", text: "Sure: " }] }] })).toEqual(["anthropic.prefill_trailing_whitespace"]);
    expect(rules("gemini", { contents: [{ role: "model", parts: [{ functionCall: { id: "c1", name: "f", args: {} } }] }, { role: "user", parts: [{ functionResponse: { id: "c1", name: "f", response: {} } }] }] })).toEqual(["gemini.function_call_turn_position"]);
  });
});
