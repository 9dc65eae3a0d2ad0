import type { HandlerContext } from "@connectrpc/connect";
// Commit latency and throughput of the Redis store through the real sidecar's RPC, beside a bare
// ioredis EVALSHA of the same commit script with the same payload sizes in the same run, then a
// stateful Compile of a stored 1,000-message conversation. Run with `npm run bench:store`.
// Everything (client, sidecar, Redis) shares this machine's cores: compare the lines of one run,
// and read them with the load average printed beside them.
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Redis } from "ioredis";
import { CompileRequestSchema, CompileResultPart } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import * as grpc from "@grpc/grpc-js";
import {
  CommitRequestSchema,
  CommitResponseSchema,
  ConversationService,
  type CommitResponse,
} from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment, type Delta } from "#gen/contextd/v1/state_pb";
import type { CommitScriptCall } from "../src/store/redis-scripts.js";
import { redisConnectionOptions } from "../src/store/redis-connection.js";
import { CompileResponseSchema } from "#gen/contextd/v1/context_service_pb";
import { Codec } from "../src/codec/codec.js";
import { contextService } from "../src/server/services/context-service.js";
import { composeApplication } from "../src/server/composition-root.js";
import { defaultConfig } from "../src/server/operations/config.js";
import { RedisConversationStore } from "../src/store/redis-conversation-store.js";
import { bareAppendCall, defineBareCommit, runBareCommit } from "./bare-commit.js";
import { buildLoadGenerator, lengthPrefixed, runLoadGenerator } from "./load-generator.js";
import { MinimalGrpcClient } from "./minimal-grpc-client.js";
import { startBuiltSidecar, startDoNothingResponder } from "./bench-processes.js";
import { postgresStoreBench } from "./store-postgres.js";
import { startRedis } from "../test/support/redis.js";
import { benchScaleOut } from "./store-scale-out.js";
import { once } from "node:events";
import { mkdtempSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";

// What an RPC hands a service implementation, reduced to what ContextService reads: no deadline.
const callWithoutDeadline = { signal: new AbortController().signal, timeoutMs: () => undefined } as unknown as HandlerContext;

const commitsPerWorker = { 1: 2_000, 32: 100 } as const;
/**
 * Each worker starts a new conversation every this many commits, so every line measures the cost
 * of one commit on a short conversation, not the growth of one long state.
 */
const commitsPerConversation = 50;

function appendedMessage(id: string, text: string): Message {
  return create(MessageSchema, { id, role: Role.USER, parts: [{ kind: { case: "text", value: { text } } }] });
}

function appendDelta(id: string, text: string): Delta {
  return create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: [appendedMessage(id, text)] } } });
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

function report(label: string, result: Result, unit = "commits"): { p50: number } {
  const sorted = [...result.latenciesMs].sort((a, b) => a - b);
  const p50 = percentile(sorted, 50);
  console.log(
    `${label.padEnd(44)} p50 ${p50.toFixed(3)} ms  p99 ${percentile(sorted, 99).toFixed(3)} ms  ` +
      `${Math.round(result.latenciesMs.length / result.seconds)} ${unit}/s  (n=${result.latenciesMs.length})`,
  );
  return { p50 };
}

/**
 * The bare script's call at each version of a conversation (built before timing starts): the
 * commit the store sends for the RPC's append of one message at that version. Built for the id
 * "bench" and run under others: the script does not read the id inside the state's rest.
 */
const bareCommitCalls: CommitScriptCall[] = Array.from({ length: commitsPerConversation }, (_, version) =>
  bareAppendCall("bench", BigInt(version), version, [appendedMessage(`m${version}`, "hello world")]),
);

function formatLoad(): string {
  return loadavg().map((value) => value.toFixed(2)).join(" / ");
}

// The scale-out lines (workers, Redis Cluster) alone, without the rest of this bench; "workers":
// only the alternating 1 vs 2 worker rounds and the CPU budget.
if (process.env.CONTEXTD_BENCH_STORE_ONLY === "scale-out" || process.env.CONTEXTD_BENCH_STORE_ONLY === "workers") {
  await benchScaleOut(process.env.CONTEXTD_BENCH_STORE_ONLY === "workers" ? "workers" : "all");
  process.exit(0);
}
// The Postgres lines alone (bench/store-postgres.ts), without the Redis ones.
if (process.env.CONTEXTD_BENCH_STORE_ONLY === "postgres") {
  const directory = mkdtempSync(join(tmpdir(), "contextd-bench-store-"));
  await postgresStoreBench(buildLoadGenerator(directory), directory);
  process.exit(0);
}
const redis = await startRedis();
const sidecar = await startBuiltSidecar(["--redis-url", redis.url]);
const bare = defineBareCommit(new Redis(redis.url, redisConnectionOptions));
if (bare.status !== "ready") await once(bare, "ready");
const run = Date.now();
/**
 * The `iteration`th bare commit of a worker labelled `label`: a new conversation every
 * `commitsPerConversation` commits, written at the sizes the store writes for the RPC's commits.
 */
const bareCommitAt = async (label: string, iteration: number) => {
  const version = iteration % commitsPerConversation;
  await runBareCommit(bare, "bench-bare", `${run}-${label}-${Math.floor(iteration / commitsPerConversation)}`, bareCommitCalls[version]!);
};
const transport = createGrpcTransport({ baseUrl: sidecar.url });
const conversations = createClient(ConversationService, transport);
const grpcJs = new grpc.Client(new URL(sidecar.url).host, grpc.credentials.createInsecure());
const connectCommit = (request: MessageInitShape<typeof CommitRequestSchema>) => conversations.commit(request);
const grpcJsCommit = (request: MessageInitShape<typeof CommitRequestSchema>) =>
  new Promise<CommitResponse>((resolve, reject) =>
    grpcJs.makeUnaryRequest(
      `/${ConversationService.typeName}/${ConversationService.method.commit.name}`,
      (message: MessageInitShape<typeof CommitRequestSchema>) => Buffer.from(toBinary(CommitRequestSchema, create(CommitRequestSchema, message))),
      (bytes: Buffer) => fromBinary(CommitResponseSchema, bytes),
      request,
      (error, response) => (error ? reject(error) : resolve(response!)),
    ),
  );
// The minimal HTTP/2 gRPC client of bench:rpc: grpc-js's client alone costs ~0.5 ms of CPU per call.
const minimalCommitClient = new MinimalGrpcClient(new URL(sidecar.url).host);
const minimalCommit = async (request: MessageInitShape<typeof CommitRequestSchema>) =>
  fromBinary(
    CommitResponseSchema,
    await minimalCommitClient.call(
      `/${ConversationService.typeName}/${ConversationService.method.commit.name}`,
      Buffer.from(toBinary(CommitRequestSchema, create(CommitRequestSchema, request))),
    ),
  );
const inProcessCommitStore = new RedisConversationStore(redis.url);
await inProcessCommitStore.connected();

try {
  console.log(`contextd store benchmark (redis ${redis.url}, sidecar ${sidecar.url}, node ${process.version})`);
  console.log(`load average at start: ${formatLoad()} (1/5/15 min; the cores are shared with other work)`);
  console.log(`commits: conversations of up to ${commitsPerConversation} messages, one append of one message each`);
  const ratios: string[] = [];
  for (const concurrency of [1, 32] as const) {
    const count = commitsPerWorker[concurrency];
    // Bare script: the same Lua commit writing, at each version, a state and a change of the size
    // the store writes for the RPC's commit at that version, encoded before timing starts.
    const bareResult = await measure(concurrency, count, (worker, iteration) => bareCommitAt(`c${concurrency}-w${worker}`, iteration));
    const bareStats = report(`bare EVALSHA commit, concurrency ${concurrency}`, bareResult);

    // The store itself in this process, no RPC: what a commit adds to the bare script (the read of
    // the cached state, applying the deltas, encoding state and change, the index entry).
    const storeCpuBefore = process.cpuUsage();
    const storeResult = await measure(concurrency, count, async (worker, iteration) => {
      const version = iteration % commitsPerConversation;
      const id = `bench-store-${run}-c${concurrency}-w${worker}-${Math.floor(iteration / commitsPerConversation)}`;
      await inProcessCommitStore.commit(id, BigInt(version), [appendDelta(`m${iteration}`, "hello world")], "");
    });
    const storeCpu = process.cpuUsage(storeCpuBefore);
    report(`RedisConversationStore.commit in-process, concurrency ${concurrency}`, storeResult);
    console.log(`  (this process's CPU per in-process commit: ${((storeCpu.user + storeCpu.system) / 1000 / storeResult.latenciesMs.length).toFixed(3)} ms)`);

    // The same commits through three clients: the minimal one (the server's own cost), grpc-js and
    // connect-node, whose per-call costs are part of what their callers see.
    const clients = [["minimal HTTP/2", minimalCommit], ["grpc-js", grpcJsCommit], ["connect-node", connectCommit]] as const;
    for (const [client, commit] of clients) {
      const rpcResult = await measure(concurrency, count, async (worker, iteration) => {
        const version = iteration % commitsPerConversation;
        await commit({
          conversationId: `bench-rpc-${run}-${client.replace(/\W/g, "")}-c${concurrency}-w${worker}-${Math.floor(iteration / commitsPerConversation)}`,
          expectedVersion: BigInt(version),
          deltas: [appendDelta(`m${iteration}`, "hello world")],
        });
      });
      const rpcStats = report(`Commit RPC (${client} client), concurrency ${concurrency}`, rpcResult);
      ratios.push(`concurrency ${concurrency}, ${client} client: RPC p50 / bare p50 = ${(rpcStats.p50 / bareStats.p50).toFixed(2)}x`);
    }
  }
  for (const ratio of ratios) console.log(ratio);
  // The same commits from the grpc-go load generator (what bench:rpc uses): a Go agent's view, with
  // the least client CPU on these shared cores. Its requests are fixed up front, so they carry no
  // expected version (concurrent workers could otherwise send version n + 1 before n); the store
  // then compares against its cached version, the same script either way.
  const directory = mkdtempSync(join(tmpdir(), "contextd-bench-store-"));
  const loadgen = buildLoadGenerator(directory);
  // Each run commits to conversations of its own (a requests file replayed would repeat message ids).
  const goCommits = (label: string, concurrency: number, seconds: number) => {
    const conversationsPerRun = 400;
    // Enough distinct commits for the run at ~20,000 commits/s (the load generator refuses to
    // replay a file, which would repeat message ids).
    const commitRequests = Array.from({ length: Math.ceil((seconds + 0.5) * 20_000) }, (_, index) =>
      toBinary(
        CommitRequestSchema,
        create(CommitRequestSchema, {
          conversationId: `bench-go-${run}-${label}-${index % conversationsPerRun}`,
          deltas: [appendDelta(`m${index}`, "hello world")],
        }),
      ),
    );
    const requestsFile = join(directory, `commits-${label}.bin`);
    writeFileSync(requestsFile, lengthPrefixed(commitRequests));
    const method = `/${ConversationService.typeName}/${ConversationService.method.commit.name}`;
    return runLoadGenerator(loadgen, { address: new URL(sidecar.url).host, method, requestsFile, concurrency, seconds, warmupSeconds: 0.5 });
  };
  for (const concurrency of [1, 32]) {
    const result = goCommits(`c${concurrency}`, concurrency, 2);
    console.log(
      `${`Commit RPC (grpc-go load generator), concurrency ${concurrency}`.padEnd(44)} p50 ${result.p50Ms.toFixed(3)} ms  p99 ${result.p99Ms.toFixed(3)} ms  ` +
        `${Math.round(result.calls / result.seconds)} commits/s  (n=${result.calls})`,
    );
  }
  // The issue's ratio at concurrency 1, read robustly on noisy shared cores: three rounds of the
  // bare script and the RPC in turn, the median of each.
  const rounds: { bare: number; rpc: number }[] = [];
  for (let round = 0; round < 3; round++) {
    const bareRound = await measure(1, 1_000, (_, iteration) => bareCommitAt(`round${round}`, iteration));
    const sorted = [...bareRound.latenciesMs].sort((a, b) => a - b);
    rounds.push({ bare: percentile(sorted, 50), rpc: goCommits(`round${round}`, 1, 1.5).p50Ms });
  }
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[1]!;
  const bareMedian = median(rounds.map((round) => round.bare));
  const rpcMedian = median(rounds.map((round) => round.rpc));
  console.log(
    `concurrency 1, three rounds in turn: Commit RPC (grpc-go) p50 ${rounds.map((round) => round.rpc.toFixed(3)).join(" / ")} ms, ` +
      `bare EVALSHA p50 ${rounds.map((round) => round.bare.toFixed(3)).join(" / ")} ms; medians ${rpcMedian.toFixed(3)} / ${bareMedian.toFixed(3)} ms = ${(rpcMedian / bareMedian).toFixed(2)}x`,
  );
  // The same commit on long conversations: 20 conversations of 1,000 messages, committed to in
  // turn (each grows by ~100 during the run), beside the bare script writing a state of that size.
  const longConversations = 20;
  const longStart = 1_000;
  for (let conversation = 0; conversation < longConversations; conversation++) {
    for (let batch = 0; batch < longStart / 100; batch++) {
      await conversations.commit({
        conversationId: `bench-long-${run}-${conversation}`,
        deltas: [create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: Array.from({ length: 100 }, (_, index) => appendedMessage(`l${batch * 100 + index}`, "hello world")) } } })],
      });
    }
  }
  // Before the list layout every commit wrote the whole state; the bare line now writes a whole
  // 1,000-message history once per conversation (a first commit), the most a commit can write here.
  const longCall = bareAppendCall("bench", 0n, 0, Array.from({ length: longStart }, (_, index) => appendedMessage(`l${index}`, "hello world")));
  const longBytes = longCall.segments.reduce((sum, segment) => sum + segment.encodings.reduce((bytes, encoding) => bytes + encoding.length, 0), 0);
  const bareLong = await measure(1, commitsPerWorker[1], (_, iteration) => runBareCommit(bare, "bench-bare-long", `${run}-${iteration}`, longCall));
  const bareLongStats = report(`bare EVALSHA commit writing a ${longStart.toLocaleString("en-US")}-message history (${Math.round(longBytes / 1024)} KB), concurrency 1`, bareLong);
  const longRequests = Array.from({ length: 60_000 }, (_, index) =>
    toBinary(CommitRequestSchema, create(CommitRequestSchema, { conversationId: `bench-long-${run}-${index % longConversations}`, deltas: [appendDelta(`n${index}`, "hello world")] })),
  );
  const longRequestsFile = join(directory, "commits-long.bin");
  writeFileSync(longRequestsFile, lengthPrefixed(longRequests));
  const long = runLoadGenerator(loadgen, {
    address: new URL(sidecar.url).host,
    method: `/${ConversationService.typeName}/${ConversationService.method.commit.name}`,
    requestsFile: longRequestsFile,
    concurrency: 1,
    seconds: 2,
    warmupSeconds: 0.5,
  });
  console.log(
    `${`Commit RPC (grpc-go), ${longStart.toLocaleString("en-US")}+-message conversations, concurrency 1`.padEnd(44)} p50 ${long.p50Ms.toFixed(3)} ms  p99 ${long.p99Ms.toFixed(3)} ms  ` +
      `${Math.round(long.calls / long.seconds)} commits/s  (n=${long.calls}; ${(long.p50Ms / bareLongStats.p50).toFixed(2)}x bare)`,
  );

  // The floor under any commit RPC here, from the same generator: a round trip that does no work,
  // on the sidecar (health check) and on node:http2 with no library at all.
  const emptyRequest = join(directory, "empty.bin");
  writeFileSync(emptyRequest, Buffer.alloc(0));
  const responder = await startDoNothingResponder();
  const floors: [string, string, string][] = [
    ["sidecar Health.Check", new URL(sidecar.url).host, "/grpc.health.v1.Health/Check"],
    ["do-nothing node:http2 responder", responder.address, "/grpc.health.v1.Health/Check"],
  ];
  const floorP50: number[] = [];
  for (const [what, address, method] of floors) {
    const result = runLoadGenerator(loadgen, { address, method, requestFile: emptyRequest, concurrency: 1, seconds: 2, warmupSeconds: 0.5 });
    console.log(`${`floor: ${what} (grpc-go), concurrency 1`.padEnd(44)} p50 ${result.p50Ms.toFixed(3)} ms  p99 ${result.p99Ms.toFixed(3)} ms  (n=${result.calls})`);
    floorP50.push(result.p50Ms);
  }
  responder.stop();
  console.log(
    `do-nothing node:http2 round trip + bare script (medians) = ${(floorP50[1]! + bareMedian).toFixed(3)} ms ` +
      `(${((floorP50[1]! + bareMedian) / bareMedian).toFixed(2)}x bare): the least any Node sidecar's commit could take here; the Commit RPC is ${(rpcMedian - floorP50[1]! - bareMedian).toFixed(3)} ms above it`,
  );
  // The same floor from a Node client, for the Node-client lines above.
  const healthCheck = Buffer.alloc(0);
  const floor = await measure(1, commitsPerWorker[1], async () => {
    await minimalCommitClient.call("/grpc.health.v1.Health/Check", healthCheck);
  });
  report("floor: sidecar Health.Check (minimal Node client), concurrency 1", floor, "calls");

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
  // Through grpc-js with the response left undecoded (as bench:rpc did): decoding a 1,000-message
  // result is the caller's cost (with the connect-node client this line read 42-69 ms, here ~8 ms).
  // grpc-js itself costs ~0.5 ms of CPU per call on these shared cores, so the same calls are also
  // made with the minimal HTTP/2 client bench:rpc uses.
  const compilePath = `/${ContextService.typeName}/${ContextService.method.compile.name}`;
  const grpcJsCompile = (request: Buffer) =>
    new Promise<Buffer>((resolve, reject) =>
      grpcJs.makeUnaryRequest(
        compilePath,
        (bytes: Buffer) => bytes,
        (bytes: Buffer) => bytes,
        request,
        (error, response) => (error ? reject(error) : resolve(response!)),
      ),
    );
  const minimalClient = new MinimalGrpcClient(new URL(sidecar.url).host);
  const minimalCompile = (request: Buffer) => minimalClient.call(compilePath, request);
  // The sidecar's own work without any transport: the same store code over the same Redis (load,
  // validated against the stored version, then the process's cached decoded state), the compile,
  // and the encoding of the response, in this process.
  const inProcessCodec = new Codec();
  const inProcessStore = new RedisConversationStore(redis.url, { codec: inProcessCodec });
  await inProcessStore.connected();
  const inProcessService = contextService({ ...composeApplication(defaultConfig, inProcessStore, inProcessCodec), publish: () => {}, summarizeTimeoutMs: 1_000 });
  // The response is encoded as the unary gRPC path sends it (one enveloped buffer), and as chunks
  // that reference the kept encodings of the stored history instead of copying them.
  const compileInProcess = (chunked: boolean) => async (request: Buffer) => {
    const response = await inProcessService.compile!(fromBinary(CompileRequestSchema, request), callWithoutDeadline);
    const message = create(CompileResponseSchema, response as MessageInitShape<typeof CompileResponseSchema>);
    const encoded = chunked ? inProcessCodec.encodeEnvelopedChunks(CompileResponseSchema, message) : [inProcessCodec.encode(CompileResponseSchema, message)];
    return { length: encoded.reduce((sum, chunk) => sum + chunk.length, 0) };
  };
  // The default (lean) result, then with every heavy part included (source, normalized_snapshot,
  // writeback.snapshot, persistence and every per-message record: what the default used to be).
  const everyPart = [CompileResultPart.SOURCE, CompileResultPart.NORMALIZED_SNAPSHOT, CompileResultPart.WRITEBACK_SNAPSHOT, CompileResultPart.PERSISTENCE, CompileResultPart.ALL_TRANSFORMATIONS];
  try {
    for (const [label, include] of [["", []], [", every part included", everyPart]] as const) {
      const request = Buffer.from(toBinary(CompileRequestSchema, create(CompileRequestSchema, { conversationId, include: [...include] })));
      const cases = [
        ["grpc-js client", grpcJsCompile],
        ["minimal HTTP/2 client", minimalCompile],
        ["in-process load + compile + encode", compileInProcess(false)],
        ["in-process, encoded as chunks", compileInProcess(true)],
      ] as const;
      for (const [how, compileOnce] of cases) {
        try {
          for (let warm = 0; warm < 50; warm++) await compileOnce(request);
          const responseBytes = (await compileOnce(request)).length;
          const compileResult = await measure(1, 300, async () => {
            await compileOnce(request);
          });
          report(`stateful Compile, 1,000 stored (warm${label}, ${Math.round(responseBytes / 1024)} KB), ${how}`, compileResult, "compiles");
        } catch (error) {
          console.log(`stateful Compile, 1,000 stored messages${label}, ${how}: not measured, Compile failed: ${(error as Error).message}`);
        }
      }
    }
  } finally {
    minimalClient.close();
    minimalCommitClient.close();
    await inProcessStore.close();
  }
  // The Postgres store's lines (bench/store-postgres.ts), with its own sidecar and PostgreSQL.
  await postgresStoreBench(loadgen, directory);
  console.log(`load average at end: ${formatLoad()}`);
  await benchScaleOut("all");
} finally {
  grpcJs.close();
  bare.disconnect();
  await inProcessCommitStore.close();
  await sidecar.stop();
  await redis.stop();
}
