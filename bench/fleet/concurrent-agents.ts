// bench:fleet, concurrent agents and the idle turn:
// - 64 agents at once, each turning its own conversation of 100 stored ~1 KB messages (a Commit of
//   one ~1 KB message, then the stateful Compile: agent-turns.ts), through one real sidecar on the
//   memory store, on Redis and on Postgres (fsync off, as in the tests), over 8 HTTP/2
//   connections: turn p50 and p99. Target (issue 30): p99 <= 4x p50.
// - the turn after 1 s of idle (an agent waiting for its model) beside the same turn back to back,
//   and beside the bare node:http2 responder answering a compile-sized message (34.6 KB) after
//   the same idle and back to back: the part of the penalty any process here pays for having slept
//   (bench:idle-gap measures the same at gaps of 0-10 ms from Python).
// Turns per agent: CONTEXTD_FLEET_AGENT_TURNS (default 20); idle turns: CONTEXTD_FLEET_IDLE_TURNS (default 10).
import { startPostgres } from "../../test/support/postgres.js";
import { startRedis } from "../../test/support/redis.js";
import { startBuiltSidecar, startDoNothingResponder, type BuiltSidecar } from "../bench-processes.js";
import { MinimalGrpcClient } from "../minimal-grpc-client.js";
import { agentTurn, buildConversation, loadAverage, ms, percentile, verdict } from "./agent-turns.js";

const agents = 64;
const connections = 8;

async function concurrentTurns(sidecar: BuiltSidecar, label: string, turns: number): Promise<{ p50: number; p99: number; max: number }> {
  const clients = Array.from({ length: connections }, () => new MinimalGrpcClient(new URL(sidecar.url).host));
  const run = Date.now();
  try {
    const ids = Array.from({ length: agents }, (_, agent) => `agents-${run}-${label}-${agent}`);
    for (const [agent, id] of ids.entries()) await buildConversation(clients[agent % connections]!, id, 100);
    // One unmeasured turn each (the sidecar's first sight of each conversation is its cold path).
    await Promise.all(ids.map((id, agent) => agentTurn(clients[agent % connections]!, id, -1)));
    const times: number[] = [];
    await Promise.all(
      ids.map(async (id, agent) => {
        for (let turn = 0; turn < turns; turn++) times.push((await agentTurn(clients[agent % connections]!, id, turn)).total);
      }),
    );
    return { p50: percentile(times, 50), p99: percentile(times, 99), max: Math.max(...times) };
  } finally {
    for (const client of clients) client.close();
  }
}

/** p50 of `call` back to back and after `idleMs` of idle, interleaved call by call. */
async function afterIdle(call: () => Promise<unknown>, idleMs: number, count: number): Promise<{ busy: number; idle: number }> {
  for (let warm = 0; warm < 50; warm++) await call();
  const busy: number[] = [];
  const idle: number[] = [];
  for (let index = 0; index < count; index++) {
    await new Promise((resolve) => setTimeout(resolve, idleMs));
    let started = performance.now();
    await call();
    idle.push(performance.now() - started);
    for (let back = 0; back < 5; back++) {
      started = performance.now();
      await call();
      busy.push(performance.now() - started);
    }
  }
  return { busy: percentile(busy, 50), idle: percentile(idle, 50) };
}

export async function run(): Promise<void> {
  const turns = Number(process.env.CONTEXTD_FLEET_AGENT_TURNS ?? 20);
  const idleTurns = Number(process.env.CONTEXTD_FLEET_IDLE_TURNS ?? 10);
  const redis = await startRedis();
  const postgres = await startPostgres();
  const stores: [string, string[]][] = [
    ["memory", []],
    ["redis", ["--redis-url", redis.url]],
    ["postgres", ["--postgres-url", postgres.url]],
  ];
  try {
    console.log(`${agents} concurrent agents, ${turns} turns each, 100 stored messages per conversation, ${connections} connections; load average ${loadAverage()}`);
    for (const [label, args] of stores) {
      const sidecar = await startBuiltSidecar(args);
      try {
        const result = await concurrentTurns(sidecar, label, turns);
        console.log(
          `  ${label.padEnd(8)} turn p50 ${ms(result.p50)}  p99 ${ms(result.p99)}  max ${ms(result.max)}: p99 ${(result.p99 / result.p50).toFixed(2)}x p50 (target <= 4x: ${verdict(result.p99 <= 4 * result.p50)})`,
        );
      } finally {
        await sidecar.stop();
      }
    }
    const sidecar = await startBuiltSidecar([]);
    const responder = await startDoNothingResponder();
    const client = new MinimalGrpcClient(new URL(sidecar.url).host);
    const bare = new MinimalGrpcClient(responder.address);
    try {
      const id = `idle-${Date.now()}`;
      await buildConversation(client, id, 100);
      let turn = 0;
      const sidecarTurn = await afterIdle(() => agentTurn(client, id, turn++), 1_000, idleTurns);
      const bareCall = await afterIdle(() => bare.call("/bench.Floor/bytes/35430", Buffer.alloc(0)), 1_000, idleTurns);
      console.log(`turn after 1 s of idle (memory store, 100 stored messages), p50 of ${idleTurns}, interleaved with back-to-back calls:`);
      console.log(`  contextd turn:            back to back ${ms(sidecarTurn.busy)}, after 1 s idle ${ms(sidecarTurn.idle)} (${(sidecarTurn.idle / sidecarTurn.busy).toFixed(2)}x, +${ms(sidecarTurn.idle - sidecarTurn.busy)})`);
      console.log(`  bare node:http2, 34.6 KB: back to back ${ms(bareCall.busy)}, after 1 s idle ${ms(bareCall.idle)} (${(bareCall.idle / bareCall.busy).toFixed(2)}x, +${ms(bareCall.idle - bareCall.busy)})`);
    } finally {
      client.close();
      bare.close();
      responder.stop();
      await sidecar.stop();
    }
  } finally {
    await redis.stop();
    await postgres.destroy();
  }
}
