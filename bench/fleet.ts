// `npm run bench:fleet` (issue 30): a fleet is not one warm sidecar. In one run, each section beside
// its anchor: a fresh sidecar's first turn at 1,000 / 10,000 / 100,000 messages beside a warm turn
// (cold-first-turn), the round-robin turn over two sidecars beside one sidecar's (round-robin),
// 10,000 conversations of 1,000 messages turned in random order beside one conversation
// (many-conversations), turn p50/p99 with 64 concurrent agents on memory, Redis and Postgres and the
// turn after 1 s of idle beside the bare responder's (concurrent-agents), the Postgres Commit beside
// a bare transaction (postgres-commit), and Redis Cluster commits through a master's kill with
// --redis-wait-replicas (cluster-failover), and the RSS and live heap after 1,000,000 turns of
// many conversations beside the caches' byte bounds (million-turns). Each section is also runnable alone
// (`node dist/bench/fleet-<section>.js`); CONTEXTD_FLEET_SECTIONS=round-robin,postgres-commit picks some.
// Every section prints its target and whether this run met it; the figures are wall-clock on this
// machine, so run it with the machine to itself.
import { run as clusterFailover } from "./fleet/cluster-failover.js";
import { run as coldFirstTurn } from "./fleet/cold-first-turn.js";
import { run as concurrentAgents } from "./fleet/concurrent-agents.js";
import { run as manyConversations } from "./fleet/many-conversations.js";
import { run as millionTurns } from "./fleet/million-turns.js";
import { run as postgresCommit } from "./fleet/postgres-commit.js";
import { run as roundRobin } from "./fleet/round-robin.js";

const sections: Record<string, () => Promise<void>> = {
  "cold-first-turn": coldFirstTurn,
  "round-robin": roundRobin,
  "many-conversations": manyConversations,
  "concurrent-agents": concurrentAgents,
  "postgres-commit": postgresCommit,
  "cluster-failover": clusterFailover,
  "million-turns": millionTurns,
};
const chosen = (process.env.CONTEXTD_FLEET_SECTIONS ?? Object.keys(sections).join(",")).split(",").map((name) => name.trim());
for (const name of chosen) {
  const section = sections[name];
  if (!section) throw new Error(`CONTEXTD_FLEET_SECTIONS: no section "${name}" (have ${Object.keys(sections).join(", ")})`);
  console.log(`\n== bench:fleet ${name}`);
  await section();
}
