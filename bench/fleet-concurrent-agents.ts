// `node dist/bench/fleet-concurrent-agents.js`: the concurrent-agents and idle-turn section of bench:fleet alone.
import { run } from "./fleet/concurrent-agents.js";

await run();
