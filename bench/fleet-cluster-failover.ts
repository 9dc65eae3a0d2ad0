// `node dist/bench/fleet-cluster-failover.js`: the Redis Cluster failover section of bench:fleet alone.
import { run } from "./fleet/cluster-failover.js";

await run();
