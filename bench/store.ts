// Commit latency and throughput of the Redis store through the real sidecar's RPC, beside a bare
// ioredis EVALSHA of the same commit script in the same run, then a stateful Compile of a stored
// 1,000-message conversation. Run with `npm run bench:store`.
import { create, toBinary } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Redis } from "ioredis";
import { ContextService } from "../gen/ts/contextd/v1/context_service_pb.js";
import { ChangeSchema, ConversationService } from "../gen/ts/contextd/v1/conversation_service_pb.js";
import { MessageSchema, Role } from "../gen/ts/contextd/v1/message_pb.js";
import { ConversationStateSchema, DeltaSchema, Segment, type Delta } from "../gen/ts/contextd/v1/state_pb.js";
import { commitScript, conversationKeys } from "../src/store/redis-scripts.js";
import { redisConnectionOptions } from "../src/store/redis-conversation-store.js";
import { startRedis } from "../test/support/redis.js";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const commitsPerWorker = { 1: 2_000, 32: 100 } as const;

function appendDelta(id: string, text: string): Delta {
  const message = create(MessageSchema, { id, role: Role.USER, parts: [{ kind: { case: "text", value: { text } } }] });
  return create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: [message] } } });
}

interface Result {
  latenciesMs: number[];
  seconds: number;
}

/** Runs `concurrency` workers each calling `operation(worker, i)` `count` times, timing each call. */
async function measure(concurrency: number, count: number, operation: (worker: number, iteration: number) => Promise<void>): Promise<Result> {
  const latenciesMs: number[] = [];
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      for (let iteration = 0; iteration < count; iteration++) {
        const before = process.hrtime.bigint();
        await operation(worker, iteration);
        latenciesMs.push(Number(process.hrtime.bigint() - before) / 1e6);
      }
    }),
  );
  return { latenciesMs, seconds: Number(process.hrtime.bigint() - started) / 1e9 };
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function report(label: string, result: Result): { p50: number } {
  const sorted = [...result.latenciesMs].sort((a, b) => a - b);
  const p50 = percentile(sorted, 50);
  console.log(
    `${label.padEnd(44)} p50 ${p50.toFixed(3)} ms  p99 ${percentile(sorted, 99).toFixed(3)} ms  ` +
      `${Math.round(result.latenciesMs.length / result.seconds)} commits/s  (n=${result.latenciesMs.length})`,
  );
  return { p50 };
}

/**
 * The built sidecar, next to this file in dist/ (test/support/sidecar.ts resolves dist/ from the
 * source tree, which does not hold once compiled).
 */
async function startBuiltSidecar(redisUrl: string) {
  const main = fileURLToPath(new URL("../src/main.js", import.meta.url));
  const child = spawn(process.execPath, [main, "--port", "0", "--redis-url", redisUrl], { stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise<number>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`sidecar exited with ${code}`)));
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const entry = JSON.parse(line) as { msg?: string; address?: string };
      if (entry.msg === "contextd listening" && entry.address) resolve(Number(entry.address.slice(entry.address.lastIndexOf(":") + 1)));
    });
  });
  return {
    url: `http://127.0.0.1:${port}`,
    stop: () => new Promise<void>((resolve) => (child.exitCode !== null ? resolve() : (child.once("exit", () => resolve()), child.kill("SIGTERM")))),
  };
}

const redis = await startRedis();
const sidecar = await startBuiltSidecar(redis.url);
const bare = new Redis(redis.url, redisConnectionOptions) as Redis & { benchCommit(...args: (string | Buffer | number)[]): Promise<unknown> };
bare.defineCommand("benchCommit", { numberOfKeys: 4, lua: commitScript });
if (bare.status !== "ready") await once(bare, "ready");
const transport = createGrpcTransport({ baseUrl: sidecar.url });
const conversations = createClient(ConversationService, transport);
const run = Date.now();

try {
  console.log(`contextd store benchmark (redis ${redis.url}, sidecar ${sidecar.url}, node ${process.version})`);
  const ratios: string[] = [];
  for (const concurrency of [1, 32] as const) {
    const count = commitsPerWorker[concurrency];
    // Bare script: the same Lua commit with a payload of the size the RPC writes (a small state).
    const versions = new Array<bigint>(concurrency).fill(0n);
    const delta = appendDelta("m", "hello world");
    const bareResult = await measure(concurrency, count, async (worker) => {
      const keys = conversationKeys("bench-bare", `${run}-c${concurrency}-w${worker}`);
      const version = versions[worker]!;
      const state = create(ConversationStateSchema, { conversationId: keys.state, version: version + 1n });
      const change = create(ChangeSchema, { version: version + 1n, deltas: [delta] });
      await bare.benchCommit(
        keys.version, keys.state, keys.changes, keys.idempotencyPrefix,
        String(version), Buffer.from(toBinary(ConversationStateSchema, state)), Buffer.from(toBinary(ChangeSchema, change)),
        "", "", 86_400, 10_000,
      );
      versions[worker] = version + 1n;
    });
    const bareStats = report(`bare EVALSHA commit, concurrency ${concurrency}`, bareResult);

    const expected = new Array<bigint>(concurrency).fill(0n);
    const rpcResult = await measure(concurrency, count, async (worker, iteration) => {
      const response = await conversations.commit({
        conversationId: `bench-rpc-${run}-c${concurrency}-w${worker}`,
        expectedVersion: expected[worker]!,
        deltas: [appendDelta(`m${iteration}`, "hello world")],
      });
      expected[worker] = response.version;
    });
    const rpcStats = report(`Commit RPC (grpc, Redis store), concurrency ${concurrency}`, rpcResult);
    ratios.push(`concurrency ${concurrency}: RPC p50 / bare p50 = ${(rpcStats.p50 / bareStats.p50).toFixed(2)}x`);
  }
  // The Commit response carries the whole state, so its cost grows with the conversation; the same
  // workload on conversations kept at 50 messages isolates the per-commit cost.
  let shortExpected = 0n;
  const shortResult = await measure(1, 2_000, async (_worker, iteration) => {
    if (iteration % 50 === 0) shortExpected = 0n;
    const response = await conversations.commit({
      conversationId: `bench-short-${run}-${Math.floor(iteration / 50)}`,
      expectedVersion: shortExpected,
      deltas: [appendDelta(`m${iteration}`, "hello world")],
    });
    shortExpected = response.version;
  });
  report("Commit RPC, conversations of <= 50 messages, c1", shortResult);
  for (const ratio of ratios) console.log(ratio);

  // Stateful compile of a stored 1,000-message conversation (needs ContextService.Compile with
  // conversation_id from the engine).
  const conversationId = `bench-compile-${run}`;
  for (let batch = 0; batch < 10; batch++) {
    await conversations.commit({
      conversationId,
      deltas: Array.from({ length: 100 }, (_, index) => {
        const n = batch * 100 + index;
        return appendDelta(`h${n}`, `message ${n}: ${"lorem ipsum dolor sit amet ".repeat(4)}`);
      }),
    });
  }
  const context = createClient(ContextService, transport);
  try {
    for (let warm = 0; warm < 50; warm++) await context.compile({ conversationId });
    const compileResult = await measure(1, 300, async () => {
      await context.compile({ conversationId });
    });
    report("stateful Compile, 1,000 stored messages (warm)", compileResult);
  } catch (error) {
    console.log(`stateful Compile, 1,000 stored messages: not measured, Compile failed: ${(error as Error).message}`);
  }
} finally {
  bare.disconnect();
  await sidecar.stop();
  await redis.stop();
}
