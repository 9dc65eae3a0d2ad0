// Issue 30, "RSS after 1,000,000 turns": one sidecar with default flags turns many long
// conversations (more than its caches hold: 1,000 seeded with 1,000 ~250-byte messages each, ~900 MB
// decoded) in random order, on the memory store and on Redis, and
// at several points prints its RSS and its heap in use after a forced full collection (live data,
// asked through the V8 inspector: test/support/heap-inspector.ts) beside the sum of the caches'
// byte bounds (turnMemoryBounds, src/server/operations/memory-bounds.ts). On the memory store the
// conversations themselves are data, not cache: their stored size is printed beside it.
// A turn is agent-turns.ts's: Commit of one ~250-byte user message, then the stateful Compile.
// Env: CONTEXTD_FLEET_MILLION_TURNS (1000000), CONTEXTD_FLEET_MILLION_CONVERSATIONS (1000),
// CONTEXTD_FLEET_MILLION_SEEDED (1000 messages each), CONTEXTD_FLEET_MILLION_AGENTS (8; a turn
// answered UNAVAILABLE, as a store timeout on a loaded machine is, is sent again, as clients do, and counted),
// CONTEXTD_FLEET_MILLION_STORES (memory,redis), CONTEXTD_FLEET_HEAP_SNAPSHOT (a path prefix:
// a heap snapshot per store at the end), CONTEXTD_FLEET_SIDECAR_MAIN (another build's
// dist/src/main.js, for a before/after: it must know the flags it is given, none here).
import { startRedis } from "../../test/support/redis.js";
import { randomSource } from "../../test/support/random-messages.js";
import { defaultConfig } from "../../src/server/operations/config.js";
import { turnMemoryBounds } from "../../src/server/operations/memory-bounds.js";
import { decodedMessageOverheadBytes } from "../../src/store/decoded-state-cache.js";
import { startBuiltSidecar } from "../bench-processes.js";
import { MinimalGrpcClient } from "../minimal-grpc-client.js";
import { agentTurn, type TurnTime, loadAverage, mb, ms, percentile, seedConversation } from "./agent-turns.js";
import { seedCopies } from "./many-conversations.js";

const totalTurns = Number(process.env.CONTEXTD_FLEET_MILLION_TURNS ?? 1_000_000);
const conversations = Number(process.env.CONTEXTD_FLEET_MILLION_CONVERSATIONS ?? 1_000);
const seeded = Number(process.env.CONTEXTD_FLEET_MILLION_SEEDED ?? 1_000);
const stores = (process.env.CONTEXTD_FLEET_MILLION_STORES ?? "memory,redis").split(",").map((name) => name.trim());
const snapshotPrefix = process.env.CONTEXTD_FLEET_HEAP_SNAPSHOT ?? "";
const sidecarMain = process.env.CONTEXTD_FLEET_SIDECAR_MAIN;
/** Agents turning at once (each its own share of the conversations), over a few HTTP/2 connections. */
const agents = Number(process.env.CONTEXTD_FLEET_MILLION_AGENTS ?? 8);
const connections = 4;

let unavailable = 0;
/** One agent turn, sent again (up to 5 times) when answered UNAVAILABLE. */
async function turnRetryingUnavailable(client: MinimalGrpcClient, conversationId: string, turn: number): Promise<TurnTime> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await agentTurn(client, conversationId, turn * 8 + attempt);
    } catch (error) {
      if (attempt >= 5 || !String((error as Error).message).includes("grpc-status 14")) throw error;
      unavailable++;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/** Where the figures are read: turns done. */
function checkpoints(total: number): number[] {
  return [10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 750_000, total].filter((at, index, all) => at <= total && all.indexOf(at) === index);
}

async function turnStore(store: string): Promise<void> {
  const redis = store === "redis" ? await startRedis() : undefined;
  if (store !== "memory" && !redis) throw new Error(`CONTEXTD_FLEET_MILLION_STORES: no store "${store}" (have memory, redis)`);
  const sidecar = await startBuiltSidecar(redis ? ["--redis-url", redis.url] : [], [], { inspect: true, ...(sidecarMain ? { main: sidecarMain } : {}) });
  // Connections are opened once seeded: one that sends no request within --headers-timeout-ms is closed.
  let clients: MinimalGrpcClient[] = [];
  const bounds = turnMemoryBounds(defaultConfig, store === "redis" ? "redis" : "memory");
  const boundSum = bounds.reduce((sum, bound) => sum + bound.bytes, 0);
  console.log(`  ${store}: caches' byte bounds with default flags sum to ${mb(boundSum)} (${bounds.map((bound) => `${bound.what} ${mb(bound.bytes)}`).join(", ")})`);
  // Connected for the whole run and closed before the sidecar is stopped (an attached inspector holds its exit).
  const inspector = await sidecar.inspector();
  try {
    const seeding = Date.now();
    // Redis: one conversation written by the store, copied under every id; memory: commits of ~512 KB.
    let ids = Array.from({ length: conversations }, (_, index) => `million-${seeding}-${index}`);
    if (redis) ids = await seedCopies(redis.url, `million-${seeding}`, conversations, seeded);
    clients = Array.from({ length: connections }, () => new MinimalGrpcClient(new URL(sidecar.url).host));
    if (!redis) for (const [index, id] of ids.entries()) await seedConversation(clients[index % connections]!, id, seeded);
    const start = await inspector.liveMemory();
    console.log(`  ${store}: ${conversations.toLocaleString("en-US")} conversations of ${seeded.toLocaleString("en-US")} messages seeded in ${((Date.now() - seeding) / 1000).toFixed(0)} s; after a full GC heap in use ${mb(start.heapUsed)}, RSS ${mb(start.rss)}`);
    const random = randomSource(1_000);
    let done = 0;
    // What the memory store holds as data, decoded: ~290 encoded bytes a message (seeded and
    // turned) plus decodedMessageOverheadBytes (the decoded-state cache's own estimate).
    const messageBytes = 290 + decodedMessageOverheadBytes;
    let storedBytes = conversations * seeded * messageBytes;
    const times: number[] = [];
    for (const until of checkpoints(totalTurns)) {
      const started = Date.now();
      // Each agent turns conversations of its own share (agent, agent + agents, ...) in random order.
      await Promise.all(
        Array.from({ length: agents }, async (_, agent) => {
          const share = Math.ceil((until - done) / agents);
          const client = clients[agent % connections]!;
          for (let turn = 0; turn < share; turn++) {
            const pick = Math.floor(random() * Math.ceil(conversations / agents)) * agents + agent;
            const measured = await turnRetryingUnavailable(client, ids[Math.min(pick, conversations - 1)]!, done + agent * share + turn);
            if (times.length < 100_000 || turn % 10 === 0) times.push(measured.total);
          }
          storedBytes += share * messageBytes;
        }),
      );
      done = until;
      const live = await inspector.liveMemory();
      console.log(
        `  ${store}: ${done.toLocaleString("en-US")} turns (${((Date.now() - started) / 1000).toFixed(0)} s, turn p50 ${ms(percentile(times, 50))}, ${unavailable} UNAVAILABLE sent again): RSS ${mb(sidecar.rssBytes())}; after a full GC heap in use ${mb(live.heapUsed)}, external ${mb(live.external)}, RSS ${mb(live.rss)}` +
          ` — beside the caches' bounds ${mb(boundSum)}${store === "memory" ? ` + the stored conversations (~${mb(storedBytes)} decoded)` : ""}`,
      );
      times.length = 0;
    }
    if (snapshotPrefix !== "") {
      const path = `${snapshotPrefix}-${store}.heapsnapshot`;
      await inspector.writeHeapSnapshot(path);
      console.log(`  ${store}: heap snapshot written to ${path}`);
    }
  } catch (error) {
    console.log(`  ${store}: the run stopped: ${error instanceof Error ? error.message : String(error)}`);
    throw error;
  } finally {
    inspector.close();
    for (const client of clients) client.close();
    await sidecar.stop();
    await redis?.stop();
  }
}

export async function run(): Promise<void> {
  console.log(
    `1,000,000 turns (issue 30): ${totalTurns.toLocaleString("en-US")} turns over ${conversations.toLocaleString("en-US")} conversations in random order (${seeded.toLocaleString("en-US")} messages each before, ~${(seeded + totalTurns / conversations).toLocaleString("en-US")} after), ${agents} agents at once, default flags; load average ${loadAverage()}`,
  );
  for (const store of stores) await turnStore(store);
}
