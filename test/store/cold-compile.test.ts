import { create, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompileRequestSchema, CompileResultSchema, EstimatorKind, type CompileRequest, type CompileResult } from "#gen/contextd/v1/compile_pb";
import { MessageSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import type { ObserverEvent } from "#gen/contextd/v1/telemetry_pb";
import type { Delta } from "#gen/contextd/v1/state_pb";
import { Compiler } from "../../src/application/compiler.js";
import { HistoryFactsCache } from "../../src/application/history-facts-cache.js";
import { Codec, defaultCodecLimits } from "../../src/codec/codec.js";
import type { TokenEstimator } from "../../src/core/tokens/estimator.js";
import { TokenCountCache } from "../../src/core/tokens/token-count-cache.js";
import type { ConversationStore } from "../../src/store/conversation-store.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { PostgresConversationStore } from "../../src/store/postgres-conversation-store.js";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { storedTokenEstimator } from "../../src/server/operations/stored-token-estimator.js";
import { startPostgres, type PostgresProcess } from "../support/postgres.js";
import { startRedis, type RedisProcess } from "../support/redis.js";
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";
import { randomSource } from "../support/random-messages.js";
import { appendHistory, delta, textMessage } from "./fixtures.js";

let o200k: TokenEstimator;
let redis: RedisProcess;
let redisCluster: RedisCluster;
let postgres: PostgresProcess;
beforeAll(async () => {
  o200k = (await storedTokenEstimator("openai_chat:gpt-4o"))!;
  [redis, redisCluster, postgres] = await Promise.all([startRedis(), startRedisCluster(), startPostgres()]);
}, 30_000);
afterAll(async () => {
  await Promise.all([redis?.stop(), redisCluster?.stop(), postgres?.destroy()]);
});

let counter = 0;
const freshId = (label: string) => `${label}-${process.pid}-${++counter}`;
const words = "the agent reads a file runs the tests and writes a note about what it found in the logs".split(" ");

/** One compile's outcome as bytes (the result without stage timings) and its events (without durations). */
async function compiled(compiler: Compiler, request: CompileRequest): Promise<{ result: Buffer; events: string[] }> {
  const events: ObserverEvent[] = [];
  const result: CompileResult = await compiler.compileAndCommit(request, { observer: (event) => events.push(event) });
  return {
    result: Buffer.from(toBinary(CompileResultSchema, { ...result, stageTimings: [] })),
    // Durations aside (`durationNs`, a stage's timing), every event as it was emitted.
    events: events.map((event) => `${event.event.case}:${JSON.stringify(event.event.value, (key, value) => (/^duration/i.test(key) ? undefined : typeof value === "bigint" ? String(value) : value))}`),
  };
}

/** Batches of a conversation: texts of random lengths, tool rounds (some with two results), assistant runs without a user. */
function batches(seed: number, size: number, prefix = ""): Delta[][] {
  const random = randomSource(seed);
  const text = () => Array.from({ length: 3 + Math.floor(random() * 80) }, () => words[Math.floor(random() * words.length)]).join(" ");
  const out: Delta[][] = [];
  let messages: Message[] = [];
  for (let index = 0; index < size; index++) {
    const roll = random();
    if (roll < 0.15) {
      if (messages.length > 0) out.push([appendHistory(...messages)]);
      messages = [];
      const calls = random() < 0.3 ? [`${prefix}c${index}a`, `${prefix}c${index}b`] : [`${prefix}c${index}`];
      out.push([
        delta({
          case: "appendToolRound",
          value: {
            assistant: create(MessageSchema, { id: `${prefix}a${index}`, role: Role.ASSISTANT, parts: calls.map((id) => ({ kind: { case: "toolCall" as const, value: { id, name: "read", arguments: { data: `{"n":${index}}` } } } })) }),
            results: calls.map((id, position) => create(MessageSchema, { id: `${prefix}r${index}-${position}`, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: id, name: "read", payload: { text: text() } } } }] })),
          },
        }),
      ]);
    } else {
      messages.push(textMessage(`${prefix}m${index}`, roll < 0.6 ? Role.USER : Role.ASSISTANT, text()));
    }
    if (messages.length >= 40) {
      out.push([appendHistory(...messages)]);
      messages = [];
    }
  }
  if (messages.length > 0) out.push([appendHistory(...messages)]);
  return out;
}

const request = (conversationId: string, maxTokens: bigint, trimLatestUserMessage = false) =>
  create(CompileRequestSchema, { conversationId, budget: { maxTokens, trimLatestUserMessage }, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" } });

const compilerOn = (store: ConversationStore, codec?: Codec) =>
  new Compiler({ store, tokenCounts: new TokenCountCache(undefined, codec?.storedTokenCounts), historyFacts: new HistoryFactsCache() });

describe.each([
  ["redis", (codec: Codec) => new RedisConversationStore(redis.url, { codec })],
  ["redis cluster", (codec: Codec) => new RedisConversationStore({ clusterNodes: redisCluster.addresses.slice(0, 1) }, { codec })],
  ["postgres", (codec: Codec) => new PostgresConversationStore(postgres.url, { codec })],
] as const)("%s store: a compile on a process that never saw the conversation", (_name, open) => {
  it("reads and counts only the tail, and equals the writer's compile (result and events) with budgets that trim and that do not", async () => {
    const writer = open(new Codec(defaultCodecLimits, o200k));
    try {
      await writer.connected();
      let fromTail = 0;
      let compiles = 0;
      for (const seed of [1, 2, 3]) {
        const id = freshId(`cold-${seed}`);
        for (const batch of batches(seed, 900)) await writer.commit(id, undefined, batch, "");
        if (seed === 3) {
          // The tail ends in assistant turns and an open round: the latest user message lies further back.
          await writer.commit(id, undefined, [appendHistory(...Array.from({ length: 30 }, (_, index) => textMessage(`late${index}`, Role.ASSISTANT, words.join(" "))))], "");
          await writer.commit(id, undefined, [delta({ case: "appendAssistant", value: { toolCalls: [{ id: "open-call", name: "read", arguments: { data: "{}" } }] } })], "");
        }
        for (const [maxTokens, trim] of [[300n, false], [2_000n, false], [2_000n, true], [8_000n, false], [1_000_000n, false]] as const) {
          const warm = await compiled(compilerOn(writer), request(id, maxTokens, trim));
          const codec = new Codec(defaultCodecLimits, o200k);
          const fresh = open(codec);
          try {
            await fresh.connected();
            const compiler = compilerOn(fresh, codec);
            const tokenCounts = (compiler as unknown as { dependencies: { tokenCounts: TokenCountCache } }).dependencies.tokenCounts;
            const cold = await compiled(compiler, request(id, maxTokens, trim));
            const where = `seed ${seed} budget ${maxTokens} trim ${trim}`;
            expect(cold.result.equals(warm.result), where).toBe(true);
            expect(cold.events, where).toEqual(warm.events);
            compiles++;
            if (compiler.tailCompiles === 1) {
              fromTail++;
              // What was counted: the compile's own few texts, not the history (the tail's counts came stored).
              expect(tokenCounts.keptTexts, where).toBeLessThan(10);
            }
            if (maxTokens === 1_000_000n) expect(compiler.tailCompiles, `${where}: everything fits, the whole history is read`).toBe(0);
            if (maxTokens <= 2_000n) {
              expect(compiler.tailCompiles, `${where}: the budget trims`).toBe(1);
              // With the whole state cached (a commit or a load read it), a compiler without the facts takes the tail of the cached copy.
              await fresh.load(id);
              const cachedCompiler = compilerOn(fresh, codec);
              const fromCache = await compiled(cachedCompiler, request(id, maxTokens, trim));
              expect(fromCache.result.equals(warm.result), `${where}, cached copy`).toBe(true);
              expect(fromCache.events, `${where}, cached copy`).toEqual(warm.events);
              expect(cachedCompiler.tailCompiles, `${where}, cached copy`).toBe(1);
            }
          } finally {
            await fresh.close();
          }
        }
      }
      expect(fromTail).toBeGreaterThanOrEqual(9);
      expect(compiles).toBe(15);
    } finally {
      await writer.close();
    }
  }, 120_000);

  it("reads the whole state where the stored facts cannot say: after a compaction, with another estimator, with a current turn", async () => {
    const writer = open(new Codec(defaultCodecLimits, o200k));
    try {
      await writer.connected();
      const id = freshId("cold-fallback");
      for (const batch of batches(9, 600)) await writer.commit(id, undefined, batch, "");
      const check = async (label: string, compileRequest: CompileRequest, expectTail: boolean) => {
        const warm = await compiled(compilerOn(writer), compileRequest);
        const codec = new Codec(defaultCodecLimits, o200k);
        const fresh = open(codec);
        try {
          await fresh.connected();
          const compiler = compilerOn(fresh, codec);
          const cold = await compiled(compiler, compileRequest);
          expect(cold.result.equals(warm.result), label).toBe(true);
          expect(compiler.tailCompiles, label).toBe(expectTail ? 1 : 0);
        } finally {
          await fresh.close();
        }
      };
      await check("stored facts valid", request(id, 1_000n), true);
      await check("chars estimator", create(CompileRequestSchema, { conversationId: id, budget: { maxTokens: 1_000n, estimator: { kind: EstimatorKind.CHARS } } }), false);
      await check("current turn", create(CompileRequestSchema, { conversationId: id, budget: { maxTokens: 1_000n }, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" }, currentTurn: { raw: textMessage("turn-1", Role.USER, "and now?") } }), false);
      // A compaction keeps the tail: its entries' facts are stale until the history is written whole again.
      const state = await writer.load(id);
      await writer.commit(id, undefined, [delta({ case: "compact", value: { throughMessageId: state.history[100]!.id, summary: textMessage("sum", Role.ASSISTANT, "earlier: reading files") } })], "");
      await check("after a compaction", request(id, 1_000n), false);
      await writer.commit(id, undefined, [appendHistory(textMessage("after", Role.USER, "more"))], "");
      await check("after a compaction and an append (the cut lies among the kept entries)", request(id, 1_000n), false);
      // The appends after it carry facts again (computed once over the compacted list): once the cut lies among them, the tail is enough.
      for (const batch of batches(10, 300, "more-")) await writer.commit(id, undefined, batch, "");
      await check("after a compaction and 300 more messages", request(id, 1_000n), true);
    } finally {
      await writer.close();
    }
  }, 120_000);
});

describe("memory store: a compile without the conversation's facts", () => {
  it("takes the tail of the state it keeps (running facts kept per history list), equal to a warm compile, also after a compaction and appends", async () => {
    const codec = new Codec(defaultCodecLimits, o200k);
    const store = new MemoryConversationStore({ codec });
    const id = freshId("cold-memory");
    for (const batch of batches(4, 900)) await store.commit(id, undefined, batch, "");
    const check = async (label: string, expectTail: boolean) => {
      for (const [maxTokens, trim] of [[300n, false], [2_000n, true], [1_000_000n, false]] as const) {
        const warm = await compiled(compilerOn(store, codec), request(id, maxTokens, trim));
        const compiler = compilerOn(store, codec);
        const cold = await compiled(compiler, request(id, maxTokens, trim));
        expect(cold.result.equals(warm.result), `${label} ${maxTokens}`).toBe(true);
        expect(cold.events, `${label} ${maxTokens}`).toEqual(warm.events);
        expect(compiler.tailCompiles, `${label} ${maxTokens}`).toBe(expectTail && maxTokens < 1_000_000n ? 1 : 0);
      }
    };
    await check("appended", true);
    const state = await store.load(id);
    const through = state.history.slice(300).find((message) => message.role === Role.USER)!;
    await store.commit(id, undefined, [delta({ case: "compact", value: { throughMessageId: through.id, summary: textMessage("sum", Role.ASSISTANT, "earlier: reading files") } })], "");
    await check("compacted", false);
    await store.commit(id, undefined, [appendHistory(textMessage("after", Role.USER, "more"))], "");
    await check("compacted, then appended", true);
  });
});
