// What the system-prompt assembly (src/core/compile/system-prompt.ts) costs, and that it grows
// linearly: (1) "is this practice contained in the description" for 100 practices over an
// adversarial description (one long run of "a", practices "a…ab" that almost match everywhere),
// with one Aho–Corasick scan beside the anchor of one `includes` per practice; (2) a whole
// compile with the tool guidance and rules blocks for 10 to 1,000 tools of 10 practices each,
// beside the anchor of the same compile without them but with the blocks' text already written
// into its system segment (same text to count and render, no assembly). Run with `npm run bench:system-prompt`.
import { loadavg } from "node:os";
import { create } from "@bufbuild/protobuf";
import { CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { ToolDefinitionSchema } from "#gen/contextd/v1/state_pb";
import { compile } from "../src/core/compile/compile.js";
import { occursIn } from "../src/core/compile/system-prompt.js";
import { TokenCountCache } from "../src/core/tokens/token-count-cache.js";

const pad = (value: string | number, width: number) => String(value).padStart(width);

function best(runs: number, work: () => unknown): number {
  let fastest = Infinity;
  for (let run = 0; run < runs; run++) {
    const started = process.hrtime.bigint();
    work();
    fastest = Math.min(fastest, Number(process.hrtime.bigint() - started) / 1e6);
  }
  return fastest;
}

async function bestAsync(runs: number, work: () => Promise<unknown>): Promise<number> {
  let fastest = Infinity;
  for (let run = 0; run < runs; run++) {
    const started = process.hrtime.bigint();
    await work();
    fastest = Math.min(fastest, Number(process.hrtime.bigint() - started) / 1e6);
  }
  return fastest;
}

console.log(`node ${process.version}, load average ${loadavg().map((value) => value.toFixed(2)).join(" ")}`);
console.log("\n(1) 100 practices of ~1,000-1,100 characters against an adversarial description");
console.log(`${"description chars".padEnd(18)}${pad("scan ms", 10)}${pad("includes ms", 13)}${pad("scan µs/char", 14)}`);
const practices = Array.from({ length: 100 }, (_, index) => "a".repeat(1_000 + index) + "b");
for (const length of [10_000, 100_000, 1_000_000]) {
  const description = "a".repeat(length);
  const scan = best(3, () => occursIn(description, practices));
  const anchor = best(3, () => practices.map((practice) => description.includes(practice)));
  console.log(`${String(length).padEnd(18)}${pad(scan.toFixed(1), 10)}${pad(anchor.toFixed(1), 13)}${pad(((1000 * scan) / length).toFixed(3), 14)}`);
}

console.log("\n(2) a compile with both blocks on, beside the same text given as system messages (CHAR_FALLBACK)");
console.log(`${"tools".padEnd(8)}${pad("block chars", 13)}${pad("assembled ms", 14)}${pad("given ms", 10)}${pad("ratio", 8)}`);
const context = () => ({
  randomId: () => "00000000-0000-4000-8000-000000000000",
  now: () => 0,
  monotonicNs: () => 0n,
  tokenCounts: new TokenCountCache(),
});
for (const toolCount of [10, 100, 1_000]) {
  const toolDefinitions = Array.from({ length: toolCount }, (_, index) =>
    create(ToolDefinitionSchema, {
      name: `tool_${String(toolCount - index).padStart(4, "0")}`,
      description: `Tool number ${index}: reads records of kind ${index} and returns them as JSON.`,
      bestPractices: Array.from({ length: 10 }, (_, practice) => `Practice ${practice} for \`tool_${index}\`: pass the id of the record, not its title.`),
    }),
  );
  const base = {
    system: { messages: [create(MessageSchema, { id: "sys", role: Role.SYSTEM, parts: [{ kind: { case: "text", value: { text: "You are helpful." } } }] })] },
    history: { messages: [create(MessageSchema, { id: "u1", role: Role.USER, parts: [{ kind: { case: "text", value: { text: "hello" } } }] })] },
    toolDefinitions: { toolDefinitions },
  };
  const withBlocks = create(CompileRequestSchema, { ...base, systemPrompt: { toolGuidance: true, toolCallRules: true } });
  const sample = await compile(withBlocks, context());
  const blockChars = sample.payload!.system.reduce((total, message) => total + (message.parts[0]!.kind.value as { text: string }).text.length, 0);
  const without = create(CompileRequestSchema, { ...base, system: { messages: sample.payload!.system } });
  const withMs = await bestAsync(5, () => compile(withBlocks, context()));
  const withoutMs = await bestAsync(5, () => compile(without, context()));
  console.log(`${String(toolCount).padEnd(8)}${pad(blockChars, 13)}${pad(withMs.toFixed(2), 10)}${pad(withoutMs.toFixed(2), 12)}${pad((withMs / withoutMs).toFixed(2), 8)}`);
}
