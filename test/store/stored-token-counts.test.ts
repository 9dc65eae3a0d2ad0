import { create, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompileRequestSchema, CompileResultSchema, type CompileResult } from "#gen/contextd/v1/compile_pb";
import { MessageSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { Compiler } from "../../src/application/compiler.js";
import { HistoryFactsCache } from "../../src/application/history-facts-cache.js";
import { Codec, defaultCodecLimits } from "../../src/codec/codec.js";
import { maxCountedCharacters } from "../../src/codec/stored-token-counts.js";
import { createEstimator, type TokenEstimator } from "../../src/core/tokens/estimator.js";
import { TokenCountCache } from "../../src/core/tokens/token-count-cache.js";
import type { ConversationStore } from "../../src/store/conversation-store.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { PostgresConversationStore } from "../../src/store/postgres-conversation-store.js";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { storedTokenEstimator } from "../../src/server/operations/stored-token-estimator.js";
import { startPostgres, type PostgresProcess } from "../support/postgres.js";
import { startRedis, type RedisProcess } from "../support/redis.js";
import { appendHistory, delta, textMessage } from "./fixtures.js";

let o200k: TokenEstimator;
let redis: RedisProcess;
let postgres: PostgresProcess;
beforeAll(async () => {
  o200k = (await storedTokenEstimator("openai_chat:gpt-4o"))!;
  [redis, postgres] = await Promise.all([startRedis(), startPostgres()]);
}, 30_000);
afterAll(async () => {
  await Promise.all([redis?.stop(), postgres?.destroy()]);
});

let counter = 0;
const freshId = (label: string) => `${label}-${process.pid}-${++counter}`;

const toolRound = (id: string): Message[] => [
  create(MessageSchema, { id: `${id}-a`, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: `call-${id}`, name: "read_file", arguments: { data: `{"path":"src/${id}.ts"}` } } } }] }),
  create(MessageSchema, { id: `${id}-r`, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: `call-${id}`, name: "read_file", payload: { text: `contents of ${id} `.repeat(20) } } } }] }),
];

/** A history of texts and tool rounds, and one message too long for a commit to count. */
function history(size: number): Message[] {
  const messages: Message[] = [];
  for (let index = 0; messages.length < size; index++) {
    if (index % 5 === 4) messages.push(...toolRound(`t${index}`));
    else messages.push(textMessage(`m${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, `message ${index}: the agent reads the logs and writes a note `.repeat(1 + (index % 7))));
  }
  messages.push(textMessage("long", Role.ASSISTANT, "word ".repeat(maxCountedCharacters / 5 + 10)), textMessage("last", Role.USER, "and now?"));
  return messages;
}

const compileRequest = (conversationId: string, maxTokens: bigint) =>
  create(CompileRequestSchema, { conversationId, budget: { maxTokens }, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" } });

/** A compile's result as bytes, without the stage timings (durations). */
const comparable = (result: CompileResult) => Buffer.from(toBinary(CompileResultSchema, { ...result, stageTimings: [] }));

describe("StoredTokenCounts: the count record in a stored entry", () => {
  it("writes the count of the configured estimator before the message and reads both back; a plain encoding reads as itself", () => {
    const codec = new Codec(defaultCodecLimits, o200k);
    const message = textMessage("a", Role.USER, "how many tokens is this?");
    const entry = codec.encodeStoredEntry(message);
    const plain = toBinary(MessageSchema, message);
    expect(entry.length).toBeGreaterThan(plain.length);
    expect(Buffer.from(entry.subarray(entry.length - plain.length)).equals(Buffer.from(plain))).toBe(true);
    const reader = new Codec(defaultCodecLimits, o200k);
    const decoded = reader.decodeStoredEntry(entry);
    // No unknown field reaches the message: its encoding is the original's.
    expect(Buffer.from(toBinary(MessageSchema, decoded)).equals(Buffer.from(plain))).toBe(true);
    expect(reader.storedTokenCounts.countOf(decoded, o200k.cacheKey)).toBe(o200k.countMessage(message));
    expect(reader.storedTokenCounts.countOf(decoded, "chars")).toBeUndefined();
    const fromPlain = reader.decodeStoredEntry(plain);
    expect(reader.storedTokenCounts.countOf(fromPlain, o200k.cacheKey)).toBeUndefined();
  });

  it("ignores a record of another estimator, writes none without an estimator or for a message too long to count, and refuses a broken record", async () => {
    const chars = await createEstimator(undefined, Provider.UNSPECIFIED, "e", undefined, "");
    const message = textMessage("a", Role.USER, "counted by another estimator");
    const other = new Codec(defaultCodecLimits, chars).encodeStoredEntry(message);
    const reader = new Codec(defaultCodecLimits, o200k);
    expect(reader.storedTokenCounts.countOf(reader.decodeStoredEntry(other), o200k.cacheKey)).toBeUndefined();
    expect(Buffer.from(new Codec().encodeStoredEntry(message)).equals(Buffer.from(toBinary(MessageSchema, message)))).toBe(true);
    const long = textMessage("b", Role.USER, "x".repeat(maxCountedCharacters + 1));
    expect(Buffer.from(reader.encodeStoredEntry(long)).equals(Buffer.from(toBinary(MessageSchema, long)))).toBe(true);
    const entry = reader.encodeStoredEntry(message);
    expect(() => reader.decodeStoredEntry(entry.subarray(0, 5))).toThrow(/token count record/);
    const wrongTag = Uint8Array.from(entry);
    wrongTag[3] = 0x38;
    expect(() => reader.decodeStoredEntry(wrongTag)).toThrow(/unknown field tag 56/);
  });

  it("refuses a --stored-token-estimator that names no provider, naming the flag and the choices", async () => {
    await expect(storedTokenEstimator("gpt-4o")).rejects.toThrow(/--stored-token-estimator "gpt-4o": want none or provider:model with a provider of .*openai_chat/);
    await expect(storedTokenEstimator("nobody:gpt-4o")).rejects.toThrow(/want none or provider:model/);
    expect(await storedTokenEstimator("none")).toBeUndefined();
  });
});

describe.each([
  ["redis", (codec: Codec) => new RedisConversationStore(redis.url, { codec })],
  ["postgres", (codec: Codec) => new PostgresConversationStore(postgres.url, { codec })],
] as const)("%s store: token counts stored at commit", (_name, open) => {
  it("a fresh process reads every count the writer stored (not the one too long), and its first compile counts nothing yet equals the writer's, trimmed or not", async () => {
    const writerCodec = new Codec(defaultCodecLimits, o200k);
    const writer = open(writerCodec);
    const freshCodec = new Codec(defaultCodecLimits, o200k);
    const fresh = open(freshCodec);
    const otherCodec = new Codec(defaultCodecLimits, undefined);
    const other = open(otherCodec);
    try {
      await Promise.all([writer.connected(), fresh.connected(), other.connected()]);
      const id = freshId("stored-counts");
      const messages = history(400);
      await writer.commit(id, undefined, [appendHistory(...messages.slice(0, 300))], "");
      await writer.commit(id, undefined, [appendHistory(...messages.slice(300)), delta({ case: "appendMessages", value: { segment: Segment.SYSTEM, messages: [textMessage("s", Role.SYSTEM, "be brief")] } })], "");
      const loaded = await fresh.load(id);
      expect(loaded.history).toHaveLength(messages.length);
      loaded.history.forEach((message, index) => {
        const stored = freshCodec.storedTokenCounts.countOf(message, o200k.cacheKey);
        if (message.id === "long") expect(stored, "the long message").toBeUndefined();
        else expect(stored, `message ${index}`).toBe(o200k.countMessage(message));
      });
      for (const maxTokens of [2_000n, 1_000_000n]) {
        const compileWith = async (store: ConversationStore, known?: Codec) => {
          const tokenCounts = new TokenCountCache(undefined, known?.storedTokenCounts);
          const compiler = new Compiler({ store, tokenCounts, historyFacts: new HistoryFactsCache() });
          const result = await compiler.compileAndCommit(compileRequest(id, maxTokens), { observer: () => {} });
          return { result, tokenCounts };
        };
        const warm = await compileWith(writer);
        const cold = await compileWith(fresh, freshCodec);
        const unknown = await compileWith(other, otherCodec);
        expect(comparable(cold.result).equals(comparable(warm.result)), `budget ${maxTokens}`).toBe(true);
        expect(comparable(unknown.result).equals(comparable(warm.result)), `budget ${maxTokens}, no stored counts`).toBe(true);
        // Every history message but the long one came with its count: the text table counted only the long one, the system message and the compile's own blocks.
        expect(cold.tokenCounts.knownHits).toBeGreaterThanOrEqual(messages.length - 1);
        expect(unknown.tokenCounts.knownHits).toBe(0);
        expect(cold.tokenCounts.keptTexts).toBeLessThan(20);
        expect(unknown.tokenCounts.keptTexts).toBeGreaterThan(300);
      }
    } finally {
      await Promise.all([writer.close(), fresh.close(), other.close()]);
    }
  });
});

describe("memory store: token counts noted at commit", () => {
  it("counts what a commit wrote with the codec's estimator, so a compile without kept facts takes the counts", async () => {
    const codec = new Codec(defaultCodecLimits, o200k);
    const store = new MemoryConversationStore({ codec });
    const id = freshId("memory-counts");
    await store.commit(id, undefined, [appendHistory(...history(200))], "");
    const state = await store.load(id);
    for (const message of state.history) if (message.id !== "long") expect(codec.storedTokenCounts.countOf(message, o200k.cacheKey)).toBe(o200k.countMessage(message));
    const tokenCounts = new TokenCountCache(undefined, codec.storedTokenCounts);
    await new Compiler({ store, tokenCounts }).compileAndCommit(compileRequest(id, 1_000n), { observer: () => {} });
    expect(tokenCounts.knownHits).toBeGreaterThanOrEqual(state.history.length - 1);
  });
});
