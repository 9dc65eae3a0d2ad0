/**
 * `npm run bench:read-messages`: what one ReadMessages page costs the sidecar once a conversation's
 * state is loaded (the store's cached decoded state), at 1,000, 10,000 and 100,000 stored ~500-byte
 * messages: the last 10 messages, and a default 4 MiB page from the middle, each read and then
 * encoded as the server answers (the codec, with kept encodings). Beside them, the GetState size
 * check (`assertStateFits`, which a GetState of the whole state pays before its answer is encoded).
 * In-process on the memory store, as the service calls it; the first read of each case is not
 * counted (it encodes and keeps the messages' bytes once). The point: the page's cost follows the
 * page, not the conversation.
 *
 * Then on Redis (a redis-server this script starts): the last 10 messages read by a process that
 * never loaded the conversation ("cold": a new store, codec and MessageWindows each time, as a
 * fresh sidecar has), beside the same read again in one process ("warm"; a window
 * read is not cached, so it is the script's round trip again unless a load cached the state), the bare store read it makes
 * (`readWindow` of the last 10 with the other segments) and what the first read cost when
 * ReadMessages went through `load` (the whole state, read and decoded).
 */
import { create } from "@bufbuild/protobuf";
import { MessageWindows } from "../src/application/message-windows.js";
import { assertStateFits } from "../src/application/state-size.js";
import { Codec } from "../src/codec/codec.js";
import { MemoryConversationStore } from "../src/store/memory-conversation-store.js";
import { RedisConversationStore } from "../src/store/redis-conversation-store.js";
import { startRedis } from "../test/support/redis.js";
import { ReadMessagesRequestSchema, ReadMessagesResponseSchema } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment } from "#gen/contextd/v1/state_pb";

const repeats = Number(process.env.BENCH_READ_MESSAGES_REPEATS ?? 200);
const filler = "x".repeat(500);

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

async function timed(times: number, run: () => Promise<unknown> | unknown): Promise<number> {
  await run();
  const samples: number[] = [];
  for (let index = 0; index < times; index++) {
    const started = performance.now();
    await run();
    samples.push(performance.now() - started);
  }
  return median(samples);
}

console.log(`ReadMessages per page after the state is loaded (median of ${repeats}; ms)`);
console.log("stored messages | last 10: read | last 10: encode | 4 MiB page: messages | read | encode | GetState size check");
for (const count of [1_000, 10_000, 100_000]) {
  const codec = new Codec();
  const store = new MemoryConversationStore({ codec });
  for (let start = 0; start < count; start += 10_000) {
    const messages = Array.from({ length: Math.min(10_000, count - start) }, (_, offset) =>
      create(MessageSchema, { id: `m${start + offset}`, role: Role.USER, parts: [{ kind: { case: "text", value: { text: `${start + offset} ${filler}` } } }] }),
    );
    await store.commit("c", undefined, [create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages } } })], "");
  }
  const messageBytes = (message: Parameters<Codec["encodeStoredMessage"]>[0]) => codec.encodeStoredMessage(message).byteLength;
  const windows = new MessageWindows(store, { messageBytes, messageLimitBytes: 16 * 1024 * 1024 });
  const last = create(ReadMessagesRequestSchema, { conversationId: "c", last: 10 });
  const middle = create(ReadMessagesRequestSchema, { conversationId: "c", start: BigInt(Math.floor(count / 2)) });
  const lastPage = await windows.read(last);
  const middlePage = await windows.read(middle);
  const readLast = await timed(repeats, () => windows.read(last));
  const encodeLast = await timed(repeats, () => codec.encodeEnvelopedChunks(ReadMessagesResponseSchema, lastPage));
  const pageRepeats = Math.max(5, Math.floor(repeats / 20));
  const readMiddle = await timed(pageRepeats, () => windows.read(middle));
  const encodeMiddle = await timed(pageRepeats, () => codec.encodeEnvelopedChunks(ReadMessagesResponseSchema, middlePage));
  const state = await store.load("c");
  const sizing = { messageBytes, restBytes: (loaded: typeof state) => codec.encodeStateRest(loaded).byteLength };
  const check = await timed(pageRepeats, () => {
    try {
      assertStateFits(state, 16 * 1024 * 1024, sizing);
    } catch {
      // Over the limit: refused after sizing up to the limit.
    }
  });
  const f = (ms: number) => ms.toFixed(3);
  console.log(`${count.toLocaleString("en-US")} | ${f(readLast)} | ${f(encodeLast)} | ${middlePage.messages.length} | ${f(readMiddle)} | ${f(encodeMiddle)} | ${f(check)}`);
}

const coldRepeats = Number(process.env.BENCH_READ_MESSAGES_COLD_REPEATS ?? 15);
const redis = await startRedis();
try {
  console.log("");
  console.log(`ReadMessages of the last 10 on Redis, from a process that never loaded the conversation (median of ${coldRepeats}; ms)`);
  console.log("stored messages | cold: ReadMessages | warm: ReadMessages | cold: store readWindow | cold: store load (the whole state)");
  for (const count of [1_000, 10_000, 100_000]) {
    const conversationId = `cold-${count}`;
    const writer = new RedisConversationStore(redis.url, { codec: new Codec() });
    await writer.connected();
    for (let start = 0; start < count; start += 10_000) {
      const messages = Array.from({ length: Math.min(10_000, count - start) }, (_, offset) =>
        create(MessageSchema, { id: `m${start + offset}`, role: Role.USER, parts: [{ kind: { case: "text", value: { text: `${start + offset} ${filler}` } } }] }),
      );
      await writer.commit(conversationId, undefined, [create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages } } })], "");
    }
    await writer.close();
    const last = create(ReadMessagesRequestSchema, { conversationId, last: 10 });
    // A fresh store (its own decoded-state cache), codec and windows per sample: a process that never read the conversation.
    const fresh = async () => {
      const codec = new Codec();
      const store = new RedisConversationStore(redis.url, { codec });
      await store.connected();
      const windows = new MessageWindows(store, { messageBytes: (message) => codec.encodeStoredMessage(message).byteLength, messageLimitBytes: 16 * 1024 * 1024 });
      return { store, windows };
    };
    const cold = async (run: (opened: Awaited<ReturnType<typeof fresh>>) => Promise<unknown>) => {
      const samples: number[] = [];
      for (let index = 0; index < coldRepeats; index++) {
        const opened = await fresh();
        try {
          const started = performance.now();
          await run(opened);
          samples.push(performance.now() - started);
        } finally {
          await opened.store.close();
        }
      }
      return median(samples);
    };
    const coldRead = await cold(({ windows }) => windows.read(last));
    const warmStore = await fresh();
    await warmStore.windows.read(last);
    const warmRead = await timed(repeats, () => warmStore.windows.read(last));
    await warmStore.store.close();
    const coldWindow = await cold(({ store }) => store.readWindow(conversationId, { segment: "history", count: 10, withRest: true }));
    // The whole state in one script reply can pass the store's 2 s command timeout on a loaded machine: said, not hidden.
    const coldLoad = await cold(({ store }) => store.load(conversationId)).then(
      (ms) => ms.toFixed(3),
      (error: Error) => `failed: ${error.message.slice(0, 80)}`,
    );
    const f = (ms: number) => ms.toFixed(3);
    console.log(`${count.toLocaleString("en-US")} | ${f(coldRead)} | ${f(warmRead)} | ${f(coldWindow)} | ${coldLoad}`);
  }
} finally {
  await redis.stop();
}
