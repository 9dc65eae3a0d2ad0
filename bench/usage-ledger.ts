// What the usage ledger costs (issue 32, `UsageLedgerStore`): one recorded report's store work on
// each store, at concurrency 1 and 16 (16 conversations of one tenant: their reports share the
// tenant's totals), into a ledger already holding 10 or 1,000 kept entries (the default bound,
// so each report also drops the oldest); a GetUsage read of 10, 100 and 1,000 entries; what a
// conversation's ledger takes in Redis at the bound; all beside an anchor measured in the same run
// on the same store (`currentVersion`, one read round trip). The machine is shared: compare ratios
// within one run. Run with `npm run bench:usage-ledger`.
import { cpus, loadavg } from "node:os";
import { Redis } from "ioredis";
import type { ConversationStore } from "../src/store/conversation-store.js";
import { MemoryConversationStore } from "../src/store/memory-conversation-store.js";
import { PostgresConversationStore } from "../src/store/postgres-conversation-store.js";
import { RedisConversationStore } from "../src/store/redis-conversation-store.js";
import type { UsageReport } from "../src/store/usage-ledger.js";
import { usageKeys } from "../src/store/redis-usage-ledger.js";
import { startPostgres } from "../test/support/postgres.js";
import { startRedis } from "../test/support/redis.js";

const bounds = { maxEntriesPerConversation: 1_000 };
const load = () => loadavg().map((value) => value.toFixed(2)).join(" / ");
console.log(`bench:usage-ledger — node ${process.version}, ${cpus().length} cores, load average ${load()} at start`);

let reports = 0;
function report(): UsageReport {
  const n = ++reports;
  return { reportId: `chatcmpl-${String(n).padStart(24, "0")}`, turnId: `turn-${n}`, provider: 1, model: "gpt-4o-2024-08-06", inputTokens: 12_000 + (n % 500), outputTokens: 300, cachedInputTokens: 8_000, compiledTokens: 11_900, reportedAtMs: Date.now() };
}

/** Median microseconds per operation of `rounds` batches of `concurrency` operations at once. */
async function perOperation(concurrency: number, rounds: number, operation: (index: number) => Promise<unknown>): Promise<number> {
  const samples: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const started = performance.now();
    await Promise.all(Array.from({ length: concurrency }, (_, index) => operation(index)));
    samples.push(((performance.now() - started) * 1000) / concurrency);
  }
  samples.sort((a, b) => a - b);
  return samples[Math.floor(samples.length / 2)]!;
}

const ratio = (value: number, anchor: number) => `${value.toFixed(1).padStart(7)} µs (${(value / anchor).toFixed(2)}x)`;

async function measureStore(name: string, store: ConversationStore): Promise<void> {
  const tenant = `bench-${name}-${process.pid}`;
  await store.commit("bench-anchor", undefined, [], "");
  for (const kept of [10, 1_000]) {
    const ids = Array.from({ length: 16 }, (_, index) => `${tenant}/kept-${kept}-${index}`);
    for (const id of ids) for (let n = 0; n < kept; n++) await store.recordUsage(tenant, id, report(), bounds);
    for (const concurrency of [1, 16]) {
      const rounds = concurrency === 1 ? 300 : 40;
      const anchor = await perOperation(concurrency, rounds, () => store.currentVersion("bench-anchor"));
      const record = await perOperation(concurrency, rounds, (index) => store.recordUsage(tenant, ids[index]!, report(), bounds));
      console.log(`${name.padEnd(8)} ${String(kept).padStart(5)} kept, concurrency ${String(concurrency).padStart(2)}: anchor currentVersion ${anchor.toFixed(1).padStart(7)} µs/op | record a report ${ratio(record, anchor)}`);
    }
  }
  for (const entries of [10, 100, 1_000]) {
    const id = `${tenant}/read-${entries}`;
    for (let n = 0; n < entries; n++) await store.recordUsage(tenant, id, report(), bounds);
    const anchor = await perOperation(1, 200, () => store.currentVersion("bench-anchor"));
    const read = await perOperation(1, 200, () => store.readUsage(tenant, id));
    console.log(`${name.padEnd(8)} GetUsage of ${String(entries).padStart(5)} entries: anchor ${anchor.toFixed(1).padStart(7)} µs | read ${ratio(read, anchor)}`);
  }
}

await measureStore("memory", new MemoryConversationStore());

const redis = await startRedis();
const redisStore = new RedisConversationStore(redis.url);
await redisStore.connected();
await measureStore("redis", redisStore);
const raw = new Redis(redis.url);
const tenant = "bench-bytes";
await Promise.all(Array.from({ length: bounds.maxEntriesPerConversation + 10 }, () => redisStore.recordUsage(tenant, `${tenant}/full`, report(), bounds)));
const keys = usageKeys("contextd", tenant, `${tenant}/full`);
let bytes = 0;
for (const key of [keys.totals, keys.order, keys.entries]) bytes += Number(await raw.memory("USAGE", key, "SAMPLES", 0));
console.log(`redis    a conversation's ledger at ${bounds.maxEntriesPerConversation} kept entries (30-byte report ids): ${(bytes / 1024).toFixed(1)} KB (${(bytes / bounds.maxEntriesPerConversation).toFixed(0)} bytes an entry)`);
raw.disconnect();
await redisStore.close();
await redis.stop();

const postgres = await startPostgres();
const postgresStore = new PostgresConversationStore(postgres.url);
await postgresStore.connected();
await measureStore("postgres", postgresStore);
await postgresStore.close();
await postgres.destroy();
console.log(`load average at end: ${load()}`);
