// What a `remove_messages` commit costs as a conversation grows, and what the commit after it
// costs, per store, beside the anchor in the same run: a one-message append to the same
// conversation. Each conversation is built with 1,000-message commits of ~200-byte messages; then,
// 7 times each (the median printed): an append; a removal of one message near the head (the 11th,
// then the next: what trimming frameworks send, LangGraph's RemoveMessage among them); an append
// right after that removal; and a removal of the middle message. The stores keep a segment as a
// list or rows in order, so a removal rewrites the shorter side of it (docs/stores.md): near the
// head the 10 messages before it, in the middle half the conversation.
// Run with `npm run bench:removal`; CONTEXTD_REMOVAL_SIZES=1000,10000 and
// CONTEXTD_REMOVAL_STORES=memory,redis,postgres choose fewer. Redis, Postgres and this process
// share the machine's cores: compare the lines of one run, with the load average printed beside them.
import { create } from "@bufbuild/protobuf";
import { loadavg } from "node:os";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment } from "#gen/contextd/v1/state_pb";
import type { ConversationStore } from "../src/store/conversation-store.js";
import { MemoryConversationStore } from "../src/store/memory-conversation-store.js";
import { PostgresConversationStore } from "../src/store/postgres-conversation-store.js";
import { RedisConversationStore } from "../src/store/redis-conversation-store.js";
import { startPostgres } from "../test/support/postgres.js";
import { startRedis } from "../test/support/redis.js";

const sizes = (process.env.CONTEXTD_REMOVAL_SIZES ?? "1000,10000,100000").split(",").map(Number);
const stores = (process.env.CONTEXTD_REMOVAL_STORES ?? "memory,redis,postgres").split(",");
const rounds = 7;

const text = (id: string, body: string): Message => create(MessageSchema, { id, role: Role.USER, parts: [{ kind: { case: "text", value: { text: body } } }] });
const append = (...messages: Message[]) => create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages } } });
const remove = (id: string) => create(DeltaSchema, { operation: { case: "removeMessages", value: { segment: Segment.HISTORY, ids: [id] } } });
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

async function measure(name: string, store: ConversationStore, size: number): Promise<void> {
  const id = `removal-${size}`;
  let version = 0n;
  for (let from = 0; from < size; from += 1_000) {
    const batch = Array.from({ length: Math.min(1_000, size - from) }, (_, index) => text(`m${from + index}`, "x".repeat(200)));
    version = (await store.commit(id, version, [append(...batch)], "")).version;
  }
  const timed = async (deltas: Parameters<ConversationStore["commit"]>[2]) => {
    const started = performance.now();
    version = (await store.commit(id, version, deltas, "")).version;
    return performance.now() - started;
  };
  // Warm-up: one of each.
  await timed([append(text("w0", "warm"))]);
  await timed([remove("m10")]);
  const lines: Record<string, number[]> = { append: [], "remove near the head": [], "append after it": [], "remove the middle one": [] };
  for (let round = 0; round < rounds; round++) {
    lines.append!.push(await timed([append(text(`a${round}`, "y"))]));
    lines["remove near the head"]!.push(await timed([remove(`m${11 + round}`)]));
    lines["append after it"]!.push(await timed([append(text(`b${round}`, "y"))]));
    lines["remove the middle one"]!.push(await timed([remove(`m${Math.floor(size / 2) + round}`)]));
  }
  const figures = Object.entries(lines).map(([line, values]) => `${line} ${median(values).toFixed(2)} ms`);
  console.log(`${name.padEnd(9)} ${String(size).padStart(6)} messages: ${figures.join(", ")} (load ${loadavg()[0]!.toFixed(1)})`);
}

const redis = stores.includes("redis") ? await startRedis() : undefined;
const postgres = stores.includes("postgres") ? await startPostgres() : undefined;
try {
  for (const name of stores) {
    const store: ConversationStore =
      name === "memory" ? new MemoryConversationStore() : name === "redis" ? new RedisConversationStore(redis!.url) : new PostgresConversationStore(postgres!.url);
    if (name !== "memory") await (store as RedisConversationStore | PostgresConversationStore).connected();
    try {
      for (const size of sizes) await measure(name, store, size);
    } finally {
      await store.close();
    }
  }
} finally {
  await redis?.stop();
  await postgres?.destroy();
}
