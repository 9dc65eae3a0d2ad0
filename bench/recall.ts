/**
 * `npm run bench:recall`: whether what the budget dropped is still within the model's reach.
 *
 * The coding profile (as bench:scale's: a user message, then a tool round with a 20 KB output every
 * other turn, an assistant answer otherwise), with a file path or a command in every tool call.
 * 5,000 messages are compiled to an 8,000-token budget (DROP_HEAD, the CHAR_FALLBACK estimator of
 * 4 characters a token, in process); the messages the budget dropped (records with reason
 * TOKEN_BUDGET_EXCEEDED) are the dropped history. For each file path and command of its tool calls:
 *   - recall: one `Recall` search (`contextd_search_history` with the path or command as the
 *     query, top k = 5) finds it when one of the hits holds it;
 *   - by part: the same with only a part as the query (a path's file name, a command's last word);
 *   - summary alone: the facts a SUMMARIZE request hands the summarizer (`extractSummaryFacts`,
 *     the summary template's files and commands, at most 256 facts, 1 MiB scanned) hold it exactly:
 *     the most a summary written from them can keep.
 * Then the latency of one search at 1,000, 5,000 and 50,000 messages, first (the terms are read
 * and kept, with the longest event-loop stall meanwhile) and again (kept), beside a bare ReadMessages of the last 20 messages, each median of
 * several runs, in process on the memory store as the service calls them, with the default flags
 * (`--recall-scan-bytes` 64 MiB, `--recall-index-bytes` 256 MiB).
 */
import { loadavg } from "node:os";
import { create } from "@bufbuild/protobuf";
import { BudgetSchema, CompileRequestSchema, CompileResultPart, EstimatorKind, TransformationReason } from "#gen/contextd/v1/compile_pb";
import { SummaryFactKind } from "#gen/contextd/v1/context_service_pb";
import { ReadMessagesRequestSchema, RecallRequestSchema } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, DeltaSchema, Segment } from "#gen/contextd/v1/state_pb";
import { HistoryRecall, defaultRecallIndexBytes, defaultRecallScanBytes } from "../src/application/history-recall.js";
import { MessageWindows } from "../src/application/message-windows.js";
import { RecallTermIndex } from "../src/application/recall-term-index.js";
import { Codec } from "../src/codec/codec.js";
import { compile } from "../src/core/compile/compile.js";
import { extractSummaryFacts } from "../src/core/compile/summary-evidence.js";
import { recallText } from "../src/core/recall/recall-text.js";
import { TokenCountCache } from "../src/core/tokens/token-count-cache.js";
import { MemoryConversationStore } from "../src/store/memory-conversation-store.js";

const topK = 5;
const outputBytes = 20_000;

function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32;
}
const directories = ["auth", "store", "server", "codec", "billing", "search", "ui/components", "api/handlers", "jobs", "config"];
const names = ["session", "token", "cache", "router", "parser", "writer", "reader", "queue", "limits", "schema", "client", "index"];
const words = "const function return value import export class interface type await async error result file path test".split(" ");

/** One coding run's messages and, per tool-call message, the path or command it holds. */
function codingConversation(count: number, seed: number): { messages: Message[]; evidence: Map<string, string> } {
  const random = seeded(seed);
  const pick = <T>(items: readonly T[]) => items[Math.floor(random() * items.length)]!;
  // One 20 KB body shared by every output (a cons string in V8): memory for 50,000 messages stays small.
  const body = Array.from({ length: outputBytes / 6 }, () => pick(words)).join(" ").slice(0, outputBytes - 200);
  const messages: Message[] = [];
  const evidence = new Map<string, string>();
  for (let turn = 0; messages.length < count; turn++) {
    const file = `${pick(["src", "lib", "internal"])}/${pick(directories)}/${pick(names)}_${turn}.${pick(["ts", "py", "go"])}`;
    messages.push(create(MessageSchema, { id: `u${turn}`, role: Role.USER, parts: [{ kind: { case: "text", value: { text: `step ${turn}: keep going with the ${pick(names)} work` } } }] }));
    if (turn % 2 === 1) {
      const kind = turn % 4 === 1 ? "read" : "run";
      const command = pick([`npm run test -- ${file}`, `git log --oneline -n 5 -- ${file}`, `pytest tests/test_${pick(names)}_${turn}.py -k case_${turn}`, `rg -n "${pick(names)}_${turn}" src/${pick(directories)}`, `go test ./internal/${pick(directories)}/... -run Test${turn}`]);
      const fact = kind === "read" ? file : command;
      const name = kind === "read" ? "read_file" : "run_command";
      const args = kind === "read" ? { path: file } : { command };
      messages.push(create(MessageSchema, { id: `a${turn}`, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: `c${turn}`, name, arguments: { data: JSON.stringify(args) } } } }] }));
      messages.push(create(MessageSchema, { id: `t${turn}`, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: `c${turn}`, name, payload: { text: `${kind === "read" ? `// ${file}` : `$ ${command}`}\n${body}` } } } }] }));
      evidence.set(`a${turn}`, fact);
    } else {
      messages.push(create(MessageSchema, { id: `f${turn}`, role: Role.ASSISTANT, parts: [{ kind: { case: "text", value: { text: `done with step ${turn}` } } }] }));
    }
  }
  return { messages: messages.slice(0, count), evidence };
}

/** A part of a path or command an agent may remember: a path's file name, a command's longest word with a digit in it. */
function partOf(fact: string): string {
  const words = fact.split(" ");
  if (words.length === 1) return fact.slice(fact.lastIndexOf("/") + 1);
  const numbered = words.filter((word) => /[0-9]/.test(word) && !word.startsWith("-")).sort((a, b) => b.length - a.length)[0] ?? words[words.length - 1]!;
  return numbered.replaceAll('"', "");
}

/** Whether a hit's text holds the fact, as written or inside the JSON of the call's arguments. */
function holds(text: string, fact: string): boolean {
  return text.includes(fact) || text.includes(JSON.stringify(fact).slice(1, -1));
}

async function storeOf(messages: Message[]): Promise<MemoryConversationStore> {
  const store = new MemoryConversationStore({ codec: new Codec() });
  for (let start = 0; start < messages.length; start += 5_000) {
    await store.commit("c", undefined, [create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: messages.slice(start, start + 5_000) } } })], "");
  }
  return store;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

async function timed(times: number, run: () => Promise<unknown>): Promise<number> {
  const samples: number[] = [];
  for (let index = 0; index < times; index++) {
    const started = performance.now();
    await run();
    samples.push(performance.now() - started);
  }
  return median(samples);
}

console.log(`bench:recall — node ${process.version}, load average ${loadavg().map((value) => value.toFixed(2)).join(" ")} (2 cores shared with other sessions)`);

// 1. What one search finds of the dropped history, beside what a summary alone keeps.
const { messages, evidence } = codingConversation(5_000, 7);
const stored = create(ConversationStateSchema, { conversationId: "c", version: 1n, history: messages });
const compiled = await compile(
  create(CompileRequestSchema, { conversationId: "c", budget: create(BudgetSchema, { maxTokens: 8_000n, estimator: { kind: EstimatorKind.CHAR_FALLBACK } }), include: [CompileResultPart.ALL_TRANSFORMATIONS] }),
  { randomId: () => "00000000-0000-4000-8000-000000000000", now: Date.now, monotonicNs: () => process.hrtime.bigint(), tokenCounts: new TokenCountCache(), stored },
);
const droppedIds = new Set(Object.entries(compiled.transformations).filter(([, record]) => record.reason === TransformationReason.TOKEN_BUDGET_EXCEEDED).map(([id]) => id));
const dropped = messages.filter((message) => droppedIds.has(message.id));
const facts = [...new Set(dropped.flatMap((message) => (evidence.has(message.id) ? [evidence.get(message.id)!] : [])))];
const summaryFacts = extractSummaryFacts(dropped);
const kept = new Set(summaryFacts.facts.filter((fact) => fact.kind === SummaryFactKind.FILE_PATH || fact.kind === SummaryFactKind.COMMAND).map((fact) => fact.text));
const store = await storeOf(messages);
const recall = new HistoryRecall(store, new RecallTermIndex(defaultRecallIndexBytes), { scanBytes: defaultRecallScanBytes });
const history = (await store.load("c")).history;
let found = 0;
let foundByPart = 0;
for (const fact of facts) {
  for (const [query, count] of [[fact, () => found++], [partOf(fact), () => foundByPart++]] as const) {
    const answer = await recall.recall(create(RecallRequestSchema, { conversationId: "c", toolCall: { name: "contextd_search_history", arguments: JSON.stringify({ query, max_results: topK }) } }));
    if (answer.hits.some((hit) => holds(recallText(history[Number(hit.position)]!), fact))) count();
  }
}
const summaryKept = facts.filter((fact) => kept.has(fact)).length;
const share = (value: number) => `${((100 * value) / Math.max(1, facts.length)).toFixed(1)}%`;
console.log(`5,000 coding messages compiled to 8,000 tokens: ${dropped.length} dropped (${compiled.usage!.total} tokens sent), ${facts.length} file paths and commands in their tool calls`);
console.log(`  one recall search, top ${topK}, the path or command as the query: ${found}/${facts.length} found (${share(found)}) — ${found / facts.length >= 0.95 ? "meets" : "misses"} the 95% bar`);
console.log(`  one recall search, top ${topK}, a part as the query (a path's file name, a command's longest word with a digit): ${foundByPart}/${facts.length} (${share(foundByPart)})`);
console.log(`  a summary alone (the summarize request's extracted files and commands, ${summaryFacts.facts.length} facts${summaryFacts.truncated ? ", cut by its bounds" : ""}): ${summaryKept}/${facts.length} (${share(summaryKept)})`);

// 2. Latency of one search beside a bare ReadMessages, and the anchor of its stalls: a loop of
// 20 ms busy slices with a turn between (what the search does at best), for 2 s, on this machine now.
{
  let stall = 0;
  let tick = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    stall = Math.max(stall, now - tick);
    tick = now;
  }, 1);
  const end = performance.now() + 2_000;
  let spin = 0;
  while (performance.now() < end) {
    const slice = performance.now() + 20;
    while (performance.now() < slice) spin += Math.sqrt(spin + 1);
    await new Promise((resolve) => setImmediate(resolve));
  }
  clearInterval(timer);
  console.log(`anchor: 20 ms busy slices with a turn between, for 2 s: longest event-loop stall ${stall.toFixed(0)} ms (load average now ${loadavg()[0]!.toFixed(2)})`);
}
console.log(`latency, median (in process, memory store, default flags): messages | search first (terms read): ms, complete, examined, longest event-loop stall ms | search again (terms kept): ms, complete, examined | ReadMessages last 20`);
for (const count of [1_000, 5_000, 50_000]) {
  const conversation = codingConversation(count, 11);
  const sized = await storeOf(conversation.messages);
  const codec = new Codec();
  const windows = new MessageWindows(sized, { messageBytes: (message) => codec.encodeStoredMessage(message).byteLength, messageLimitBytes: 16 * 1024 * 1024 });
  const query = (turn: number) => create(RecallRequestSchema, { conversationId: "c", query: `src/store/session_${turn}.ts npm run test` });
  const firsts: number[] = [];
  let firstAnswer;
  // The longest gap between two ticks of a 1 ms timer while the first searches run: what another
  // call (a health check) waits behind a search at worst.
  let stall = 0;
  let tick = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    stall = Math.max(stall, now - tick);
    tick = now;
  }, 1);
  for (let run = 0; run < 3; run++) {
    const fresh = new HistoryRecall(sized, new RecallTermIndex(defaultRecallIndexBytes), { scanBytes: defaultRecallScanBytes });
    const started = performance.now();
    tick = started;
    firstAnswer = await fresh.recall(query(run));
    firsts.push(performance.now() - started);
  }
  clearInterval(timer);
  const first = median(firsts);
  const warm = new HistoryRecall(sized, new RecallTermIndex(defaultRecallIndexBytes), { scanBytes: defaultRecallScanBytes });
  let last = await warm.recall(query(1));
  for (let run = 0; run < 8 && !last.complete; run++) last = await warm.recall(query(1));
  const again = await timed(9, async () => (last = await warm.recall(query(2))));
  const read = await timed(9, () => windows.read(create(ReadMessagesRequestSchema, { conversationId: "c", last: 20 })));
  console.log(`  ${count.toLocaleString("en-US")} | ${first.toFixed(1)}, ${firstAnswer!.complete}, ${firstAnswer!.examinedMessages}, ${stall.toFixed(0)} | ${again.toFixed(1)}, ${last.complete}, ${last.examinedMessages} | ${read.toFixed(3)}`);
}
