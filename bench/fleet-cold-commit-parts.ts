// `node dist/bench/fleet-cold-commit-parts.js`: where a fresh process's first Commit to a long
// conversation spends its time (issue 30: the first turn on a fresh sidecar is ~all Commit),
// in process on the Redis store, at 10,000 and 100,000 stored ~250-byte messages. Beside each
// other in one run: the cold commit (a store that has never read the conversation), its parts
// measured apart — the load script's reply alone (the bytes over the socket, nothing decoded),
// a fresh store's whole `load` (reply + decode + assemble), the id index a first commit builds
// (`MessageIdIndex.of`) —, the cold commit without the state asked for (planned on the stored
// tail, store/tail-commit.ts), and a warm commit on the store that has the state (the anchor a
// restated target is against). The machine is shared: compare lines of one run.
// Env: CONTEXTD_COLD_SIZES=10000,100000.
import { create } from "@bufbuild/protobuf";
import { Redis } from "ioredis";
import { Role } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment } from "#gen/contextd/v1/state_pb";
import { Codec, defaultCodecLimits } from "../src/codec/codec.js";
import { storedTokenEstimator } from "../src/server/operations/stored-token-estimator.js";
import { MessageIdIndex } from "../src/store/message-id-index.js";
import { RedisConversationStore } from "../src/store/redis-conversation-store.js";
import { conversationKeys } from "../src/store/redis-scripts.js";
import { startRedis } from "../test/support/redis.js";
import { ms, percentile, prose, textMessage } from "./fleet/agent-turns.js";
import { loadavg } from "node:os";

const sizes = (process.env.CONTEXTD_COLD_SIZES ?? "10000,100000").split(",").map(Number);
const rounds = 3;

const append = (id: string) => [create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: [textMessage(id, Role.USER, prose(7, 250))] } } })];

async function timed<T>(run: () => Promise<T>): Promise<[number, T]> {
  const started = process.hrtime.bigint();
  const result = await run();
  return [Number(process.hrtime.bigint() - started) / 1e6, result];
}

const redis = await startRedis();
const estimator = await storedTokenEstimator("openai_chat:gpt-4o");
const store = (codec = new Codec(defaultCodecLimits, estimator)) => new RedisConversationStore(redis.url, { codec });
console.log(`cold commit parts (Redis, in process): load average ${loadavg().map((value) => value.toFixed(2)).join(" / ")} (shared cores: compare lines of one run)`);
try {
  for (const size of sizes) {
    const id = `cold-parts-${size}-${Date.now()}`;
    const writer = store();
    await writer.connected();
    for (let start = 0; start < size; start += 2_000) {
      const batch = Array.from({ length: Math.min(2_000, size - start) }, (_, offset) => textMessage(`${id}-${start + offset}`, (start + offset) % 2 === 0 ? Role.USER : Role.ASSISTANT, prose(start + offset, 250)));
      await writer.commit(id, undefined, [create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: batch } } })], "");
    }
    const figures: Record<string, number[]> = { cold: [], tail: [], reply: [], load: [], index: [], warm: [] };
    let turn = 0;
    for (let round = 0; round < rounds; round++) {
      const fresh = store();
      await fresh.connected();
      figures.cold!.push((await timed(() => fresh.commit(id, undefined, append(`${id}-cold-${turn++}`), "")))[0]);
      for (let index = 0; index < 5; index++) figures.warm!.push((await timed(() => fresh.commit(id, undefined, append(`${id}-warm-${turn++}`), "")))[0]);
      await fresh.close();
      // The cold commit whose caller does not want the state back (the Commit RPC without include_state): planned on the stored tail.
      const tailCommitter = store();
      await tailCommitter.connected();
      figures.tail!.push((await timed(() => tailCommitter.commit(id, undefined, append(`${id}-tail-${turn++}`), "", undefined, undefined, { withState: false })))[0]);
      if (tailCommitter.tailCommits !== 1) throw new Error(`the cold commit without state was not planned on the tail (${tailCommitter.tailCommits} tail commits)`);
      await tailCommitter.close();
      const reader = store();
      await reader.connected();
      const [loadMs, state] = await timed(() => reader.load(id));
      figures.load!.push(loadMs);
      figures.index!.push((await timed(async () => MessageIdIndex.of(state)))[0]);
      await reader.close();
      // The reply's bytes alone: the lists as the load script sends them to a copy-less reader.
      const raw = new Redis(redis.url);
      const keys = conversationKeys("contextd", id);
      figures.reply!.push((await timed(() => Promise.all(keys.segments.map((key) => raw.lrangeBuffer(key, 0, -1)))))[0]);
      raw.disconnect();
    }
    const p50 = (name: string) => percentile(figures[name]!, 50);
    const warm = p50("warm");
    console.log(
      `  ${size.toLocaleString("en-US")} messages: cold commit p50 ${ms(p50("cold"))} = ${(p50("cold") / warm).toFixed(1)}x the warm commit ${ms(warm)};` +
        ` without the state asked for (planned on the stored tail) ${ms(p50("tail"))} = ${(p50("tail") / warm).toFixed(1)}x;` +
        ` of it: whole-state reply alone ${ms(p50("reply"))}, a fresh load (reply + decode + assemble) ${ms(p50("load"))}, building the id index ${ms(p50("index"))}`,
    );
    await writer.close();
  }
} finally {
  await redis.stop();
}
process.exit(0);
