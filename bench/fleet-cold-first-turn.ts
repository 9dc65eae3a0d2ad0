// `node dist/bench/fleet-cold-first-turn.js`: the cold-first-turn section of bench:fleet alone.
import { run } from "./fleet/cold-first-turn.js";

await run();
process.exit(0);
