// Long conversations at constant cost (issue 14, item 6): an agent turn — a Commit appending one
// ~1 KB message, then a stateful Compile (budget 8,000 tokens, rendered for OpenAI Chat, default
// response: lean, without the heavy parts `include` can ask for) — on conversations of 100 to 100,000 stored ~1 KB
// messages, and a coding-agent profile (every other turn a tool round with a 20 KB result) at
// 1,000 and 5,000 messages, for the in-memory and the Redis store, each a real sidecar driven by
// the minimal HTTP/2 gRPC client. Beside them, in the same run: the floor (two do-nothing RPC
// round trips plus a bare RPUSH and LRANGE), bytes written to Redis per commit (INFO stats
// total_net_input_bytes), the sidecars' RSS, and the in-process split of a turn (commit, store
// load, compile) that says which side grows. Run with `npm run bench:scale`; compare lines of one
// run only (the 2 cores are shared with other work; the load average is printed).
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { Redis } from "ioredis";
import { CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { CompileResponseSchema, ContextService } from "#gen/contextd/v1/context_service_pb";
import { CommitRequestSchema, CommitResponseSchema, ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment, type Delta } from "#gen/contextd/v1/state_pb";
import { Codec } from "../src/codec/codec.js";
import { contextService } from "../src/server/services/context-service.js";
import { composeApplication } from "../src/server/composition-root.js";
import { defaultConfig } from "../src/server/operations/config.js";
import type { ConversationStore } from "../src/store/conversation-store.js";
import { MemoryConversationStore } from "../src/store/memory-conversation-store.js";
import { RedisConversationStore } from "../src/store/redis-conversation-store.js";
import { startRedis } from "../test/support/redis.js";
import { startBuiltSidecar, startDoNothingResponder, type BuiltSidecar } from "./bench-processes.js";
import { MinimalGrpcClient } from "./minimal-grpc-client.js";
import { storeCommitsAtScale } from "./store-commits.js";
import { loadavg } from "node:os";

/** `CONTEXTD_SCALE_SIZES=100,1000,10000` measures fewer sizes (e.g. against a build that writes whole states). */
const chosenSizes = process.env.CONTEXTD_SCALE_SIZES?.split(",").map(Number);
const agentSizes = [100, 1_000, 10_000, 100_000].filter((size) => chosenSizes?.includes(size) ?? true);
const codingSizes = [1_000, 5_000].filter((size) => chosenSizes?.includes(size) ?? true);
/** Measured turns per size (fewer where one turn takes long); three more turns warm up first. */
const turnsAt = (size: number) => (size >= 100_000 ? 20 : 60);
const commitPath = `/${ConversationService.typeName}/${ConversationService.method.commit.name}`;
const compilePath = `/${ContextService.typeName}/${ContextService.method.compile.name}`;
// What an RPC hands a service implementation, reduced to what ContextService reads: no deadline.
const callWithoutDeadline = { signal: new AbortController().signal, timeoutMs: () => undefined } as unknown as HandlerContext;

const words = "the agent reads the file, runs the tests, and writes a short note about what it found in the logs".split(" ");
/** ~`bytes` characters of prose, different per `seed` (so token counts are not one cached text). */
function prose(seed: number, bytes: number): string {
  let text = `#${seed}`;
  for (let index = seed; text.length < bytes; index = (index * 31 + 7) % 9973) text += " " + words[index % words.length];
  return text.slice(0, bytes);
}

function textMessage(id: string, role: Role, text: string): Message {
  return create(MessageSchema, { id, role, parts: [{ kind: { case: "text", value: { text } } }] });
}

/** A tool round: the assistant's call and a result of `resultBytes`. */
function toolRound(id: string, resultBytes: number): Message[] {
  const call = `call-${id}`;
  return [
    create(MessageSchema, { id: `${id}-a`, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: call, name: "read_file", arguments: { data: `{"path":"src/${id}.ts"}` } } } }] }),
    create(MessageSchema, { id: `${id}-r`, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: call, name: "read_file", payload: { text: prose(id.length * 7919, resultBytes) } } } }] }),
  ];
}

const append = (messages: Message[]): Delta => create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages } } });

/** The conversation's messages, `count` of them: agent = alternating ~1 KB user/assistant texts; coding = a user text then a tool round with a 20 KB result, repeated. */
function* conversationMessages(profile: "agent" | "coding", prefix: string, count: number): Generator<Message> {
  for (let index = 0; index < count; ) {
    if (profile === "agent" || index % 3 === 0 || count - index < 2) {
      yield textMessage(`${prefix}-${index}`, index % 2 === 0 || profile === "coding" ? Role.USER : Role.ASSISTANT, prose(index, 1_000));
      index++;
    } else {
      yield* toolRound(`${prefix}-${index}`, 20_000);
      index += 2;
    }
  }
}

/** The batch of turn `turn`: agent = one ~1 KB user message; coding = every other turn a tool round with a 20 KB result. */
function turnDelta(profile: "agent" | "coding", prefix: string, turn: number): Delta {
  if (profile === "coding" && turn % 2 === 1) return create(DeltaSchema, { operation: { case: "appendToolRound", value: { assistant: toolRound(`${prefix}-t${turn}`, 20_000)[0], results: [toolRound(`${prefix}-t${turn}`, 20_000)[1]!] } } });
  return append([textMessage(`${prefix}-t${turn}`, Role.USER, prose(100_000 + turn, 1_000))]);
}

const compileRequest = (conversationId: string) =>
  Buffer.from(
    toBinary(
      CompileRequestSchema,
      create(CompileRequestSchema, { conversationId, budget: { maxTokens: 8_000n }, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" } }),
    ),
  );
const commitRequest = (request: MessageInitShape<typeof CommitRequestSchema>) => Buffer.from(toBinary(CommitRequestSchema, create(CommitRequestSchema, request)));

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
};
const elapsedMs = (since: bigint) => Number(process.hrtime.bigint() - since) / 1e6;
const ms = (value: number) => `${value.toFixed(2)} ms`;
const kb = (bytes: number) => `${(bytes / 1024).toFixed(1)} KB`;
const verdict = (met: boolean) => (met ? "met" : "NOT met");

interface SizeResult {
  store: string;
  profile: "agent" | "coding";
  size: number;
  turns: number;
  p50: number;
  p99: number;
  commitP50: number;
  compileP50: number;
  responseBytes: number;
  renderedBytes: number;
  rssBytes: number;
  /** Redis only: bytes Redis received per append commit, and the appended message's encoded size. */
  written?: { perCommit: number; messageBytes: number };
  /** Agent profile: the same turn as one RPC (a Compile carrying the append in `commit.deltas`). */
  oneRpcP50?: number;
}

const redis = await startRedis();
// The store-commit lines alone (bench/store-commits.ts), without the sidecars' turns.
if (process.env.CONTEXTD_SCALE_ONLY === "store-commits") {
  try {
    console.log(`load average at start: ${loadavg().map((value) => value.toFixed(2)).join(" / ")} (1/5/15 min; the cores are shared with other work)`);
    await storeCommitsAtScale(redis.url, agentSizes, { prose });
    console.log(`load average at end: ${loadavg().map((value) => value.toFixed(2)).join(" / ")}`);
  } finally {
    await redis.stop();
  }
  process.exit(0);
}
const raw = new Redis(redis.url);
/** How much an INFO stats counter grows while `action` runs, less the INFO calls' own traffic. */
async function counted(name: string, action: () => Promise<unknown>): Promise<number> {
  const read = async () => Number(new RegExp(`^${name}:(\\d+)`, "m").exec(await raw.info("stats"))![1]);
  const first = await read();
  const second = await read();
  await action();
  return (await read()) - second - (second - first);
}

const sidecars: [string, BuiltSidecar][] = [
  ["memory", await startBuiltSidecar([])],
  ["redis", await startBuiltSidecar(["--redis-url", redis.url])],
];
const run = Date.now();

async function buildConversation(client: MinimalGrpcClient, profile: "agent" | "coding", conversationId: string, size: number): Promise<void> {
  let batch: Message[] = [];
  let batchBytes = 0;
  const flush = async () => {
    if (batch.length === 0) return;
    await client.call(commitPath, commitRequest({ conversationId, deltas: [append(batch)]}));
    batch = [];
    batchBytes = 0;
  };
  for (const message of conversationMessages(profile, conversationId, size)) {
    batch.push(message);
    batchBytes += 1_000;
    // A batch ends on a whole unit (a tool round is appended with its result).
    if (batchBytes >= 512_000 && message.role !== Role.ASSISTANT) await flush();
  }
  await flush();
}

/**
 * 200 turns on a 100-message conversation of its own, unmeasured: a fresh sidecar's first turns
 * run before the JIT has compiled the path, and the first size measured (the 100-message anchor of
 * every ratio) came out up to 2x slower than 10,000 messages without this.
 */
async function warmUp(store: string, sidecar: BuiltSidecar): Promise<void> {
  const client = new MinimalGrpcClient(new URL(sidecar.url).host);
  const conversationId = `scale-${run}-${store}-warm-up`;
  try {
    await buildConversation(client, "agent", conversationId, 100);
    const compile = compileRequest(conversationId);
    for (let turn = 0; turn < 200; turn++) {
      await client.call(commitPath, commitRequest({ conversationId, deltas: [turnDelta("agent", conversationId, turn)] }));
      await client.call(compilePath, compile);
    }
  } finally {
    client.close();
  }
}

async function measureSize(store: string, sidecar: BuiltSidecar, profile: "agent" | "coding", size: number): Promise<SizeResult> {
  const client = new MinimalGrpcClient(new URL(sidecar.url).host);
  const conversationId = `scale-${run}-${store}-${profile}-${size}`;
  try {
    await buildConversation(client, profile, conversationId, size);
    const compile = compileRequest(conversationId);
    const turns = turnsAt(size);
    const totals: number[] = [];
    const commits: number[] = [];
    const compiles: number[] = [];
    let response: Buffer = Buffer.alloc(0);
    for (let turn = 0; turn < turns + 3; turn++) {
      const started = process.hrtime.bigint();
      await client.call(commitPath, commitRequest({ conversationId, deltas: [turnDelta(profile, conversationId, turn)]}));
      const committed = process.hrtime.bigint();
      response = await client.call(compilePath, compile);
      if (turn < 3) continue;
      totals.push(elapsedMs(started));
      commits.push(Number(committed - started) / 1e6);
      compiles.push(elapsedMs(committed));
    }
    const result = fromBinary(CompileResponseSchema, response).result!;
    let oneRpcP50: number | undefined;
    if (profile === "agent") {
      // The turn an agent makes with the clients' `turn`: one Compile that commits the append first.
      let version = fromBinary(CommitResponseSchema, await client.call(commitPath, commitRequest({ conversationId, deltas: [turnDelta(profile, conversationId, 10_000)] }))).version;
      const oneRpc: number[] = [];
      for (let turn = 0; turn < turns + 3; turn++) {
        const request = create(CompileRequestSchema, {
          conversationId,
          budget: { maxTokens: 8_000n },
          render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" },
          commit: { expectedVersion: version, deltas: [turnDelta(profile, `${conversationId}-one`, turn)] },
        });
        const started = process.hrtime.bigint();
        version = fromBinary(CompileResponseSchema, await client.call(compilePath, Buffer.from(toBinary(CompileRequestSchema, request)))).result!.committedVersion;
        if (turn >= 3) oneRpc.push(elapsedMs(started));
      }
      oneRpcP50 = percentile(oneRpc, 50);
    }
    let written: SizeResult["written"];
    if (store === "redis" && profile === "agent") {
      const commitsCounted = 10;
      const messages = Array.from({ length: commitsCounted }, (_, index) => textMessage(`${conversationId}-w${index}`, Role.USER, prose(200_000 + index, 1_000)));
      const bytes = await counted("total_net_input_bytes", async () => {
        for (const message of messages) await client.call(commitPath, commitRequest({ conversationId, deltas: [append([message])]}));
      });
      written = { perCommit: bytes / commitsCounted, messageBytes: toBinary(MessageSchema, messages[0]!).length };
    }
    return {
      store,
      profile,
      size,
      turns,
      p50: percentile(totals, 50),
      p99: percentile(totals, 99),
      commitP50: percentile(commits, 50),
      compileP50: percentile(compiles, 50),
      responseBytes: response.length,
      renderedBytes: result.rendered?.json.length ?? 0,
      rssBytes: sidecar.rssBytes(),
      written,
      oneRpcP50,
    };
  } finally {
    client.close();
  }
}

/** The least a turn can cost here: two do-nothing gRPC round trips, a bare RPUSH of ~1 KB and an LRANGE of the last 32 (~8,000 tokens of ~1 KB messages). */
async function measureFloor(answerBytes: number): Promise<{ p50: number; rttP50: number; rpushP50: number; lrangeP50: number; answerRttP50: number }> {
  const responder = await startDoNothingResponder();
  const client = new MinimalGrpcClient(responder.address);
  const bare = new Redis(redis.url);
  const key = `scale-${run}-floor`;
  const message = Buffer.from(toBinary(MessageSchema, textMessage("floor", Role.USER, prose(1, 1_000))));
  await bare.rpush(key, ...Array.from({ length: 100 }, () => message));
  const totals: number[] = [];
  const rtts: number[] = [];
  const rpushes: number[] = [];
  const lranges: number[] = [];
  const answerRtts: number[] = [];
  try {
    for (let iteration = 0; iteration < 2_000; iteration++) {
      const started = process.hrtime.bigint();
      await client.call("/grpc.health.v1.Health/Check", Buffer.alloc(0));
      const between = process.hrtime.bigint();
      await client.call("/grpc.health.v1.Health/Check", Buffer.alloc(0));
      const called = process.hrtime.bigint();
      await bare.rpush(key, message);
      const pushed = process.hrtime.bigint();
      await bare.lrangeBuffer(key, -32, -1);
      if (iteration < 200) continue;
      totals.push(elapsedMs(started));
      rtts.push(Number(between - started) / 1e6, Number(called - between) / 1e6);
      rpushes.push(Number(pushed - called) / 1e6);
      lranges.push(elapsedMs(pushed));
    }
    // The same round trip answering as many bytes as a default compile answer: what moving the
    // answer costs, which a do-nothing floor leaves out.
    for (let iteration = 0; iteration < 1_200; iteration++) {
      const started = process.hrtime.bigint();
      await client.call(`/bench.Floor/bytes/${answerBytes}`, Buffer.alloc(0));
      if (iteration >= 200) answerRtts.push(elapsedMs(started));
    }
  } finally {
    client.close();
    bare.disconnect();
    responder.stop();
  }
  return { p50: percentile(totals, 50), rttP50: percentile(rtts, 50), rpushP50: percentile(rpushes, 50), lrangeP50: percentile(lranges, 50), answerRttP50: percentile(answerRtts, 50) };
}

/**
 * A turn's parts in this process, no RPC: the commit, a load (what every stateful compile starts
 * with; for Redis a check of the cached copy against the stored version), and the compile
 * (including that load and the response's encoding), on a conversation built the same way.
 */
async function measureSplit(storeName: string, size: number): Promise<{ commit: number; load: number; compile: number; commitAlone: number }> {
  const codec = new Codec();
  const store: ConversationStore = storeName === "memory" ? new MemoryConversationStore({ codec }) : new RedisConversationStore(redis.url, { codec });
  if (store instanceof RedisConversationStore) await store.connected();
  const service = contextService({ ...composeApplication(defaultConfig, store, codec), publish: () => {}, summarizeTimeoutMs: 1_000 });
  const conversationId = `split-${run}-${storeName}-${size}`;
  try {
    let batch: Message[] = [];
    for (const message of conversationMessages("agent", conversationId, size)) {
      batch.push(message);
      if (batch.length === 500) await store.commit(conversationId, undefined, [append(batch)], "").then(() => (batch = []));
    }
    if (batch.length > 0) await store.commit(conversationId, undefined, [append(batch)], "");
    const request = fromBinary(CompileRequestSchema, compileRequest(conversationId));
    const parts = { commit: [] as number[], load: [] as number[], compile: [] as number[] };
    for (let turn = 0; turn < Math.min(20, turnsAt(size)) + 3; turn++) {
      const started = process.hrtime.bigint();
      await store.commit(conversationId, undefined, [turnDelta("agent", conversationId, turn)], "");
      const committed = process.hrtime.bigint();
      await store.load(conversationId);
      const loaded = process.hrtime.bigint();
      const response = await service.compile!(request, callWithoutDeadline);
      codec.encode(CompileResponseSchema, create(CompileResponseSchema, response as MessageInitShape<typeof CompileResponseSchema>));
      if (turn < 3) continue;
      parts.commit.push(Number(committed - started) / 1e6);
      parts.load.push(Number(loaded - committed) / 1e6);
      parts.compile.push(elapsedMs(loaded));
    }
    // The same commits back to back, no compile between them: the store's own cost, without the
    // garbage collection a compile's allocations leave for the next commit to pay.
    const alone: number[] = [];
    for (let commit = 0; commit < 20; commit++) {
      const started = process.hrtime.bigint();
      await store.commit(conversationId, undefined, [turnDelta("agent", `${conversationId}-alone`, commit)], "");
      alone.push(elapsedMs(started));
    }
    return { commit: percentile(parts.commit, 50), load: percentile(parts.load, 50), compile: percentile(parts.compile, 50), commitAlone: percentile(alone, 50) };
  } finally {
    await store.close();
  }
}

try {
  console.log(`contextd scale benchmark (node ${process.version}, redis ${redis.url})`);
  console.log(`load average at start: ${loadavg().map((value) => value.toFixed(2)).join(" / ")} (1/5/15 min; the cores are shared with other work)`);
  // 34.6 KB: the default answer at 10,000 messages (budget 8,000 tokens, OpenAI Chat) in this bench.
  const floor = await measureFloor(35_430);
  console.log(
    `floor: ${ms(floor.p50)} p50 per iteration of two do-nothing gRPC round trips (${ms(floor.rttP50)} each) + bare RPUSH of ~1 KB (${ms(floor.rpushP50)}) + LRANGE of the last 32 (${ms(floor.lrangeP50)})`,
  );
  console.log(`floor with the answer's bytes: ${ms(floor.p50 - floor.rttP50 + floor.answerRttP50)} (one of the round trips answering 34.6 KB: ${ms(floor.answerRttP50)})`);
  const results: SizeResult[] = [];
  console.log("store  profile size     turns  turn p50   turn p99   commit p50 compile p50 response  rendered  sidecar RSS  Redis bytes/commit (message)");
  for (const [store, sidecar] of sidecars) {
    await warmUp(store, sidecar);
    for (const [profile, sizes] of [["agent", agentSizes], ["coding", codingSizes]] as const) {
      for (const size of sizes) {
        const result = await measureSize(store, sidecar, profile, size);
        results.push(result);
        console.log(
          `${store.padEnd(6)} ${profile.padEnd(7)} ${size.toLocaleString("en-US").padEnd(8)} ${String(result.turns).padEnd(6)} ${ms(result.p50).padEnd(10)} ${ms(result.p99).padEnd(10)} ` +
            `${ms(result.commitP50).padEnd(10)} ${ms(result.compileP50).padEnd(11)} ${kb(result.responseBytes).padEnd(9)} ${kb(result.renderedBytes).padEnd(9)} ` +
            `${(result.rssBytes / 1024 / 1024).toFixed(0).padStart(6)} MB    ${result.written ? `${Math.round(result.written.perCommit)} B (${result.written.messageBytes} B)` : ""}`,
        );
      }
    }
  }
  console.log("in-process split of an agent turn (no RPC), p50: commit / store load / compile (with its load and encoding)");
  console.log("(sidecar RSS above is after each line, with every conversation of the earlier lines still stored)");
  const splits = new Map<string, { commit: number; load: number; compile: number; commitAlone: number }>();
  for (const store of ["memory", "redis"]) {
    for (const size of agentSizes) {
      const split = await measureSplit(store, size);
      splits.set(`${store}-${size}`, split);
      console.log(`  ${store.padEnd(6)} ${size.toLocaleString("en-US").padEnd(8)} commit ${ms(split.commit)}  load ${ms(split.load)}  compile ${ms(split.compile)}  (commit with no compile between: ${ms(split.commitAlone)})`);
    }
  }

  console.log("one-RPC turn p50 (Compile with commit.deltas, as the clients' turn helpers call it): " + results.filter((result) => result.oneRpcP50 !== undefined).map((result) => `${result.store} ${result.size.toLocaleString("en-US")} ${ms(result.oneRpcP50!)}`).join(", "));
  console.log("targets (issue 14, ratios within this run):");
  const measured = (size: number) => agentSizes.includes(size);
  const at = (store: string, profile: string, size: number) => results.find((result) => result.store === store && result.profile === profile && result.size === size)!;
  for (const [store] of sidecars) {
    const base = at(store, "agent", 100).p50;
    for (const [size, factor] of [[10_000, 1.5], [100_000, 2]] as const) {
      if (!measured(size) || !measured(100)) continue;
      const value = at(store, "agent", size).p50;
      console.log(`  ${store}: turn p50 at ${size.toLocaleString("en-US")} ${ms(value)} <= ${factor}x at 100 (${ms(base)}): ${(value / base).toFixed(2)}x, ${verdict(value <= factor * base)}`);
    }
    if (codingSizes.length < 2) continue;
    const coding = [at(store, "coding", 1_000).p50, at(store, "coding", 5_000).p50];
    console.log(`  ${store}: coding turn p50 at 5,000 ${ms(coding[1]!)} <= 2x at 1,000 (${ms(coding[0]!)}): ${(coding[1]! / coding[0]!).toFixed(2)}x, ${verdict(coding[1]! <= 2 * coding[0]!)}`);
  }
  for (const size of agentSizes) {
    const written = at("redis", "agent", size).written!;
    const limit = 2 * written.messageBytes + 1_024;
    console.log(`  redis: bytes written per one-message append at ${size.toLocaleString("en-US")}: ${Math.round(written.perCommit)} B <= 2 x ${written.messageBytes} B + 1 KB = ${limit} B: ${verdict(written.perCommit <= limit)}`);
  }
  for (const [store] of sidecars) {
    if (!measured(10_000)) continue;
    const result = at(store, "agent", 10_000);
    console.log(
      `  ${store}: compile response at 10,000 ${kb(result.responseBytes)} <= 2x its rendered body (${kb(result.renderedBytes)}): ${verdict(result.responseBytes <= 2 * result.renderedBytes)} ` +
        `(the default, lean response)`,
    );
  }
  const redisTurn = measured(10_000) ? at("redis", "agent", 10_000).p50 : Number.NaN;
  if (measured(10_000)) console.log(`  redis: turn p50 at 10,000 ${ms(redisTurn)} <= floor + 1.5 ms (${ms(floor.p50 + 1.5)}): ${verdict(redisTurn <= floor.p50 + 1.5)}`);
  for (const store of ["memory", "redis"]) {
    for (const size of [10_000, 100_000].filter(measured)) {
      const split = splits.get(`${store}-${size}`)!;
      const side = split.compile > split.commit + split.load ? "compile" : "store";
      console.log(`  ${store} at ${size.toLocaleString("en-US")}, in process: commit ${ms(split.commit)} + load ${ms(split.load)} vs compile ${ms(split.compile)}: the ${side} side dominates`);
    }
  }
  await storeCommitsAtScale(redis.url, agentSizes, { prose });
  console.log(`load average at end: ${loadavg().map((value) => value.toFixed(2)).join(" / ")}`);
} finally {
  raw.disconnect();
  for (const [, sidecar] of sidecars) await sidecar.stop();
  await redis.stop();
}
