// `node dist/bench/fleet-million-turns.js`: the million-turns section of bench:fleet alone.
import { run } from "./fleet/million-turns.js";

await run();
process.exit(0);
