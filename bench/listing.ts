// What a ListConversations page costs per store as the number of conversations grows: the id
// order (the anchor: what listing was before conversation metadata), newest update first, newest
// update first with a label filter one conversation in ten matches, and a later page by update
// (from a page token). Each figure is the median of 20 calls of one 100-conversation page, in one
// run. Run with `npm run bench:listing`. Redis, Postgres and this process share the machine's
// cores: compare the lines of one run, and read them with the load average printed beside them.
import { create } from "@bufbuild/protobuf";
import { DeltaSchema } from "#gen/contextd/v1/state_pb";
import type { ConversationStore } from "../src/store/conversation-store.js";
import { listById, type ListQuery } from "../src/store/conversation-listing.js";
import { MemoryConversationStore } from "../src/store/memory-conversation-store.js";
import { PostgresConversationStore } from "../src/store/postgres-conversation-store.js";
import { RedisConversationStore } from "../src/store/redis-conversation-store.js";
import { startPostgres } from "../test/support/postgres.js";
import { startRedis } from "../test/support/redis.js";
import { loadavg } from "node:os";

const pageSize = 100;
const calls = 20;

/** Conversations `from` to `to` - 1 under `prefix`, one commit each, 32 in flight. */
async function seed(store: ConversationStore, prefix: string, from: number, count: number): Promise<void> {
  let next = from;
  const worker = async () => {
    for (let index = next++; index < count; index = next++) {
      const labels = { shard: String(index % 10) };
      await store.commit(`${prefix}${String(index).padStart(6, "0")}`, 0n, [create(DeltaSchema, { operation: { case: "setMetadata", value: { title: `t${index}`, labels } } })], "");
    }
  };
  await Promise.all(Array.from({ length: 32 }, worker));
}

async function medianMs(run: () => Promise<unknown>): Promise<number> {
  const times: number[] = [];
  for (let call = 0; call < calls; call++) {
    const start = process.hrtime.bigint();
    await run();
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  times.sort((a, b) => a - b);
  return times[times.length >> 1]!;
}

async function measure(name: string, open: () => Promise<ConversationStore>, sizes: number[]): Promise<void> {
  const store = await open();
  try {
    let seeded = 0;
    const prefix = `bench-${process.pid}/`;
    for (const size of sizes) {
      await seed(store, prefix, seeded, size);
      seeded = size;
      const byId = listById(prefix, pageSize, "");
      const byUpdate: ListQuery = { ...listById("", pageSize, ""), order: "updated" };
      const labelled: ListQuery = { ...byUpdate, labels: { shard: "3" } };
      const second = (await store.list(byUpdate)).nextPageToken;
      const figures = {
        id: await medianMs(() => store.list(byId)),
        updated: await medianMs(() => store.list(byUpdate)),
        "updated+label": await medianMs(() => store.list(labelled)),
        "updated, page 2": await medianMs(() => store.list({ ...byUpdate, pageToken: second })),
      };
      const line = Object.entries(figures).map(([order, ms]) => `${order} ${ms.toFixed(2)} ms`).join(", ");
      console.log(`${name.padEnd(8)} ${String(size).padStart(7)} conversations: ${line} (load ${loadavg()[0]!.toFixed(1)})`);
    }
  } finally {
    await store.close();
  }
}

await measure("memory", async () => new MemoryConversationStore(), [1_000, 10_000, 100_000]);
const redis = await startRedis();
try {
  await measure("redis", async () => {
    const store = new RedisConversationStore(redis.url);
    if (!(await store.connected())) throw new Error("redis store did not connect");
    return store;
  }, [1_000, 10_000]);
} finally {
  await redis.stop();
}
const postgres = await startPostgres();
try {
  await measure("postgres", async () => {
    const store = new PostgresConversationStore(postgres.url);
    if (!(await store.connected())) throw new Error("postgres store did not connect");
    return store;
  }, [1_000, 10_000]);
} finally {
  await postgres.destroy();
}
