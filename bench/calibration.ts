// What keeping token calibration in the store costs (issue 19 item 4, `CalibrationStore`): one
// ReportUsage's store work on each store, at concurrency 1 and 16 on one key and on 16 keys,
// beside an anchor measured in the same run on the same store (`currentVersion`, one read round
// trip); what a key takes in Redis (MEMORY USAGE of a tenant's two keys at the default bound of
// 256 keys); and what the sidecar's read cache (`UsageCalibration`) takes per key. The machine is
// shared: compare ratios within one run. Run with `npm run bench:calibration`.
import { loadavg, cpus } from "node:os";
import { Redis } from "ioredis";
import { EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { UsageCalibration } from "../src/application/usage-calibration.js";
import type { ConversationStore } from "../src/store/conversation-store.js";
import { MemoryConversationStore } from "../src/store/memory-conversation-store.js";
import { PostgresConversationStore } from "../src/store/postgres-conversation-store.js";
import { RedisConversationStore } from "../src/store/redis-conversation-store.js";
import { startPostgres } from "../test/support/postgres.js";
import { startRedis } from "../test/support/redis.js";

const bounds = { maxKeysPerTenant: 256, ttlMs: 30 * 86_400_000 };
const load = () => loadavg().map((value) => value.toFixed(2)).join(" / ");
console.log(`bench:calibration — node ${process.version}, ${cpus().length} cores, load average ${load()} at start`);

/** Median microseconds per operation of `rounds` batches of `concurrency` operations at once. */
async function perOperation(concurrency: number, rounds: number, operation: (index: number) => Promise<unknown>): Promise<number> {
  const samples: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const started = performance.now();
    await Promise.all(Array.from({ length: concurrency }, (_, index) => operation(round * concurrency + index)));
    samples.push(((performance.now() - started) * 1000) / concurrency);
  }
  samples.sort((a, b) => a - b);
  return samples[Math.floor(samples.length / 2)]!;
}

async function measureStore(name: string, store: ConversationStore): Promise<void> {
  const tenant = `bench-${name}`;
  const key = (index: number, keys: number) => ({ tenant, provider: Provider.ANTHROPIC_MESSAGES, model: `claude-model-${index % keys}`, estimator: EstimatorKind.TOKENIZER });
  await store.commit("bench-anchor", undefined, [], "");
  for (const concurrency of [1, 16]) {
    const rounds = concurrency === 1 ? 400 : 60;
    const anchor = await perOperation(concurrency, rounds, () => store.currentVersion("bench-anchor"));
    const oneKey = await perOperation(concurrency, rounds, (index) => store.reportCalibration(key(index, 1), 1_000, 1_000 + (index % 300), Date.now(), bounds));
    const sixteenKeys = await perOperation(concurrency, rounds, (index) => store.reportCalibration(key(index, 16), 1_000, 1_000 + (index % 300), Date.now(), bounds));
    const read = await perOperation(concurrency, rounds, (index) => store.readCalibration(key(index, 16), Date.now(), bounds));
    console.log(
      `${name.padEnd(8)} concurrency ${String(concurrency).padStart(2)}: anchor currentVersion ${anchor.toFixed(1).padStart(7)} µs/op | ` +
        `report, one key ${oneKey.toFixed(1).padStart(7)} µs (${(oneKey / anchor).toFixed(2)}x) | report, 16 keys ${sixteenKeys.toFixed(1).padStart(7)} µs (${(sixteenKeys / anchor).toFixed(2)}x) | ` +
        `read ${read.toFixed(1).padStart(7)} µs (${(read / anchor).toFixed(2)}x)`,
    );
  }
}

await measureStore("memory", new MemoryConversationStore());

const redis = await startRedis();
const redisStore = new RedisConversationStore(redis.url);
await redisStore.connected();
await measureStore("redis", redisStore);
const raw = new Redis(redis.url);
for (const modelBytes of [20, 256]) {
  const tenant = `bench-bytes-${modelBytes}`;
  for (let index = 0; index < bounds.maxKeysPerTenant; index++) {
    const model = `m${index}-`.padEnd(modelBytes, "x");
    await redisStore.reportCalibration({ tenant, provider: Provider.ANTHROPIC_MESSAGES, model, estimator: EstimatorKind.TOKENIZER }, 1_000, 1_234, Date.now(), bounds);
  }
  const records = `contextd:calibration:{${tenant}}`;
  const bytes = Number(await raw.memory("USAGE", records, "SAMPLES", 0)) + Number(await raw.memory("USAGE", `${records}:reported`, "SAMPLES", 0));
  console.log(`redis    a tenant with ${bounds.maxKeysPerTenant} keys, ${modelBytes}-byte models: ${(bytes / 1024).toFixed(1)} KB (${(bytes / bounds.maxKeysPerTenant).toFixed(0)} bytes a key)`);
}
raw.disconnect();
await redisStore.close();
await redis.stop();

const postgres = await startPostgres();
const postgresStore = new PostgresConversationStore(postgres.url);
await postgresStore.connected();
await measureStore("postgres", postgresStore);
await postgresStore.close();
await postgres.destroy();

const gc = (globalThis as { gc?: () => void }).gc;
if (gc) {
  for (const keys of [30_000, 100_000]) {
    const calibration = new UsageCalibration({ store: new MemoryConversationStore(), maxKeys: keys, bounds, refreshMs: 10_000 });
    gc();
    const before = process.memoryUsage().heapUsed;
    for (let index = 0; index < keys; index++) {
      await calibration.correction("tenant-1", { provider: Provider.ANTHROPIC_MESSAGES, model: `model-${String(index).padStart(14, "0")}`, estimator: EstimatorKind.TOKENIZER });
    }
    gc();
    console.log(`cache    ${keys} keys (20-character models): ${((process.memoryUsage().heapUsed - before) / keys).toFixed(0)} bytes a key`);
  }
} else {
  console.log("cache    (run with node --expose-gc for the cache's bytes a key)");
}
console.log(`load average at end: ${load()}`);
