import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { clone, create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, RenderOptionsSchema } from "#gen/contextd/v1/compile_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { compile } from "../../src/core/compile/compile.js";
import { recallToolNames } from "../../src/core/recall/recall-tools.js";
import { testContext } from "../core/compile-context.js";
import { dropsUnsupportedMedia, generateConversation } from "./conversations.js";
import { checkProviderRules, type ProviderName } from "./provider-rules.js";

/**
 * The recall tools (`CompileRequest.recall_tools`) in bodies every provider accepts: seeded
 * stateful conversations compiled with them for the four providers, each body checked against the
 * providers' official SDK request types (sdk_request_types.py) and the documented rules, as the
 * conformance harness checks every body.
 */

const providers: Array<{ provider: Provider; name: ProviderName; model: string }> = [
  { provider: Provider.OPENAI_CHAT, name: "openai_chat", model: "gpt-4.1" },
  { provider: Provider.OPENAI_RESPONSES, name: "openai_responses", model: "gpt-4.1" },
  { provider: Provider.ANTHROPIC_MESSAGES, name: "anthropic", model: "claude-sonnet-4-5" },
  { provider: Provider.GEMINI, name: "gemini", model: "gemini-2.5-pro" },
];
const python = new URL("../../.venv/bin/python", import.meta.url).pathname;
const sdkCheck = new URL("./sdk_request_types.py", import.meta.url).pathname;

describe("conformance: the recall tools", () => {
  it("renders them for 4 providers in bodies the SDK types and the provider rules accept", async () => {
    const bodies: Array<{ key: string; provider: ProviderName; body: Record<string, unknown> }> = [];
    for (let seed = 1; bodies.length < 80 && seed <= 200; seed++) {
      const conversation = generateConversation(seed);
      // Conversations that reuse call ids are refused by the compile (conformance.test.ts renders them directly).
      if (conversation.traits.includes("ids:reused")) continue;
      for (const target of providers) {
        const request = clone(CompileRequestSchema, conversation.stateful.request);
        request.recallTools = true;
        request.render = create(RenderOptionsSchema, { provider: target.provider, model: target.model, dropUnsupportedMedia: dropsUnsupportedMedia(seed) });
        let json: Uint8Array;
        try {
          json = (await compile(request, { ...testContext(), stored: conversation.stateful.stored })).rendered!.json;
        } catch {
          continue; // conformance.test.ts checks which refusals are documented; here only bodies count
        }
        const body = JSON.parse(new TextDecoder().decode(json)) as Record<string, unknown>;
        const text = JSON.stringify(body);
        for (const name of recallToolNames) expect(text, `seed ${seed} ${target.name}`).toContain(`"${name}"`);
        bodies.push({ key: `seed ${seed} ${target.name} recall_tools`, provider: target.name, body });
      }
    }
    expect(new Set(bodies.map((entry) => entry.provider)).size).toBe(4);
    expect(bodies.length).toBeGreaterThanOrEqual(80);
    const violations = bodies.flatMap((entry) => checkProviderRules(entry.provider, entry.body).map((violation) => `${entry.key}: ${violation.path}: ${violation.rule}: ${violation.detail}`));
    expect(violations.slice(0, 10)).toEqual([]);
    const directory = mkdtempSync(join(tmpdir(), "contextd-recall-conformance-"));
    try {
      const file = join(directory, "bodies.jsonl");
      writeFileSync(file, bodies.map((entry) => JSON.stringify(entry)).join("\n"));
      const run = spawnSync(python, [sdkCheck, file], { encoding: "utf8", maxBuffer: 64 << 20 });
      expect(run.status, run.stderr).toBe(0);
      const sdk = JSON.parse(run.stdout) as { checked: number; failures: Array<{ key: string; error: string }>; controls: { run: number; refused: number } };
      expect(sdk.failures.slice(0, 5)).toEqual([]);
      expect(sdk.checked).toBe(bodies.length);
      expect(sdk.controls.refused).toBe(sdk.controls.run);
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });
});
