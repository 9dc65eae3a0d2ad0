// Issue 30, "a cold compile costs what its budget keeps": the first agent turn on a sidecar that
// has never seen the conversation (a deploy, a restart), beside a warm turn of the sidecar that
// wrote it, at 1,000 / 10,000 / 100,000 stored ~250-byte messages. Target: <= 20x warm at 100,000.
// Each fresh sidecar first makes 30 turns on a 100-message conversation of its own (a pod serves
// other traffic before a long conversation comes back; without it the JIT's warm-up is measured),
// then on the long conversation: a fresh sidecar's first Compile with no Commit before it (read
// and counted from the stored tail), a fresh sidecar's first turn — its Commit (planned on the
// stored tail on Redis and Postgres: the last messages and the id index) and its Compile, split —
// and the Commits of its next 15 turns (planned on the tail the first one kept, with no read),
// and the same turn on a sidecar started with `--stored-token-estimator none`, which counts the
// history itself (the cost before stored counts).
// Env: CONTEXTD_FLEET_SIZES=1000,10000 (default 1000,10000,100000), CONTEXTD_FLEET_STORES=redis,postgres (default redis).
import { startPostgres } from "../../test/support/postgres.js";
import { startRedis } from "../../test/support/redis.js";
import { startBuiltSidecar } from "../bench-processes.js";
import { MinimalGrpcClient } from "../minimal-grpc-client.js";
import { compilePath, compileRequest, mb, ms, percentile, seedConversation, agentTurn } from "./agent-turns.js";
import { loadavg } from "node:os";

const sizes = (process.env.CONTEXTD_FLEET_SIZES ?? "1000,10000,100000").split(",").map(Number);
const storeNames = (process.env.CONTEXTD_FLEET_STORES ?? "redis").split(",");

async function withClient<T>(url: string, use: (client: MinimalGrpcClient) => Promise<T>): Promise<T> {
  const client = new MinimalGrpcClient(new URL(url).host);
  try {
    return await use(client);
  } finally {
    client.close();
  }
}

/** A fresh sidecar on `storeArgs`, its JIT warmed on a conversation of its own, then `measure`. */
async function onFreshSidecar<T>(storeArgs: string[], extraArgs: string[], label: string, measure: (client: MinimalGrpcClient) => Promise<T>): Promise<{ result: T; rss: number }> {
  const sidecar = await startBuiltSidecar([...storeArgs, ...extraArgs]);
  try {
    return await withClient(sidecar.url, async (client) => {
      const own = `fleet-cold-jit-${label}-${Date.now()}`;
      await seedConversation(client, own, 100);
      for (let index = 0; index < 30; index++) await agentTurn(client, own, index);
      const result = await measure(client);
      return { result, rss: sidecar.rssBytes() };
    });
  } finally {
    await sidecar.stop();
  }
}

export async function run(): Promise<void> {
  console.log(`cold first turn (issue 30): load average ${loadavg().map((value) => value.toFixed(2)).join(" / ")} (the cores are shared: single figures move by tens of percent)`);
  for (const storeName of storeNames) {
    const redis = storeName === "redis" ? await startRedis() : undefined;
    const postgres = storeName === "postgres" ? await startPostgres() : undefined;
    const storeArgs = redis ? ["--redis-url", redis.url] : ["--postgres-url", postgres!.url];
    try {
      for (const size of sizes) {
        const conversationId = `fleet-cold-${storeName}-${size}-${Date.now()}`;
        const writer = await startBuiltSidecar(storeArgs);
        let warm: { total: number; commit: number };
        try {
          warm = await withClient(writer.url, async (client) => {
            await seedConversation(client, conversationId, size);
            const totals: number[] = [];
            const commits: number[] = [];
            const count = size >= 100_000 ? 20 : 40;
            for (let index = 0; index < count + 3; index++) {
              const measured = await agentTurn(client, conversationId, index);
              if (index >= 3) totals.push(measured.total);
              if (index >= 3) commits.push(measured.commit);
            }
            return { total: percentile(totals, 50), commit: percentile(commits, 50) };
          });
        } finally {
          await writer.stop();
        }
        let turnNumber = 1_000;
        const firstTurn = (client: MinimalGrpcClient) => agentTurn(client, conversationId, turnNumber++);
        // The compile alone first: the sidecar counting for itself commits an entry without counts.
        const compileAlone = await onFreshSidecar(storeArgs, [], "compile", async (client) => {
          const started = process.hrtime.bigint();
          await client.call(compilePath, compileRequest(conversationId));
          return Number(process.hrtime.bigint() - started) / 1e6;
        });
        // Its next turns: their Commits are planned on the tail the first one kept (one round trip, the write).
        const stored = await onFreshSidecar(storeArgs, [], "stored", async (client) => {
          const first = await firstTurn(client);
          const next: number[] = [];
          for (let index = 0; index < 15; index++) next.push((await firstTurn(client)).commit);
          return { ...first, nextCommit: percentile(next, 50) };
        });
        // That sidecar's Compile reads and counts the whole history: on a loaded machine its read
        // can pass the Redis command timeout (2 s), which is reported in place of its figures.
        const counting = await onFreshSidecar(storeArgs, ["--stored-token-estimator", "none"], "none", firstTurn).catch((error: unknown) => (error as Error).message);
        const countingFigures =
          typeof counting === "string"
            ? `failed (${counting.slice(0, 160)})`
            : `${ms(counting.result.total)} (compile ${ms(counting.result.compile)}) = ${(counting.result.total / warm.total).toFixed(1)}x`;
        const ratio = stored.result.total / warm.total;
        console.log(
          `  ${storeName} ${size.toLocaleString("en-US")} messages: warm turn p50 ${ms(warm.total)}; fresh sidecar's first turn ${ms(stored.result.total)} (commit ${ms(stored.result.commit)}, compile ${ms(stored.result.compile)}) = ${ratio.toFixed(1)}x warm` +
            `${size >= 100_000 ? ` (target <= 20x: ${ratio <= 20 ? "met" : "NOT met"})` : ""}` +
            `, its next 15 turns' commit p50 ${ms(stored.result.nextCommit)} against the warm sidecar's commit p50 ${ms(warm.commit)}` +
            `; counting the history itself (--stored-token-estimator none) ${countingFigures};` +
            ` first Compile alone ${ms(compileAlone.result)}; fresh sidecar RSS ${mb(stored.rss)}`,
        );
      }
    } finally {
      await Promise.all([redis?.stop(), postgres?.destroy()]);
    }
  }
  console.log("  anchors (issue 30, quiet machine, Python client): first turn at 100,000 1.66-2.05 s against a warm 7.6-10.4 ms (197-219x); first compile at 10,000 with o200k 419-719 ms");
}
