/**
 * `npm run bench:codec`: the request decoder and response encoder the sidecar uses, beside plain
 * protobuf-es `fromBinary` / `toBinary` of the installed @bufbuild/protobuf, in one run.
 *
 * Why it exists: the codec seam keeps a custom decoder and encoder only where they measurably win
 * over the library (issue 13, "measure first, then delete"). This prints, for compile requests of
 * 10, 100 and 1,000 history messages (user / assistant with a tool call / tool result):
 * - decode *fresh*: bytes never seen before (every message text differs), as a first request;
 * - decode *repeated*: the same conversation resent, as an agent does on every model call;
 * - encode of the compile response for those two cases (the engine's own result objects).
 * Medians of many runs, in milliseconds; read ratios, not absolutes (shared 2-core machine).
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { loadavg } from "node:os";
import { CompileRequestSchema, type CompileRequest } from "#gen/contextd/v1/compile_pb";
import { CompileResponseSchema } from "#gen/contextd/v1/context_service_pb";
import { MessageSchema, PartSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { Codec } from "../src/codec/codec.js";
import { compile } from "../src/core/compile/compile.js";
import { TokenCountCache } from "../src/core/tokens/token-count-cache.js";

const sentence = "The quick brown fox jumps over the lazy dog while the agent plans its next tool call. ";
const text = (value: string) => create(PartSchema, { kind: { case: "text", value: { text: value } } });

function conversation(count: number, variant: number): Message[] {
  const messages: Message[] = [];
  for (let index = 0; messages.length < count; index++) {
    const tag = `${variant}.${index}`;
    messages.push(
      create(MessageSchema, { id: `u${index}`, role: Role.USER, parts: [text(`${tag} ${sentence.repeat(3)}`)] }),
      create(MessageSchema, {
        id: `a${index}`,
        role: Role.ASSISTANT,
        parts: [text(`${tag} ${sentence}`), create(PartSchema, { kind: { case: "toolCall", value: { id: `call${index}`, name: "search", arguments: { data: `{"query":"${tag}"}` } } } })],
      }),
      create(MessageSchema, {
        id: `t${index}`,
        role: Role.TOOL,
        parts: [create(PartSchema, { kind: { case: "toolResult", value: { toolCallId: `call${index}`, name: "search", payload: { text: `${tag} ${sentence.repeat(4)}` } } } })],
      }),
      create(MessageSchema, { id: `r${index}`, role: Role.ASSISTANT, parts: [text(`${tag} ${sentence.repeat(2)}`)] }),
    );
  }
  messages.length = count;
  while (messages.at(-1)!.role === Role.ASSISTANT && messages.at(-1)!.parts.length > 1) messages.pop();
  return messages;
}

function requestBytes(count: number, variant: number): Uint8Array {
  const request: CompileRequest = create(CompileRequestSchema, {
    system: { messages: [create(MessageSchema, { id: "sys", role: Role.SYSTEM, parts: [text("You are a helpful agent.")] })] },
    history: { messages: conversation(count, variant) },
  });
  return toBinary(CompileRequestSchema, request);
}

function median(run: () => unknown, iterations: number): number {
  for (let index = 0; index < Math.min(20, iterations); index++) run();
  const samples: number[] = [];
  for (let index = 0; index < iterations; index++) {
    const started = process.hrtime.bigint();
    run();
    samples.push(Number(process.hrtime.bigint() - started) / 1e6);
  }
  samples.sort((a, b) => a - b);
  return samples[Math.floor(samples.length / 2)]!;
}

let ids = 0;
const context = { randomId: () => `msg_${++ids}`, now: () => 0, monotonicNs: () => process.hrtime.bigint(), tokenCounts: new TokenCountCache() };
const compileResponse = async (request: CompileRequest) => create(CompileResponseSchema, { result: await compile(request, context) });

const rows: string[][] = [];
for (const size of [10, 100, 1_000]) {
  const iterations = size === 1_000 ? 60 : 400;
  const variants = Array.from({ length: iterations + 20 }, (_, variant) => requestBytes(size, variant));
  const repeated = variants[0]!;
  const codec = new Codec({ recentMessageBytes: 64 * 1024 * 1024, retainedEncodingBytes: 64 * 1024 * 1024 });

  let next = 0;
  const decodeFreshLibrary = median(() => fromBinary(CompileRequestSchema, variants[next++ % variants.length]!), iterations);
  next = 0;
  const freshCodec = new Codec({ recentMessageBytes: 64 * 1024 * 1024, retainedEncodingBytes: 64 * 1024 * 1024 });
  const decodeFreshCodec = median(() => freshCodec.decode(CompileRequestSchema, variants[next++ % variants.length]!), iterations);
  const decodeRepeatedLibrary = median(() => fromBinary(CompileRequestSchema, repeated), iterations);
  const decodeRepeatedCodec = median(() => codec.decode(CompileRequestSchema, repeated), iterations);

  // Responses: fresh objects (a request decoded by the library) and repeated ones (the codec's
  // shared objects for a resent conversation), each encoded by both.
  const freshResponse = await compileResponse(fromBinary(CompileRequestSchema, variants[1]!));
  const repeatedResponse = await compileResponse(codec.decode(CompileRequestSchema, repeated));
  const responseBytes = toBinary(CompileResponseSchema, repeatedResponse).length;
  const encodeFreshLibrary = median(() => toBinary(CompileResponseSchema, freshResponse), iterations);
  const encodeFreshCodec = median(() => new Codec({ recentMessageBytes: 0, retainedEncodingBytes: 0 }).encodeEnvelopedChunks(CompileResponseSchema, freshResponse), iterations);
  const encodeRepeatedLibrary = median(() => toBinary(CompileResponseSchema, repeatedResponse), iterations);
  const encodeRepeatedCodec = median(() => codec.encodeEnvelopedChunks(CompileResponseSchema, repeatedResponse), iterations);

  const ratio = (library: number, ours: number) => `${(library / ours).toFixed(1)}x`;
  rows.push([
    `${size}`,
    `${(repeated.length / 1024).toFixed(0)} KB / ${(responseBytes / 1024).toFixed(0)} KB`,
    `${decodeFreshLibrary.toFixed(3)} / ${decodeFreshCodec.toFixed(3)} (${ratio(decodeFreshLibrary, decodeFreshCodec)})`,
    `${decodeRepeatedLibrary.toFixed(3)} / ${decodeRepeatedCodec.toFixed(3)} (${ratio(decodeRepeatedLibrary, decodeRepeatedCodec)})`,
    `${encodeFreshLibrary.toFixed(3)} / ${encodeFreshCodec.toFixed(3)} (${ratio(encodeFreshLibrary, encodeFreshCodec)})`,
    `${encodeRepeatedLibrary.toFixed(3)} / ${encodeRepeatedCodec.toFixed(3)} (${ratio(encodeRepeatedLibrary, encodeRepeatedCodec)})`,
  ]);
}

const { version } = JSON.parse(readFileSync(createRequire(import.meta.url).resolve("@bufbuild/protobuf").replace(/dist\/.*$/, "package.json"), "utf8")) as { version: string };
console.log(`@bufbuild/protobuf ${version}, node ${process.version}, load average ${loadavg().map((value) => value.toFixed(2)).join(" ")}`);
const header = ["messages", "request / response", "decode fresh: library / codec ms", "decode repeated: library / codec ms", "encode fresh: library / codec ms", "encode repeated: library / codec ms"];
const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column]!.length)));
const line = (cells: string[]) => "| " + cells.map((cell, column) => cell.padStart(widths[column]!)).join(" | ") + " |";
console.log(line(header));
console.log("|" + widths.map((width) => "-".repeat(width + 2)).join("|") + "|");
for (const row of rows) console.log(line(row));
