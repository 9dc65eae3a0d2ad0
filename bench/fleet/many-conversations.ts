// Issue 30, "many conversations": 10,000 conversations of 1,000 ~250-byte messages on one Redis,
// turned in random order by one sidecar with default flags, beside turns of one conversation of
// the same size on the same sidecar. Target: <= 2x the single-conversation turn. A sidecar with
// more long conversations than its caches (decoded states: 1,000 conversations / 32 MiB; history
// facts: 64 MiB) meets most of them cold: its Compile and its Commit read the stored tail. The
// conversations are one conversation's keys copied (COPY) under 10,000 ids, with the header's
// `rest` written for each id: what the store's own commits would have written (the id index
// included, so a cold Commit plans on the stored tail: store/tail-commit.ts).
// Env: CONTEXTD_FLEET_CONVERSATIONS (10000), CONTEXTD_FLEET_MESSAGES (1000), CONTEXTD_FLEET_TURNS (2000).
import { create } from "@bufbuild/protobuf";
import { Redis } from "ioredis";
import { DeltaSchema, Segment } from "#gen/contextd/v1/state_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { Codec, defaultCodecLimits } from "../../src/codec/codec.js";
import { storedTokenEstimator } from "../../src/server/operations/stored-token-estimator.js";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { conversationKeys } from "../../src/store/redis-scripts.js";
import { startRedis } from "../../test/support/redis.js";
import { randomSource } from "../../test/support/random-messages.js";
import { startBuiltSidecar } from "../bench-processes.js";
import { MinimalGrpcClient } from "../minimal-grpc-client.js";
import { compilePath, compileRequest, mb, ms, percentile, prose, textMessage, agentTurn } from "./agent-turns.js";
import { loadavg } from "node:os";

const conversations = Number(process.env.CONTEXTD_FLEET_CONVERSATIONS ?? 10_000);
const messages = Number(process.env.CONTEXTD_FLEET_MESSAGES ?? 1_000);
const turns = Number(process.env.CONTEXTD_FLEET_TURNS ?? 2_000);

/** `conversations` copies of one conversation of `messages` messages, written by the store itself once. */
export async function seedCopies(url: string, prefix: string, conversations: number, messages: number): Promise<string[]> {
  const codec = new Codec(defaultCodecLimits, await storedTokenEstimator("openai_chat:gpt-4o"));
  const store = new RedisConversationStore(url, { codec });
  const raw = new Redis(url);
  try {
    await store.connected();
    const template = `${prefix}-template`;
    const batch = Array.from({ length: messages }, (_, index) => textMessage(`m${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, prose(index, 250)));
    const { state } = await store.commit(template, undefined, [create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: batch } } })], "");
    const from = conversationKeys("contextd", template);
    const ids: string[] = [];
    for (let start = 0; start < conversations; start += 500) {
      const pipeline = raw.pipeline();
      for (let index = start; index < Math.min(conversations, start + 500); index++) {
        const id = `${prefix}-${index}`;
        ids.push(id);
        const to = conversationKeys("contextd", id);
        pipeline.copy(from.version, to.version);
        pipeline.copy(from.header, to.header);
        pipeline.copy(from.segments[1]!, to.segments[1]!);
        // The history list's id index (message ids to positions; the template makes no tool calls, so no call hash).
        pipeline.copy(from.segmentIds[1]!, to.segmentIds[1]!);
        pipeline.hset(to.header, "rest", Buffer.from(codec.encodeStateRest({ ...state!, conversationId: id })));
      }
      await pipeline.exec();
    }
    return ids;
  } finally {
    raw.disconnect();
    await store.close();
  }
}

export async function run(): Promise<void> {
  console.log(`many conversations (issue 30): ${conversations.toLocaleString("en-US")} conversations of ${messages.toLocaleString("en-US")} messages, ${turns.toLocaleString("en-US")} turns in random order; load average ${loadavg().map((value) => value.toFixed(2)).join(" / ")} (shared cores: figures move by tens of percent)`);
  const redis = await startRedis();
  try {
    const started = Date.now();
    const ids = await seedCopies(redis.url, `many-${Date.now()}`, conversations, messages);
    console.log(`  seeded in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    const sidecar = await startBuiltSidecar(["--redis-url", redis.url]);
    const client = new MinimalGrpcClient(new URL(sidecar.url).host);
    try {
      // The single conversation: warmed, then measured.
      const single = ids[0]!;
      const singleTurns: number[] = [];
      for (let index = 0; index < 203; index++) {
        const measured = await agentTurn(client, single, index);
        if (index >= 3) singleTurns.push(measured.total);
      }
      const random = randomSource(30);
      const randomTurns: number[] = [];
      const commits: number[] = [];
      const compiles: number[] = [];
      for (let index = 0; index < turns; index++) {
        const id = ids[1 + Math.floor(random() * (ids.length - 1))]!;
        const measured = await agentTurn(client, id, 1_000 + index);
        randomTurns.push(measured.total);
        commits.push(measured.commit);
        compiles.push(measured.compile);
      }
      // A compile alone in random order (no commit before it reads the state).
      const compilesAlone: number[] = [];
      for (let index = 0; index < Math.min(turns, 1_000); index++) {
        const id = ids[1 + Math.floor(random() * (ids.length - 1))]!;
        const begun = process.hrtime.bigint();
        await client.call(compilePath, compileRequest(id));
        compilesAlone.push(Number(process.hrtime.bigint() - begun) / 1e6);
      }
      // RSS beside what the heap holds live and the caches' own gauges (RSS also holds garbage not yet collected).
      const metrics = await fetch(`${sidecar.url}/metrics`).then((response) => response.text(), () => "");
      const gauge = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(metrics)?.[1] ?? NaN);
      const singleP50 = percentile(singleTurns, 50);
      const randomP50 = percentile(randomTurns, 50);
      console.log(
        `  single-conversation turn p50 ${ms(singleP50)} p99 ${ms(percentile(singleTurns, 99))}; random-order turn p50 ${ms(randomP50)} p99 ${ms(percentile(randomTurns, 99))} = ${(randomP50 / singleP50).toFixed(2)}x (target <= 2x: ${randomP50 <= 2 * singleP50 ? "met" : "NOT met"})` +
          ` — its commit p50 ${ms(percentile(commits, 50))}, its compile p50 ${ms(percentile(compiles, 50))}; a compile alone in random order p50 ${ms(percentile(compilesAlone, 50))}; sidecar RSS ${mb(sidecar.rssBytes())}, heap used ${mb(gauge("nodejs_heap_size_used_bytes"))}` +
          ` (retained encodings ${mb(gauge("contextd_retained_encoding_bytes"))}, recent messages ${mb(gauge("contextd_recent_messages_bytes"))}, token count texts ${mb(gauge("contextd_token_count_text_bytes"))})`,
      );
    } finally {
      client.close();
      await sidecar.stop();
    }
  } finally {
    await redis.stop();
  }
}
