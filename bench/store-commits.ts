// The store-commit lines of `npm run bench:scale` (issue 14, items 1-2): one commit appending one
// ~1 KB message to a conversation of 100 to 100,000 stored messages, in this process (no RPC), for
// the in-memory, the Redis and the Postgres store, each beside the bare write of the same bytes in
// the same run, turn by turn: an RPUSH of the message's encoding onto a list that long, and a
// version-checked INSERT of it (BEGIN; INSERT; UPDATE ... WHERE version = $1; COMMIT) into a table
// that long. A commit whose cost grows with the conversation shows as a ratio to the bare write
// that grows with the size. `CONTEXTD_SCALE_ONLY=store-commits npm run bench:scale` runs these lines alone.
import { create, toBinary } from "@bufbuild/protobuf";
import { Redis } from "ioredis";
import pg from "pg";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment, type Delta } from "#gen/contextd/v1/state_pb";
import type { ConversationStore } from "../src/store/conversation-store.js";
import { MemoryConversationStore } from "../src/store/memory-conversation-store.js";
import { PostgresConversationStore } from "../src/store/postgres-conversation-store.js";
import { RedisConversationStore } from "../src/store/redis-conversation-store.js";
import { startPostgres } from "../test/support/postgres.js";

/** Timed commits per size and store (five more warm up first). */
const commitsPerSize = 40;

export interface StoreCommitText {
  /** ~`bytes` characters of text, different per `seed`. */
  prose(seed: number, bytes: number): string;
}

function userMessage(id: string, text: string): Message {
  return create(MessageSchema, { id, role: Role.USER, parts: [{ kind: { case: "text", value: { text } } }] });
}

const append = (messages: Message[]): Delta => create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages } } });

const p50 = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const sinceMs = (started: bigint) => Number(process.hrtime.bigint() - started) / 1e6;

/** Appends `size` ~1 KB messages to a new conversation, 500 per commit. */
async function fill(store: ConversationStore, conversationId: string, size: number, text: StoreCommitText): Promise<void> {
  for (let start = 0; start < size; start += 500) {
    const batch = Array.from({ length: Math.min(500, size - start) }, (_, offset) => userMessage(`${conversationId}-${start + offset}`, text.prose(start + offset, 1_000)));
    await store.commit(conversationId, undefined, [append(batch)], "");
  }
}

/**
 * Prints, per size, the p50 of one-message commits for each store and of the bare write beside
 * it, and the ratio of the two; then each store's p50 at the largest size over its p50 at the smallest.
 */
export async function storeCommitsAtScale(redisUrl: string, sizes: readonly number[], text: StoreCommitText): Promise<void> {
  const postgres = await startPostgres();
  const bareRedis = new Redis(redisUrl);
  const barePostgres = new pg.Pool({ connectionString: postgres.url, max: 2 });
  // An idle connection ended by the server's shutdown at the end is no failure of the bench.
  barePostgres.on("error", () => {});
  const run = Date.now();
  console.log(`\nstore commit of one ~1 KB message, in process (no RPC), p50 of ${commitsPerSize} (Postgres: fsync off, synchronous_commit on, as in the tests)`);
  console.log("size      memory     redis      bare RPUSH  redis/bare  postgres   bare INSERT postgres/bare");
  const rows: { size: number; memory: number; redis: number; rpush: number; postgres: number; insert: number }[] = [];
  try {
    await barePostgres.query("CREATE TABLE bench_versions (id text PRIMARY KEY, version bigint NOT NULL)");
    await barePostgres.query("CREATE TABLE bench_rows (conversation_id text, position bigint, message bytea, PRIMARY KEY (conversation_id, position))");
    for (const size of sizes) {
      const memory = new MemoryConversationStore();
      const redis = new RedisConversationStore(redisUrl);
      const postgresStore = new PostgresConversationStore(postgres.url);
      await redis.connected();
      await postgresStore.connected();
      const id = `store-commits-${run}-${size}`;
      const listKey = `${id}-bare`;
      try {
        await fill(memory, id, size, text);
        await fill(redis, id, size, text);
        await fill(postgresStore, id, size, text);
        // The bare list and table hold as many elements and rows of the same size.
        const filler = Buffer.from(toBinary(MessageSchema, userMessage(`${id}-filler`, text.prose(1, 1_000))));
        for (let start = 0; start < size; start += 1_000) await bareRedis.rpush(listKey, ...Array.from({ length: Math.min(1_000, size - start) }, () => filler));
        await barePostgres.query("INSERT INTO bench_versions VALUES ($1, 0)", [id]);
        await barePostgres.query("INSERT INTO bench_rows SELECT $1, position, $2 FROM generate_series(0, $3::bigint - 1) AS position", [id, filler, size]);
        const times = { memory: [] as number[], redis: [] as number[], rpush: [] as number[], postgres: [] as number[], insert: [] as number[] };
        for (let commit = 0; commit < commitsPerSize + 5; commit++) {
          const message = userMessage(`${id}-t${commit}`, text.prose(100_000 + commit, 1_000));
          const encoded = Buffer.from(toBinary(MessageSchema, message));
          const timed = async (into: number[], action: () => Promise<unknown>) => {
            const started = process.hrtime.bigint();
            await action();
            if (commit >= 5) into.push(sinceMs(started));
          };
          // Each store gets its own message object, as each would decode its own from a request.
          await timed(times.memory, () => memory.commit(id, undefined, [append([userMessage(message.id, text.prose(100_000 + commit, 1_000))])], ""));
          await timed(times.redis, () => redis.commit(id, undefined, [append([userMessage(message.id, text.prose(100_000 + commit, 1_000))])], ""));
          await timed(times.rpush, () => bareRedis.rpush(listKey, encoded));
          await timed(times.postgres, () => postgresStore.commit(id, undefined, [append([userMessage(message.id, text.prose(100_000 + commit, 1_000))])], ""));
          await timed(times.insert, async () => {
            const client = await barePostgres.connect();
            try {
              await client.query("BEGIN");
              await client.query({ name: "bare-insert", text: "INSERT INTO bench_rows VALUES ($1, $2, $3)", values: [id, size + commit, encoded] });
              const updated = await client.query({ name: "bare-update", text: "UPDATE bench_versions SET version = version + 1 WHERE id = $1 AND version = $2", values: [id, commit] });
              if (updated.rowCount !== 1) throw new Error("bare transaction: version moved");
              await client.query("COMMIT");
            } finally {
              client.release();
            }
          });
        }
        const row = { size, memory: p50(times.memory), redis: p50(times.redis), rpush: p50(times.rpush), postgres: p50(times.postgres), insert: p50(times.insert) };
        rows.push(row);
        const cell = (value: number) => `${value.toFixed(3)} ms`.padEnd(11);
        console.log(
          `${size.toLocaleString("en-US").padEnd(9)} ${cell(row.memory)}${cell(row.redis)}${cell(row.rpush)} ${`${(row.redis / row.rpush).toFixed(2)}x`.padEnd(11)}` +
            `${cell(row.postgres)}${cell(row.insert)} ${(row.postgres / row.insert).toFixed(2)}x`,
        );
      } finally {
        await bareRedis.del(listKey);
        await redis.close();
        await postgresStore.close();
        await memory.close();
      }
    }
    if (rows.length >= 2) {
      const [first, last] = [rows[0]!, rows[rows.length - 1]!];
      const growth = (store: "memory" | "redis" | "postgres") => `${store} ${(last[store] / first[store]).toFixed(2)}x`;
      console.log(`commit p50 at ${last.size.toLocaleString("en-US")} over at ${first.size.toLocaleString("en-US")}: ${growth("memory")}, ${growth("redis")}, ${growth("postgres")}`);
    }
  } finally {
    bareRedis.disconnect();
    await barePostgres.end();
    await postgres.destroy();
  }
}
