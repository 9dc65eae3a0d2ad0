// What retention costs per store, beside its anchor in the same run: a one-message commit to a
// conversation that expires (idle TTL 1 h: PEXPIREAT on its keys and a ZADD on Redis, an UPDATE in
// the Postgres commit) beside the same commit to one that does not; a delete of a conversation of
// 100, 1,000 and 10,000 messages beside a Clear of the same; and a prune of 1,000 to 100,000
// messages down to 100 (the engine alone) beside a compact through the same message; a one-message
// commit to a conversation bounded at 100, 1,000 and 10,000 messages by a tenant's default prune
// (`HistoryBound`: one cycle, the commit that passes the bound prunes to 90% of it, then a tenth of
// the bound in appends) beside the same commits to an unbounded conversation of that length; and a delete of a conversation after 1,000 keyed commits (its
// idempotency records go with it) beside one after 1,000 unkeyed commits. Medians of
// 20 calls (commits: of 400 of each kind, interleaved). Run with `npm run bench:retention`. Redis, Postgres and this process
// share the machine's cores: compare the lines of one run, with the load average beside them.
import { create } from "@bufbuild/protobuf";
import { loadavg } from "node:os";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, DeltaSchema, type Delta } from "#gen/contextd/v1/state_pb";
import { applyDeltas } from "../src/core/deltas/apply-deltas.js";
import type { ConversationStore } from "../src/store/conversation-store.js";
import { HistoryBound } from "../src/store/history-bound.js";
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

/**
 * The default prune per commit, and what a delete pays for the idempotency records it takes.
 * `open(bound)`: a store whose tenant "bounded" keeps `bound` messages (0 = no bound).
 */
async function measureRemovals(name: string, open: (bound: number) => Promise<ConversationStore>): Promise<void> {
  for (const size of [100, 1_000, 10_000]) {
    const [bounded, plain] = [await open(size), await open(0)];
    try {
      const [boundedId, plainId] = [`bounded/bench-${process.pid}-${size}`, `plain/bench-${process.pid}-${size}`];
      for (const [store, id] of [[bounded, boundedId], [plain, plainId]] as const) {
        for (let from = 0; from < size; from += 1_000) await store.commit(id, undefined, [append(from, Math.min(1_000, size - from))], "");
      }
      // One cycle of the bound: a prune down to 90% of it, then a tenth of it in appends without one.
      const times: Record<"bounded" | "plain", number[]> = { bounded: [], plain: [] };
      for (let call = 0; call <= size / 10; call++) {
        for (const kind of call % 2 === 0 ? (["bounded", "plain"] as const) : (["plain", "bounded"] as const)) {
          const [store, id] = kind === "bounded" ? [bounded, boundedId] : [plain, plainId];
          const start = process.hrtime.bigint();
          await store.commit(id, undefined, [append(size + call, 1)], "");
          times[kind].push(Number(process.hrtime.bigint() - start) / 1e6);
        }
      }
      const median = (values: number[]) => [...values].sort((a, b) => a - b)[values.length >> 1]!;
      const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
      const kept = (await bounded.load(boundedId)).history.length;
      console.log(
        `${name.padEnd(8)} ${String(size).padStart(6)} messages, ${times.plain.length} one-message commits: unbounded median ${median(times.plain).toFixed(3)} / mean ${mean(times.plain).toFixed(3)} ms (anchor), ` +
          `bounded at ${size} by --prune-per-tenant median ${median(times.bounded).toFixed(3)} / mean ${mean(times.bounded).toFixed(3)} / the pruning one ${times.bounded[0]!.toFixed(2)} ms (history ${kept} after) ${load()}`,
      );
      await bounded.delete(boundedId, undefined);
      await plain.delete(plainId, undefined);
    } finally {
      await bounded.close();
      await plain.close();
    }
  }
  const store = await open(0);
  try {
    if (name === "memory") {
      // A bound in bytes the history stays within: what measuring it costs each commit (the sum runs
      // from the newest message back until it passes the bound, here through the whole history).
      for (const size of [1_000, 10_000]) {
        const [measured, plain] = [new MemoryConversationStore({ historyBound: bytesBoundOf(1 << 30) }), new MemoryConversationStore()];
        const id = `bounded/bench-bytes-${process.pid}-${size}`;
        for (const target of [measured, plain]) for (let from = 0; from < size; from += 1_000) await target.commit(id, undefined, [append(from, 1_000)], "");
        const within = await medianMs(200, (call) => measured.commit(id, undefined, [append(size + call, 1)], ""));
        const unbounded = await medianMs(200, (call) => plain.commit(id, undefined, [append(size + call, 1)], ""));
        console.log(`${name.padEnd(8)} ${String(size).padStart(6)} messages, one-message commit: unbounded ${unbounded.toFixed(3)} ms (anchor), within a 1 GiB --prune-per-tenant bytes bound ${within.toFixed(3)} ms ${load()}`);
        await measured.close();
        await plain.close();
      }
    }
    const ids = { keyed: [] as string[], unkeyed: [] as string[] };
    for (let call = 0; call < 5; call++) {
      for (const kind of ["keyed", "unkeyed"] as const) {
        const id = `plain/bench-delete-${process.pid}-${kind}-${call}`;
        for (let commit = 0; commit < 1_000; commit++) await store.commit(id, undefined, [append(commit, 1)], kind === "keyed" ? `key-${commit}` : "");
        ids[kind].push(id);
      }
    }
    const unkeyed = await medianMs(5, (call) => store.delete(ids.unkeyed[call]!, undefined));
    const keyed = await medianMs(5, (call) => store.delete(ids.keyed[call]!, undefined));
    console.log(`${name.padEnd(8)} delete after 1,000 commits: unkeyed ${unkeyed.toFixed(2)} ms (anchor), keyed ${keyed.toFixed(2)} ms (its 1,000 idempotency records go with it) ${load()}`);
  } finally {
    await store.close();
  }
}

const boundOf = (bound: number) =>
  new HistoryBound({ defaultLimits: { maxMessages: 0, maxBytes: 0 }, perTenant: new Map(bound > 0 ? [["bounded", { maxMessages: bound, maxBytes: 0 }]] : []) });

const bytesBoundOf = (maxBytes: number) => new HistoryBound({ defaultLimits: { maxMessages: 0, maxBytes: 0 }, perTenant: new Map([["bounded", { maxMessages: 0, maxBytes }]]) });

await measureRemovals("memory", async (bound) => new MemoryConversationStore({ historyBound: boundOf(bound) }));
await measureStore("memory", async () => new MemoryConversationStore());
const redis = await startRedis();
try {
  await measureStore("redis", async () => {
    const store = new RedisConversationStore(redis.url);
    if (!(await store.connected())) throw new Error("redis store did not connect");
    return store;
  });
  await measureRemovals("redis", async (bound) => {
    const store = new RedisConversationStore(redis.url, { historyBound: boundOf(bound) });
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
  await measureRemovals("postgres", async (bound) => {
    const store = new PostgresConversationStore(postgres.url, { historyBound: boundOf(bound) });
    if (!(await store.connected())) throw new Error("postgres store did not connect");
    return store;
  });
} finally {
  await postgres.destroy();
}
