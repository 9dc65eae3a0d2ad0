import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { loadConfig } from "../../../src/server/operations/config.js";
import { turnMemoryBounds } from "../../../src/server/operations/memory-bounds.js";
import { grpcJsClient } from "../../support/grpc-js.js";
import type { HeapInspector } from "../../support/heap-inspector.js";
import { randomSource } from "../../support/random-messages.js";
import { startRedis, type RedisProcess } from "../../support/redis.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";

// Issue 30: "RSS bounded by the flags". A sidecar on Redis turning more long conversations than its
// caches hold keeps, after a full collection, no more heap than it had at start plus the caches'
// byte bounds its flags give (turnMemoryBounds) and a fixed allowance (16 MB) for its own small structures.
// Before, the history facts held every recently compiled conversation's whole decoded history
// (10,000 conversations, counted at 8 bytes a message) and the decoded states were bounded by their
// encodings (a third of their heap): here 60 conversations of 1,000 messages weigh ~55 MB decoded,
// over the ~25 MiB of bounds, and were all kept.

/** Small bounds, so that the conversations below are several times what the caches may hold. */
const flags = [
  "--decoded-state-bytes", String(8 << 20),
  "--history-facts-bytes", String(4 << 20),
  "--recent-message-bytes", String(2 << 20),
  "--retained-encoding-bytes", String(4 << 20),
  "--token-count-text-bytes", String(2 << 20),
  "--cache-impact-bytes", String(1 << 20),
  "--kept-tail-bytes", String(1 << 20),
  "--token-count-list-bytes", String(2 << 20),
  "--listed-id-bytes", String(256 << 10),
];
/** What a sidecar holds besides its caches after turning: lineage and layout records, connection state, per-conversation index entries. */
const ownStructuresBytes = 16 << 20;
const conversations = 60;
const messagesEach = 1_000;

describe("heap in use after GC stays under the flags' bounds (Redis, more long conversations than the caches hold)", () => {
  let redis: RedisProcess;
  let sidecar: Sidecar;
  let inspector: HeapInspector;
  beforeAll(async () => {
    redis = await startRedis();
    sidecar = await startSidecar(["--redis-url", redis.url, ...flags], {}, { inspect: true });
    inspector = await sidecar.inspector();
  }, 60_000);
  afterAll(async () => {
    inspector?.close();
    await sidecar?.stop();
    await redis?.stop();
  });

  it("turns 60 conversations of 1,000 ~250-byte messages in random order", async () => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    try {
      const started = await inspector.liveMemory();
      const prose = (seed: number) => `${seed} the agent reads the file, runs the tests, and writes a short note about what it found. `.repeat(3).slice(0, 250);
      const ids = Array.from({ length: conversations }, (_, index) => `memory-bounds-${index}`);
      for (const id of ids) {
        const messages = Array.from({ length: messagesEach }, (_, index) => textMessage(`${id}-${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, prose(index)));
        await client.unary(ConversationService.method.commit, { conversationId: id, deltas: [appendHistory(...messages)] });
      }
      const random = randomSource(30);
      for (let turn = 0; turn < 3 * conversations; turn++) {
        const id = ids[Math.floor(random() * ids.length)]!;
        await client.unary(ConversationService.method.commit, { conversationId: id, deltas: [appendHistory(textMessage(`${id}-turn-${turn}`, Role.USER, prose(10_000 + turn)))] });
        const compiled = await client.unary(ContextService.method.compile, { conversationId: id, budget: { maxTokens: 8_000n }, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" } });
        expect(compiled.result?.rendered?.json.length).toBeGreaterThan(0);
      }
      const turned = await inspector.liveMemory();
      const bounds = turnMemoryBounds(loadConfig([...flags, "--redis-url", redis.url], {}), "redis");
      const boundsBytes = bounds.reduce((sum, bound) => sum + bound.bytes, 0);
      const grown = turned.heapUsed - started.heapUsed;
      console.log(
        `heap in use after GC: ${(started.heapUsed / 2 ** 20).toFixed(1)} MB at start, ${(turned.heapUsed / 2 ** 20).toFixed(1)} MB after ${3 * conversations} turns (+${(grown / 2 ** 20).toFixed(1)} MB); ` +
          `bounds ${(boundsBytes / 2 ** 20).toFixed(1)} MB + ${(ownStructuresBytes / 2 ** 20).toFixed(0)} MB allowance; RSS ${(turned.rss / 2 ** 20).toFixed(0)} MB`,
      );
      expect(grown).toBeLessThanOrEqual(boundsBytes + ownStructuresBytes);
    } finally {
      client.raw.close();
    }
  }, 300_000);
});
