// bench:fleet, round-robin: two real sidecars on one Redis take an agent's turns in turn (turn i on
// sidecar i % 2, as a round-robin balancer would send them), so each finds the conversation one
// version ahead of the copy it cached. Beside it, in the same run, the warm turn: the same turns on
// one sidecar. Target (issue 30): the round-robin turn <= 1.5x the warm turn. Messages:
// CONTEXTD_FLEET_ROUND_ROBIN_SIZE (default 10,000; the issue measured 100,000), turns:
// CONTEXTD_FLEET_TURNS (default 40). A third line, the same alternation over two conversations
// (each sidecar turns its own, so no copy is ever behind), is the round-robin's floor without a
// catch-up: what the alternation of two processes on the loaded cores costs by itself.
import { startRedis } from "../../test/support/redis.js";
import { startBuiltSidecar } from "../bench-processes.js";
import { MinimalGrpcClient } from "../minimal-grpc-client.js";
import { agentTurn, seedConversation, loadAverage, ms, percentile, verdict, type TurnTime } from "./agent-turns.js";

export async function run(): Promise<void> {
  const size = Number(process.env.CONTEXTD_FLEET_ROUND_ROBIN_SIZE ?? 10_000);
  const turns = Number(process.env.CONTEXTD_FLEET_TURNS ?? 40);
  const redis = await startRedis();
  const nodeArgs = process.env.CONTEXTD_BENCH_CPU_PROFILE ? ["--cpu-prof", "--cpu-prof-dir", process.env.CONTEXTD_BENCH_CPU_PROFILE] : [];
  const sidecars = await Promise.all([0, 1].map(() => startBuiltSidecar(["--redis-url", redis.url], nodeArgs)));
  const clients = sidecars.map((sidecar) => new MinimalGrpcClient(new URL(sidecar.url).host));
  const id = `round-robin-${Date.now()}`;
  try {
    console.log(`round-robin over two sidecars on one Redis, ${size.toLocaleString("en-US")} stored ~250-byte messages, ${turns} turns each way; load average ${loadAverage()}`);
    // Each sidecar warms up on its own conversation first (the JIT), then both have read the
    // measured one (a sidecar's first sight of a conversation is the cold path, not this one).
    for (const [index, client] of clients.entries()) {
      await seedConversation(client, `${id}-warm-${index}`, 100);
      for (let turn = 0; turn < 100; turn++) await agentTurn(client, `${id}-warm-${index}`, turn);
    }
    await seedConversation(clients[0]!, id, size);
    for (const [index, client] of clients.entries()) await agentTurn(client, id, -1 - index);
    const own = clients.map((_, index) => `${id}-own-${index}`);
    for (const [index, client] of clients.entries()) {
      await seedConversation(client, own[index]!, size);
      await agentTurn(client, own[index]!, -1);
    }
    const warm: TurnTime[] = [];
    const roundRobin: TurnTime[] = [];
    const alternating: TurnTime[] = [];
    // Alternating blocks, so the machine's other load falls on both alike.
    for (let block = 0; block < 4; block++) {
      for (let turn = 0; turn < turns / 4; turn++) warm.push(await agentTurn(clients[0]!, id, block * 1_000 + turn));
      for (let turn = 0; turn < turns / 4; turn++) roundRobin.push(await agentTurn(clients[turn % 2]!, id, block * 1_000 + 500 + turn));
      for (let turn = 0; turn < turns / 4; turn++) alternating.push(await agentTurn(clients[turn % 2]!, own[turn % 2]!, block * 1_000 + 500 + turn));
    }
    const line = (label: string, times: TurnTime[]) => {
      const totals = times.map((time) => time.total);
      const commits = times.map((time) => time.commit);
      const compiles = times.map((time) => time.total - time.commit);
      console.log(`  ${label} p50 ${ms(percentile(totals, 50))}  p99 ${ms(percentile(totals, 99))}  (commit p50 ${ms(percentile(commits, 50))}, compile p50 ${ms(percentile(compiles, 50))})`);
      return percentile(totals, 50);
    };
    const warmP50 = line("warm turn (one sidecar):        ", warm);
    const roundRobinP50 = line("round-robin turn (two sidecars):", roundRobin);
    const alternatingP50 = line("alternating, own conversations: ", alternating);
    console.log(`  target: round-robin p50 <= 1.5x the warm turn: ${(roundRobinP50 / warmP50).toFixed(2)}x, ${verdict(roundRobinP50 <= 1.5 * warmP50)}`);
    console.log(`  of which the alternation alone (no copy behind): ${(alternatingP50 / warmP50).toFixed(2)}x; the catch-up: ${(roundRobinP50 / alternatingP50).toFixed(2)}x of that`);
    // What the commit notices did (docs/stores.md, "Catching up before the next turn"): reads made between the turns, not before a write.
    const counter = async (url: string, name: string) => Number(new RegExp(`^${name} (\\d+)`, "m").exec(await (await fetch(`${url}/metrics`)).text())?.[1] ?? 0);
    const catchUps = (await Promise.all(sidecars.map((sidecar) => counter(sidecar.url, "contextd_prefetch_catch_ups_total")))).reduce((sum, count) => sum + count, 0);
    console.log(`  catch-ups started by commit notices, both sidecars: ${catchUps} over ${roundRobin.length} round-robin and ${warm.length} warm turns`);
  } finally {
    for (const client of clients) client.close();
    await Promise.all(sidecars.map((sidecar) => sidecar.stop()));
    await redis.stop();
  }
}
