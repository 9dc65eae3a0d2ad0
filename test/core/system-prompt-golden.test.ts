import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { create, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  CompileRequestSchema,
  RenderOptionsSchema,
  TransformationAction,
  TransformationReason,
  type CompileRequest,
  type CompileResult,
} from "#gen/contextd/v1/compile_pb";
import { MessageSchema, Provider } from "#gen/contextd/v1/message_pb";
import { compile } from "../../src/core/compile/compile.js";
import { testContext } from "./compile-context.js";
import { systemPromptCases } from "./system-prompt-cases.js";

/**
 * Golden vectors of the system-prompt assembly: test/golden/system-prompt/<name>.json holds a
 * stateless CompileRequest, the system segment the compile sends, the blocks' records and the body
 * per provider (format in that folder's README). The Go and Python client tests read the same
 * files and send them to a real sidecar. `UPDATE_GOLDEN=1 npx vitest run
 * test/core/system-prompt-golden.test.ts` rewrites them from system-prompt-cases.ts; review the diff.
 */
const folder = fileURLToPath(new URL("../golden/system-prompt/", import.meta.url));
const providers = ["OPENAI_CHAT", "OPENAI_RESPONSES", "ANTHROPIC_MESSAGES", "GEMINI"] as const;

interface GoldenFile {
  name: string;
  description: string;
  request: JsonValue;
  render: { model: string };
  expected_system: JsonValue[];
  expected_introduced: string[];
  expected_transformations: Record<string, { action: string; reason: string }>;
  expected: Partial<Record<(typeof providers)[number], unknown>>;
}

async function compiled(request: CompileRequest, provider?: (typeof providers)[number], model = ""): Promise<CompileResult> {
  const withRender = provider ? { ...request, render: create(RenderOptionsSchema, { provider: Provider[provider], model }) } : request;
  return compile(withRender, testContext());
}

/** The records the assembly made: what a compile sends by default for these messages. */
function assemblyRecords(result: CompileResult): GoldenFile["expected_transformations"] {
  const records: GoldenFile["expected_transformations"] = {};
  for (const id of Object.keys(result.transformations).sort()) {
    const record = result.transformations[id]!;
    if (record.reason !== TransformationReason.SYSTEM_PROMPT_ASSEMBLY) continue;
    records[id] = { action: `TRANSFORMATION_ACTION_${TransformationAction[record.action]}`, reason: "TRANSFORMATION_REASON_SYSTEM_PROMPT_ASSEMBLY" };
  }
  return records;
}

async function goldenOf(request: CompileRequest, model: string, renders: boolean): Promise<Omit<GoldenFile, "name" | "description" | "request" | "render">> {
  const result = await compiled(request);
  const expected: GoldenFile["expected"] = {};
  if (renders) {
    for (const provider of providers) {
      const rendered = (await compiled(request, provider, model)).rendered!;
      expected[provider] = JSON.parse(new TextDecoder().decode(rendered.json));
    }
  }
  return {
    expected_system: result.payload!.system.map((message) => toJson(MessageSchema, message)),
    expected_introduced: result.introduced.map((introduced) => introduced.message!.id),
    expected_transformations: assemblyRecords(result),
    expected,
  };
}

if (process.env["UPDATE_GOLDEN"] === "1") {
  for (const goldenCase of systemPromptCases) {
    const file: GoldenFile = {
      name: goldenCase.name,
      description: goldenCase.description,
      request: toJson(CompileRequestSchema, goldenCase.request),
      render: { model: goldenCase.model },
      ...(await goldenOf(goldenCase.request, goldenCase.model, goldenCase.renders)),
    };
    writeFileSync(`${folder}${goldenCase.name}.json`, JSON.stringify(file, null, 2) + "\n");
  }
}

/** Every order of `items` (the cases have at most three definitions). */
function permutations<T>(items: readonly T[]): T[][] {
  if (items.length <= 1) return [[...items]];
  return items.flatMap((item, index) => permutations([...items.slice(0, index), ...items.slice(index + 1)]).map((rest) => [item, ...rest]));
}

describe("golden system-prompt vectors", () => {
  const files = readdirSync(folder).filter((name) => name.endsWith(".json")).sort();

  it("has exactly one file per case", () => {
    expect(files).toEqual(systemPromptCases.map((goldenCase) => `${goldenCase.name}.json`).sort());
    for (const goldenCase of systemPromptCases) expect(existsSync(`${folder}${goldenCase.name}.json`)).toBe(true);
  });

  for (const name of files) {
    const file = JSON.parse(readFileSync(`${folder}${name}`, "utf8")) as GoldenFile;
    const request = fromJson(CompileRequestSchema, file.request);

    it(`${file.name}: the system segment, introduced messages and records`, async () => {
      const result = await compiled(request);
      expect(result.payload!.system.map((message) => toJson(MessageSchema, message))).toEqual(file.expected_system);
      expect(result.introduced.map((introduced) => introduced.message!.id)).toEqual(file.expected_introduced);
      expect(assemblyRecords(result)).toEqual(file.expected_transformations);
    });

    it(`${file.name}: byte-identical system segment for every order of the definitions`, async () => {
      const expected = JSON.stringify(file.expected_system);
      for (const order of permutations(request.toolDefinitions!.toolDefinitions)) {
        const result = await compiled({ ...request, toolDefinitions: { ...request.toolDefinitions!, toolDefinitions: order } });
        expect(JSON.stringify(result.payload!.system.map((message) => toJson(MessageSchema, message)))).toBe(expected);
      }
    });

    for (const provider of providers) {
      if (!(provider in file.expected)) continue;
      it(`${file.name} renders ${provider} byte for byte`, async () => {
        const rendered = (await compiled(request, provider, file.render.model)).rendered!;
        expect(new TextDecoder().decode(rendered.json)).toBe(JSON.stringify(file.expected[provider]));
      });
    }
  }
});
