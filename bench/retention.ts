// What retention costs per store, beside its anchor in the same run: a one-message commit to a
// conversation that expires (idle TTL 1 h: PEXPIREAT on its keys and a ZADD on Redis, an UPDATE in
// the Postgres commit) beside the same commit to one that does not; a delete of a conversation of
// 100, 1,000 and 10,000 messages beside a Clear of the same; and a prune of 1,000 to 100,000
// messages down to 100 (the engine alone) beside a compact through the same message. Medians of
// 20 calls (commits: of 400 of each kind, interleaved). Run with `npm run bench:retention`. Redis, Postgres and this process
// share the machine's cores: compare the lines of one run, with the load average beside them.
import { create } from "@bufbuild/protobuf";
import { loadavg } from "node:os";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, DeltaSchema, type Delta } from "#gen/contextd/v1/state_pb";
import { applyDeltas } from "../src/core/deltas/apply-deltas.js";
import type { ConversationStore } from "../src/store/conversation-store.js";
import { MemoryConversationStore } from "../src/store/memory-conversation-store.js";
import { PostgresConversationStore } from "../src/store/postgres-conversation-store.js";
import { RedisConversationStore } from "../src/store/redis-conversation-store.js";
import { startPostgres } from "../test/support/postgres.js";
import { startRedis } from "../test/support/redis.js";

const load = () => `(load ${loadavg()[0]!.toFixed(1)})`;

function message(index: number) {
  return create(MessageSchema, { id: `m${index}`, role: index % 2 === 0 ? Role.USER : Role.ASSISTANT, parts: [{ kind: { case: "text", value: { text: `turn ${index} `.repeat(20) } } }] });
}

function append(from: number, count: number): Delta {
  return create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: 2, messages: Array.from({ length: count }, (_, index) => message(from + index)) } } });
}

async function medianMs(calls: number, run: (call: number) => Promise<unknown> | unknown): Promise<number> {
  const times: number[] = [];
  for (let call = 0; call < calls; call++) {
    const start = process.hrtime.bigint();
    await run(call);
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  times.sort((a, b) => a - b);
  return times[times.length >> 1]!;
}

async function measureStore(name: string, open: () => Promise<ConversationStore>): Promise<void> {
  const store = await open();
  const prefix = `bench-retention-${process.pid}/`;
  try {
    const ttl = create(DeltaSchema, { operation: { case: "setMetadata", value: { idleTtlMs: 3_600_000n } } });
    await store.commit(prefix + "plain", 0n, [append(0, 1)], "");
    await store.commit(prefix + "expiring", 0n, [append(0, 1), ttl], "");
    // Interleaved, so both kinds see the same load over the run.
    const times: Record<"plain" | "expiring", number[]> = { plain: [], expiring: [] };
    for (let call = 1; call <= 400; call++) {
      for (const kind of call % 2 === 0 ? (["plain", "expiring"] as const) : (["expiring", "plain"] as const)) {
        const start = process.hrtime.bigint();
        await store.commit(prefix + kind, undefined, [append(call, 1)], "");
        times[kind].push(Number(process.hrtime.bigint() - start) / 1e6);
      }
    }
    const median = (values: number[]) => values.sort((a, b) => a - b)[values.length >> 1]!;
    const [plain, expiring] = [median(times.plain), median(times.expiring)];
    console.log(`${name.padEnd(8)} one-message commit: without TTL ${plain.toFixed(3)} ms (anchor), with TTL ${expiring.toFixed(3)} ms ${load()}`);
    for (const size of [100, 1_000, 10_000]) {
      const seeded = async (kind: string, call: number) => {
        const id = `${prefix}${kind}-${size}-${call}`;
        for (let from = 0; from < size; from += 1_000) await store.commit(id, undefined, [append(from, Math.min(1_000, size - from))], "");
        return id;
      };
      const clears: string[] = [];
      const deletes: string[] = [];
      for (let call = 0; call < 20; call++) {
        clears.push(await seeded("clear", call));
        deletes.push(await seeded("delete", call));
      }
      const clear = await medianMs(20, (call) => store.clear(clears[call]!, undefined));
      const deleted = await medianMs(20, (call) => store.delete(deletes[call]!, undefined));
      for (const id of clears) await store.delete(id, undefined);
      console.log(`${name.padEnd(8)} ${String(size).padStart(6)} messages: Clear ${clear.toFixed(2)} ms (anchor), DeleteConversation ${deleted.toFixed(2)} ms ${load()}`);
    }
    await store.delete(prefix + "plain", undefined);
    await store.delete(prefix + "expiring", undefined);
  } finally {
    await store.close();
  }
}

// The engine alone: what a prune's measuring and its summary cost beside a compaction of the same head.
const context = { newMessageId: () => "summary" };
for (const size of [1_000, 10_000, 100_000]) {
  const state = create(ConversationStateSchema, { conversationId: "c", history: Array.from({ length: size }, (_, index) => message(index)) });
  const summary = create(MessageSchema, { role: Role.ASSISTANT, parts: [{ kind: { case: "text", value: { text: "earlier" } } }] });
  const compact = create(DeltaSchema, { operation: { case: "compact", value: { summary, throughMessageId: `m${size - 101}` } } });
  const prune = create(DeltaSchema, { operation: { case: "pruneHistory", value: { maxMessages: 100 } } });
  const byBytes = create(DeltaSchema, { operation: { case: "pruneHistory", value: { maxBytes: 100n * 200n } } });
  const compacted = await medianMs(20, () => applyDeltas(state, [compact], context));
  const pruned = await medianMs(20, () => applyDeltas(state, [prune], context));
  const prunedBytes = await medianMs(20, () => applyDeltas(state, [byBytes], context));
  console.log(`engine   ${String(size).padStart(6)} messages to 100: compact ${compacted.toFixed(2)} ms (anchor), prune_history max_messages ${pruned.toFixed(2)} ms, max_bytes ${prunedBytes.toFixed(2)} ms ${load()}`);
}

await measureStore("memory", async () => new MemoryConversationStore());
const redis = await startRedis();
try {
  await measureStore("redis", async () => {
    const store = new RedisConversationStore(redis.url);
    if (!(await store.connected())) throw new Error("redis store did not connect");
    return store;
  });
} finally {
  await redis.stop();
}
const postgres = await startPostgres();
try {
  await measureStore("postgres", async () => {
    const store = new PostgresConversationStore(postgres.url);
    if (!(await store.connected())) throw new Error("postgres store did not connect");
    return store;
  });
} finally {
  await postgres.destroy();
}
