// `npm run build && node dist/bench/encryption-thread.js`: what a cold read's opens would cost the
// event loop if they ran on a worker thread. Why it exists: in process, an open is node:crypto's
// five calls on a new decipher object per value (bench:encryption takes one apart), about as much
// CPU as the plain read of that message, so an encrypted cold read costs about twice a plain one
// on the thread that serves every other call. This measures the proposal, not the store: 100,000
// sealed 200-byte entries decoded as a cold read decodes them, (1) plain, (2) opened and decoded on
// the main thread (what the stores do), (3) opened on one worker thread in chunks of 4,096 values,
// sent as one buffer each way, decoded on the main thread as chunks arrive. Per value: the main
// thread's CPU (process.threadCpuUsage) and the wall clock; rounds alternate so load falls on all
// three alike. The wall clock gains only where a core is free, which a shared machine may not have.
import { create } from "@bufbuild/protobuf";
import { cpus, loadavg } from "node:os";
import { Worker } from "node:worker_threads";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { Codec } from "../src/codec/codec.js";
import { AtRestCipher, type AtRestKey } from "../src/store/at-rest-encryption.js";
import type { SealedChunk } from "./encryption-thread-worker.js";

const values = Number(process.env.BENCH_VALUES ?? 100_000);
const chunkValues = 4_096;
const keys: AtRestKey[] = [{ id: "bench-1", key: Buffer.alloc(32, 5), tenant: "" }];
const cipher = new AtRestCipher(keys);
const codec = new Codec();
const entries = Array.from({ length: values }, (_, index) =>
  codec.encodeStoredEntry(
    create(MessageSchema, { id: `m${index}`, role: Role.USER, parts: [{ kind: { case: "text", value: { text: `message ${index}: ` + "the quick brown fox jumps over the lazy dog, ".repeat(4) } } }] }),
  ),
);
const sealed = entries.map((entry) => cipher.seal("c", "message", entry));
const where = () => "bench";

const worker = new Worker(new URL("./encryption-thread-worker.js", import.meta.url), { workerData: { keys } });
const replies = new Map<number, (reply: { bytes: ArrayBuffer; ends: Uint32Array }) => void>();
worker.on("message", (reply: { id: number; bytes: ArrayBuffer; ends: Uint32Array }) => {
  replies.get(reply.id)!(reply);
  replies.delete(reply.id);
});
let nextChunk = 0;

/** The plaintexts of `chunk` (sealed values), opened on the worker. */
function openOnWorker(chunk: Buffer[]): Promise<{ bytes: ArrayBuffer; ends: Uint32Array }> {
  const bytes = new ArrayBuffer(chunk.reduce((sum, value) => sum + value.length, 0));
  const view = Buffer.from(bytes);
  const offsets = new Uint32Array(chunk.length + 1);
  let at = 0;
  chunk.forEach((value, index) => {
    offsets[index] = at;
    at += value.copy(view, at);
  });
  offsets[chunk.length] = at;
  const id = nextChunk++;
  return new Promise((resolve) => {
    replies.set(id, resolve);
    const message: SealedChunk = { id, conversationId: "c", bytes, offsets };
    worker.postMessage(message, [bytes, offsets.buffer]);
  });
}

const ways: [string, () => Promise<number>][] = [
  ["plain: decode", async () => entries.map((entry) => codec.decodeStoredEntry(entry)).length],
  [
    "encrypted, opened on the main thread (the stores today)",
    async () => {
      const open = cipher.opener("c", "message");
      return sealed.map((value) => codec.decodeStoredEntry(open(value, where))).length;
    },
  ],
  [
    `encrypted, opened on a worker in chunks of ${chunkValues}`,
    async () => {
      const chunks: Promise<{ bytes: ArrayBuffer; ends: Uint32Array }>[] = [];
      for (let start = 0; start < values; start += chunkValues) chunks.push(openOnWorker(sealed.slice(start, start + chunkValues)));
      let decoded = 0;
      for (const chunk of chunks) {
        const { bytes, ends } = await chunk;
        const view = Buffer.from(bytes);
        let at = 0;
        for (const end of ends) {
          codec.decodeStoredEntry(view.subarray(at, end));
          decoded++;
          at = end;
        }
      }
      return decoded;
    },
  ],
];

// Node 24 has process.threadCpuUsage (this thread alone, unlike cpuUsage); the @types/node installed does not list it yet.
const threadCpuUsage = (previous?: NodeJS.CpuUsage): NodeJS.CpuUsage => (process as unknown as { threadCpuUsage(previous?: NodeJS.CpuUsage): NodeJS.CpuUsage }).threadCpuUsage(previous);
const median = (numbers: number[]) => [...numbers].sort((a, b) => a - b)[Math.floor(numbers.length / 2)]!;
const rounds = 7;
const cpu: number[][] = ways.map(() => []);
const wall: number[][] = ways.map(() => []);
for (let round = 0; round < rounds; round++) {
  for (const [index, [, run]] of ways.entries()) {
    const startedCpu = threadCpuUsage();
    const started = performance.now();
    if ((await run()) !== values) throw new Error("decoded a wrong number of values");
    const used = threadCpuUsage(startedCpu);
    cpu[index]!.push((used.user + used.system) / values);
    wall[index]!.push(((performance.now() - started) * 1000) / values);
  }
}
await worker.terminate();
console.log(`${values} sealed ${entries[0]!.length}-byte entries, medians of ${rounds} rounds; ${cpus().length} cores, load average ${loadavg()[0]!.toFixed(1)}`);
for (const [index, [label]] of ways.entries()) {
  console.log(`${label.padEnd(58)} main thread CPU ${median(cpu[index]!).toFixed(2)} µs a value, wall ${median(wall[index]!).toFixed(2)} µs a value`);
}
