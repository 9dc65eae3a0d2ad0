// `node dist/bench/fleet-round-robin.js`: the round-robin section of bench:fleet alone.
import { run } from "./fleet/round-robin.js";

await run();
