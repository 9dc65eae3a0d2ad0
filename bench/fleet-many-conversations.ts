// `node dist/bench/fleet-many-conversations.js`: the many-conversations section of bench:fleet alone.
import { run } from "./fleet/many-conversations.js";

await run();
process.exit(0);
