import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { create, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompiledPayloadSchema, RenderOptionsSchema } from "#gen/contextd/v1/compile_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { renderRequest } from "../../src/core/providers/render.js";
import { goldenCases } from "./golden-cases.js";

/**
 * Golden vectors: test/golden/providers/<name>.json holds a payload and the exact body per
 * provider (format in that folder's README). The Go and Python client tests read the same files.
 * `UPDATE_GOLDEN=1 npx vitest run test/providers/golden.test.ts` rewrites them from golden-cases.ts;
 * review the diff before committing.
 */
const folder = fileURLToPath(new URL("../golden/providers/", import.meta.url));
const providers = ["OPENAI_CHAT", "OPENAI_RESPONSES", "ANTHROPIC_MESSAGES", "GEMINI"] as const;

interface GoldenFile {
  name: string;
  description: string;
  input: JsonValue;
  render: { model: string };
  /** Compile RPC clients send this history message (the last) as `current_turn` instead. */
  current_turn_id?: string;
  expected: Partial<Record<(typeof providers)[number], unknown>>;
  expected_warnings: Partial<Record<(typeof providers)[number], string[]>>;
  /** Providers that refuse the payload: the gRPC code, the rule and the message id it names. */
  expected_errors?: Partial<Record<(typeof providers)[number], ExpectedError>>;
}

interface ExpectedError {
  code: string;
  rule: string;
  message_id: string;
}

/** The render's refusal as a golden error: `provider rule <rule> violated at message "<id>": ...`. */
function refusal(input: JsonValue, model: string, provider: (typeof providers)[number]): ExpectedError | undefined {
  try {
    render(input, model, provider);
    return undefined;
  } catch (error) {
    if (!(error instanceof ConnectError)) throw error;
    const match = /^provider rule (\S+) violated at message "([^"]*)"/.exec(error.rawMessage);
    if (!match) throw error;
    return { code: Code[error.code]!.replace(/[A-Z]/g, (letter, at: number) => (at > 0 ? "_" : "") + letter).toUpperCase(), rule: match[1]!, message_id: match[2]! };
  }
}

function render(input: JsonValue, model: string, provider: (typeof providers)[number]): { body: string; warnings: string[] } {
  const rendered = renderRequest(fromJson(CompiledPayloadSchema, input), create(RenderOptionsSchema, { provider: Provider[provider], model }));
  return { body: new TextDecoder().decode(rendered.json), warnings: rendered.warnings.map((warning) => warning.code) };
}

if (process.env["UPDATE_GOLDEN"] === "1") {
  for (const goldenCase of goldenCases) {
    const input = toJson(CompiledPayloadSchema, goldenCase.payload);
    const file: GoldenFile = {
      name: goldenCase.name,
      description: goldenCase.description,
      input,
      render: { model: goldenCase.model },
      ...(goldenCase.currentTurnId ? { current_turn_id: goldenCase.currentTurnId } : {}),
      expected: {} as GoldenFile["expected"],
      expected_warnings: {} as GoldenFile["expected_warnings"],
    };
    for (const provider of providers) {
      const error = refusal(input, goldenCase.model, provider);
      if (error) {
        (file.expected_errors ??= {})[provider] = error;
        continue;
      }
      const { body, warnings } = render(input, goldenCase.model, provider);
      file.expected[provider] = JSON.parse(body);
      file.expected_warnings[provider] = warnings;
    }
    writeFileSync(`${folder}${goldenCase.name}.json`, JSON.stringify(file, null, 2) + "\n");
  }
}

describe("golden provider vectors", () => {
  const files = readdirSync(folder).filter((name) => name.endsWith(".json")).sort();

  it("has exactly one file per case", () => {
    expect(files).toEqual(goldenCases.map((goldenCase) => `${goldenCase.name}.json`).sort());
    for (const goldenCase of goldenCases) expect(existsSync(`${folder}${goldenCase.name}.json`)).toBe(true);
  });

  for (const name of files) {
    const file = JSON.parse(readFileSync(`${folder}${name}`, "utf8")) as GoldenFile;
    for (const provider of providers) {
      const expectedError = file.expected_errors?.[provider];
      if (expectedError) {
        it(`${file.name} is refused by ${provider} with ${expectedError.rule}`, () => {
          expect(refusal(file.input, file.render.model, provider)).toEqual(expectedError);
        });
        continue;
      }
      it(`${file.name} renders ${provider} byte for byte`, () => {
        const { body, warnings } = render(file.input, file.render.model, provider);
        // Exact bytes: same keys, same order, same values as the compact form of the expected body.
        expect(body).toBe(JSON.stringify(file.expected[provider]));
        expect(warnings).toEqual(file.expected_warnings[provider]);
      });
    }
  }
});
