// What each context-editing policy costs over a long coding-agent run: a scripted 300-turn
// conversation (each turn a question, reasoning with a signature, a tool call, a 2–40 KB result and
// an answer) compiled after every turn under a 30,000-token window and rendered for Anthropic, once
// per policy, in one run:
//   - DROP_HEAD only: whole rounds dropped from the head;
//   - clearing: old tool results replaced by placeholders first (`tool_result_clearing`, no step);
//   - clearing + reasoning: and the reasoning of all but the last 2 turns removed;
//   - DROP_HEAD in steps: `trim_step_tokens` 10,000, no clearing;
//   - cache-aware: clearing in steps of 20,000 tokens keeping the latest result, and trimming in
//     steps of 10,000, so that neither cut moves every turn.
// Per policy: tokens sent over the run; tokens a provider would write to its prompt cache again
// (everything after the first rendered message that differs from the previous turn's body; the
// system prompt and the tools never change here), as estimated tokens in proportion to the
// rendered JSON; the turns whose prefix changed; compile p50 / p99. The estimator is
// CHAR_FALLBACK (4 characters per token), in-process, counts cached across turns as a server's
// are. "references" sends results over 4 KB as 1 KB previews (`large_tool_results`).
// Then the minimum-gain rule (`budget.min_trim_gain`): policies run without the rule and with
// ratios 0.1 and 1, side by side, against the sidecar's memory of the previous compile
// (`RecentCompiles`, as `cache_impact` uses), with the steps the rule weighed and skipped.
// Run with `npm run bench:editing`.
import { loadavg } from "node:os";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { BudgetSchema, CompileRequestSchema, EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { MessageSchema, PartSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { compile } from "../src/core/compile/compile.js";
import { TokenCountCache } from "../src/core/tokens/token-count-cache.js";
import { RecentCompiles } from "../src/application/recent-compiles.js";

const turns = 300;
const windowTokens = 30_000n;

function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32;
}
const random = seeded(19);
const words = "const function return value import export class interface type await async error result file path test".split(" ");
const code = (length: number) => {
  const out: string[] = [];
  let size = 0;
  while (size < length) {
    const word = words[Math.floor(random() * words.length)]!;
    out.push(word);
    size += word.length + 1;
  }
  return out.join(" ");
};
const part = (kind: MessageInitShape<typeof PartSchema>["kind"]) => create(PartSchema, { kind });

function turn(index: number): Message[] {
  const resultBytes = 2_000 + Math.floor(random() * 38_000);
  const tool = ["read_file", "grep", "run_tests"][index % 3]!;
  return [
    create(MessageSchema, { id: `u${index}`, role: Role.USER, parts: [part({ case: "text", value: { text: `step ${index}: ${code(200)}` } })] }),
    create(MessageSchema, {
      id: `a${index}`,
      role: Role.ASSISTANT,
      parts: [
        part({ case: "reasoning", value: { text: code(600), signature: `sig${index}`, provider: Provider.ANTHROPIC_MESSAGES } }),
        part({ case: "toolCall", value: { id: `c${index}`, name: tool, arguments: { data: JSON.stringify({ path: `src/module${index}.ts` }) } } }),
      ],
    }),
    create(MessageSchema, { id: `t${index}`, role: Role.TOOL, parts: [part({ case: "toolResult", value: { toolCallId: `c${index}`, name: tool, payload: { text: code(resultBytes) } } })] }),
    create(MessageSchema, { id: `f${index}`, role: Role.ASSISTANT, parts: [part({ case: "text", value: { text: `done with step ${index}: ${code(300)}` } })] }),
  ];
}
const script = Array.from({ length: turns }, (_, index) => turn(index));

interface Policy {
  name: string;
  references?: boolean;
  budget: { toolResultClearing?: { clearAtLeastTokens?: bigint; keepRecent?: number; triggerTokens?: bigint }; reasoningClearing?: { keepRecentTurns: number }; trimStepTokens?: bigint; minTrimGain?: number };
}
const policies: Policy[] = [
  { name: "DROP_HEAD only", budget: {} },
  { name: "clearing (keep 3)", budget: { toolResultClearing: {} } },
  { name: "clearing + reasoning (keep 2 turns)", budget: { toolResultClearing: {}, reasoningClearing: { keepRecentTurns: 2 } } },
  { name: "DROP_HEAD in 10,000-token steps", budget: { trimStepTokens: 10_000n } },
  // Cache-aware: clear in 20,000-token steps (keep 1) and trim in 10,000-token steps.
  { name: "cache-aware", budget: { toolResultClearing: { keepRecent: 1, clearAtLeastTokens: 20_000n }, trimStepTokens: 10_000n } },
  // Results over 4 KB as previews of 1 KB (decided once per message), then cache-aware.
  { name: "references + cache-aware", budget: { toolResultClearing: { keepRecent: 1, clearAtLeastTokens: 20_000n }, trimStepTokens: 10_000n }, references: true },
  { name: "references + DROP_HEAD in steps", budget: { trimStepTokens: 10_000n }, references: true },
];
// The minimum-gain rule (`min_trim_gain`), each policy run without and with it side by side: the
// policies whose steps the limit does not always need (early clearing, reasoning clearing, the
// rounding of trimming in steps).
const minGainPolicies: Policy[] = [
  { name: "clearing + reasoning (keep 2 turns)", budget: { toolResultClearing: {}, reasoningClearing: { keepRecentTurns: 2 } } },
  { name: "DROP_HEAD in 10,000-token steps", budget: { trimStepTokens: 10_000n } },
  { name: "cache-aware", budget: { toolResultClearing: { keepRecent: 1, clearAtLeastTokens: 20_000n }, trimStepTokens: 10_000n } },
  { name: "references + cache-aware", budget: { toolResultClearing: { keepRecent: 1, clearAtLeastTokens: 20_000n }, trimStepTokens: 10_000n }, references: true },
  { name: "references + reasoning (keep 2) + steps", budget: { reasoningClearing: { keepRecentTurns: 2 }, trimStepTokens: 10_000n }, references: true },
  { name: "references + early clearing + steps", budget: { toolResultClearing: { triggerTokens: 20_000n }, trimStepTokens: 10_000n }, references: true },
  { name: "references + early clearing + reasoning", budget: { toolResultClearing: { triggerTokens: 20_000n }, reasoningClearing: { keepRecentTurns: 2 }, trimStepTokens: 10_000n }, references: true },
];
const gainRatios = [0, 0.1, 1];

const system = create(MessageSchema, { id: "s", role: Role.SYSTEM, parts: [part({ case: "text", value: { text: "You are a coding agent. " + code(2_000) } })] });


/** One policy over the whole script: what the run sent and re-wrote, and the rule's skips. */
async function run(policy: Policy): Promise<{ sent: number; rewritten: number; moved: number; skipped: number; weighed: number; times: number[] }> {
  const tokenCounts = new TokenCountCache();
  // The sidecar's memory of each conversation's last compile, which cache_impact and the rule compare with.
  const compileMemory = new RecentCompiles(16 * 1024 * 1024);
  const history: Message[] = [];
  let previous: string[] = [];
  let sent = 0;
  let rewritten = 0;
  let moved = 0;
  let skipped = 0;
  let weighed = 0;
  const times: number[] = [];
  for (const messages of script) {
    history.push(...messages);
    const request = create(CompileRequestSchema, {
      conversationId: "bench-editing",
      system: { messages: [system] },
      history: { messages: [...history] },
      budget: create(BudgetSchema, { ...policy.budget, maxTokens: windowTokens, estimator: { kind: EstimatorKind.CHAR_FALLBACK, charsPerToken: 4 } }),
      render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude" },
      largeToolResults: policy.references ? { minBytes: 4_096, previewBytes: 1_024, addReadTool: true } : undefined,
    });
    const started = process.hrtime.bigint();
    const result = await compile(request, { randomId: () => "00000000-0000-4000-8000-000000000000", now: Date.now, monotonicNs: () => process.hrtime.bigint(), tokenCounts, compileMemory });
    times.push(Number(process.hrtime.bigint() - started) / 1e6);
    const total = Number(result.usage!.total);
    if (total > Number(windowTokens)) throw new Error(`${policy.name}: ${total} tokens, over the window`);
    sent += total;
    for (const step of result.cacheImpact?.trimSteps ?? []) {
      weighed++;
      if (step.skipped) skipped++;
    }
    const body = JSON.parse(new TextDecoder().decode(result.rendered!.json)) as { messages: unknown[] };
    const rendered = body.messages.map((message) => JSON.stringify(message));
    let common = 0;
    while (common < rendered.length && common < previous.length && rendered[common] === previous[common]) common++;
    // Everything after the common prefix is written to the cache again; the last previous message
    // may legitimately grow (it is the one the new turn continues), so only a shorter prefix counts as moved.
    if (common < previous.length - 1) moved++;
    const allChars = rendered.reduce((size, message) => size + message.length, 0);
    const keptChars = rendered.slice(0, common).reduce((size, message) => size + message.length, 0);
    rewritten += Math.round(total * (1 - keptChars / Math.max(1, allChars)));
    previous = rendered;
  }
  times.sort((a, b) => a - b);
  return { sent, rewritten, moved, skipped, weighed, times };
}

const p50 = (times: number[]) => times[Math.floor(times.length / 2)]!.toFixed(2);
const p99 = (times: number[]) => times[Math.floor(times.length * 0.99)]!.toFixed(2);

console.log(`bench:editing — ${turns} turns, window ${windowTokens} tokens, Anthropic render; node ${process.version}, load average ${loadavg().map((value) => value.toFixed(2)).join(" ")}`);
console.log(`${"policy".padEnd(34)}${"tokens sent".padStart(13)}${"re-written".padStart(13)}${"share".padStart(8)}${"prefix moved".padStart(14)}${"p50 ms".padStart(9)}${"p99 ms".padStart(9)}`);
let dropHeadRewritten = 0;
for (const policy of policies) {
  const { sent, rewritten, moved, times } = await run(policy);
  if (policy.name === "DROP_HEAD only") dropHeadRewritten = rewritten;
  const share = `${Math.round((rewritten / dropHeadRewritten) * 100)}%`;
  console.log(`${policy.name.padEnd(34)}${sent.toLocaleString("en").padStart(13)}${rewritten.toLocaleString("en").padStart(13)}${share.padStart(8)}${String(moved).padStart(14)}${p50(times).padStart(9)}${p99(times).padStart(9)}`);
}
console.log("share = re-written tokens against DROP_HEAD only's, in this run");

console.log("");
console.log(`minimum gain (budget.min_trim_gain): each policy without the rule (0) and with it, same script, same run`);
console.log(`${"policy".padEnd(42)}${"min gain".padStart(9)}${"tokens sent".padStart(13)}${"re-written".padStart(13)}${"vs 0".padStart(7)}${"cost".padStart(12)}${"vs 0".padStart(7)}${"prefix moved".padStart(14)}${"weighed".padStart(9)}${"skipped".padStart(9)}${"p50 ms".padStart(9)}`);
for (const policy of minGainPolicies) {
  let withoutRule = { rewritten: 0, cost: 0 };
  for (const ratio of gainRatios) {
    const { sent, rewritten, moved, skipped, weighed, times } = await run({ ...policy, budget: { ...policy.budget, minTrimGain: ratio } });
    // In input-token units at Anthropic's 5-minute cache prices: a write 1.25, a read 0.1.
    const cost = Math.round(1.25 * rewritten + 0.1 * (sent - rewritten));
    if (ratio === 0) withoutRule = { rewritten, cost };
    const share = (value: number, base: number) => `${Math.round((value / Math.max(1, base)) * 100)}%`;
    console.log(
      `${(ratio === 0 ? policy.name : "").padEnd(42)}${String(ratio).padStart(9)}${sent.toLocaleString("en").padStart(13)}${rewritten.toLocaleString("en").padStart(13)}${share(rewritten, withoutRule.rewritten).padStart(7)}${cost.toLocaleString("en").padStart(12)}${share(cost, withoutRule.cost).padStart(7)}${String(moved).padStart(14)}${String(weighed).padStart(9)}${String(skipped).padStart(9)}${p50(times).padStart(9)}`,
    );
  }
}
console.log("weighed / skipped = trim steps the rule weighed and skipped over the run (CacheImpact.trim_steps); vs 0 = against the same policy without the rule;");
console.log("cost = 1.25 x re-written + 0.1 x the rest of the tokens sent (cache reads), in input-token units at Anthropic's 5-minute cache prices");
