// Compile latency of the engine core with the TOKENIZER estimator (o200k_base), warm (counts
// cached, request freshly decoded each time as over RPC) and cold (empty count cache), beside
// LangChain.js `trimMessages` doing the same trim with the same gpt-tokenizer counter, in one run.
// Requests are decoded with the server's own codec (`Codec.decode`, what every binary RPC goes
// through): for bytes a previous request carried it hands out the same objects again — short
// strings such as the ids a compile keys its records by, and whole conversation messages
// (`RecentMessages`). The warm figure with protobuf-es `fromBinary` (fresh objects every time, as
// a JSON request or another embedding would see) is printed beside it.
// Run with `npm run bench:engine`.
import { execFileSync } from "node:child_process";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { AIMessage, HumanMessage, SystemMessage, ToolMessage, trimMessages, type BaseMessage } from "@langchain/core/messages";
import { countTokens } from "gpt-tokenizer/encoding/o200k_base";
import { CompileRequestSchema, EstimatorKind, type CompileRequest } from "#gen/contextd/v1/compile_pb";
import { MessageSchema, PartSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { compile } from "../src/core/compile/compile.js";
import { TokenCountCache } from "../src/core/tokens/token-count-cache.js";
import { Codec } from "../src/codec/codec.js";

const words = "the quick brown fox jumps over a lazy dog while agents call tools and read long documents about context windows".split(" ");

/** Deterministic pseudo-random prose of about `tokens` o200k tokens (~4 characters per token). */
function prose(seed: number, tokens: number): string {
  let state = seed * 2654435761;
  const out: string[] = [];
  for (let index = 0; index < tokens * 0.8; index++) {
    state = (state * 1103515245 + 12345) >>> 0;
    out.push(words[state % words.length]!);
  }
  return out.join(" ") + ".";
}

const text = (value: string) => create(PartSchema, { kind: { case: "text", value: { text: value } } });

/** `count` history messages of ~100 tokens: user, assistant with a tool call, tool result, assistant. */
function conversation(count: number): Message[] {
  const messages: Message[] = [];
  for (let index = 0; messages.length < count; index++) {
    const round = [
      create(MessageSchema, { id: `u${index}`, role: Role.USER, parts: [text(prose(index * 4, 100))] }),
      create(MessageSchema, {
        id: `a${index}`,
        role: Role.ASSISTANT,
        parts: [text(prose(index * 4 + 1, 60)), create(PartSchema, { kind: { case: "toolCall", value: { id: `call${index}`, name: "search", arguments: { data: `{"query":"${prose(index, 8)}"}` } } } })],
      }),
      create(MessageSchema, {
        id: `t${index}`,
        role: Role.TOOL,
        parts: [create(PartSchema, { kind: { case: "toolResult", value: { toolCallId: `call${index}`, name: "search", payload: { text: prose(index * 4 + 2, 130) } } } })],
      }),
      create(MessageSchema, { id: `r${index}`, role: Role.ASSISTANT, parts: [text(prose(index * 4 + 3, 100))] }),
    ];
    messages.push(...round);
  }
  // Cut to `count`, never ending on an open round.
  messages.length = count;
  while (messages.at(-1)!.role === Role.ASSISTANT && messages.at(-1)!.parts.length > 1) messages.pop();
  return messages;
}

function langchainMessages(system: Message, history: Message[]): BaseMessage[] {
  const textOf = (message: Message) => message.parts.map((part) => (part.kind.case === "text" ? part.kind.value.text : "")).join("");
  const out: BaseMessage[] = [new SystemMessage(textOf(system))];
  for (const message of history) {
    if (message.role === Role.USER) out.push(new HumanMessage(textOf(message)));
    else if (message.role === Role.TOOL) {
      const result = message.parts[0]!.kind.value as { toolCallId: string; payload: { text: string } };
      out.push(new ToolMessage({ content: result.payload.text, tool_call_id: result.toolCallId }));
    } else {
      const calls = message.parts.flatMap((part) => (part.kind.case === "toolCall" ? [{ id: part.kind.value.id, name: part.kind.value.name, args: JSON.parse(part.kind.value.arguments!.data) }] : []));
      out.push(new AIMessage({ content: textOf(message), tool_calls: calls }));
    }
  }
  return out;
}

/** Same counter as contextd's TOKENIZER estimator: o200k text tokens + 3 per message (+ tool calls). */
function langchainCounter(messages: BaseMessage[]): number {
  let total = 0;
  for (const message of messages) {
    total += 3 + countTokens(typeof message.content === "string" ? message.content : JSON.stringify(message.content), { disallowedSpecial: new Set() });
    for (const call of (message as AIMessage).tool_calls ?? []) total += 3 + countTokens(call.name) + countTokens(JSON.stringify(call.args));
  }
  return total;
}

function stats(samples: number[]): { median: number; p99: number } {
  const sorted = [...samples].sort((a, b) => a - b);
  return { median: sorted[Math.floor(sorted.length / 2)]!, p99: sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))]! };
}

async function time(iterations: number, run: () => Promise<unknown> | unknown, before?: () => void): Promise<number[]> {
  const samples: number[] = [];
  for (let index = 0; index < iterations; index++) {
    before?.();
    const started = process.hrtime.bigint();
    await run();
    samples.push(Number(process.hrtime.bigint() - started) / 1e6);
  }
  return samples;
}

// The LangChain counter above imports o200k_base statically, so this process has it loaded already;
// the lazy first load a fresh sidecar pays is timed in a child process.
const encodingsModule = new URL("../src/core/tokens/encodings.js", import.meta.url).href;
const encodingLoadMs = Number(
  execFileSync(process.execPath, [
    "--input-type=module",
    "-e",
    `const { loadEncoding } = await import(${JSON.stringify(encodingsModule)}); const t = performance.now(); await loadEncoding(0); console.log(performance.now() - t);`,
  ]).toString(),
);

const rows: string[][] = [];
for (const size of [10, 100, 1_000]) {
  const history = conversation(size);
  const system = create(MessageSchema, { id: "sys", role: Role.SYSTEM, parts: [text("You are a helpful agent. " + prose(999, 200))] });
  const tokenCounts = new TokenCountCache();
  const totalTokens = (await compile(create(CompileRequestSchema, { system: { messages: [system] }, history: { messages: history }, budget: { estimator: { kind: EstimatorKind.TOKENIZER } } }), context(tokenCounts))).usage!.total;
  const limit = Number(totalTokens) / 2;
  const request: CompileRequest = create(CompileRequestSchema, {
    system: { messages: [system] },
    history: { messages: history },
    budget: { maxTokens: BigInt(Math.floor(limit)), estimator: { kind: EstimatorKind.TOKENIZER } },
  });
  const bytes = toBinary(CompileRequestSchema, request);
  const codec = new Codec();
  const decode = () => codec.decode(CompileRequestSchema, bytes);
  const decodeWithFromBinary = () => fromBinary(CompileRequestSchema, bytes);
  let fresh = decode();
  const warmIterations = size === 1_000 ? 300 : 1_000;
  const coldIterations = size === 1_000 ? 30 : 200;

  // Warm: the count cache is hot, the request is a fresh decode each time (as after an RPC).
  const warmWith = async (decodeFresh: () => CompileRequest) => {
    await time(50, () => compile(fresh, context(tokenCounts)), () => (fresh = decodeFresh()));
    return stats(await time(warmIterations, () => compile(fresh, context(tokenCounts)), () => (fresh = decodeFresh())));
  };
  const warmFromBinary = await warmWith(decodeWithFromBinary);
  const warm = await warmWith(decode);
  let coldCache = new TokenCountCache();
  const cold = stats(await time(coldIterations, () => compile(fresh, context(coldCache)), () => {
    fresh = decode();
    coldCache = new TokenCountCache();
  }));
  const kept = (await compile(fresh, context(tokenCounts))).payload!.history.length;

  const lcMessages = langchainMessages(system, history);
  const trim = () => trimMessages(lcMessages, { maxTokens: Math.floor(limit), strategy: "last", tokenCounter: langchainCounter, includeSystem: true, startOn: "human" });
  await time(3, trim);
  const lcIterations = size === 1_000 ? 20 : 200;
  const langchain = stats(await time(lcIterations, trim));
  const lcKept = (await trim()).length - 1;
  rows.push([
    `${size}`,
    `${totalTokens}`,
    `${Math.floor(limit)}`,
    `${kept}/${lcKept}`,
    warm.median.toFixed(3),
    warm.p99.toFixed(3),
    warmFromBinary.median.toFixed(3),
    cold.median.toFixed(2),
    cold.p99.toFixed(2),
    langchain.median.toFixed(2),
    langchain.p99.toFixed(2),
    `${(langchain.median / warm.median).toFixed(0)}x`,
  ]);
}

function context(tokenCounts: TokenCountCache) {
  let counter = 0;
  return { randomId: () => `msg_${++counter}`, now: () => 0, monotonicNs: () => process.hrtime.bigint(), tokenCounts };
}

const header = ["messages", "tokens", "limit", "kept (ctxd/lc)", "warm med ms", "warm p99 ms", "warm fromBinary med ms", "cold med ms", "cold p99 ms", "trimMessages med ms", "trimMessages p99 ms", "speed-up (warm)"];
const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column]!.length)));
const line = (cells: string[]) => "| " + cells.map((cell, column) => cell.padStart(widths[column]!)).join(" | ") + " |";
console.log(`o200k_base encoding lazy first load in a fresh process: ${encodingLoadMs.toFixed(0)} ms (once per sidecar)`);
console.log(line(header));
console.log("|" + widths.map((width) => "-".repeat(width + 2)).join("|") + "|");
for (const row of rows) console.log(line(row));
