// `node dist/bench/fleet-postgres-commit.js`: the Postgres commit section of bench:fleet alone.
import { run } from "./fleet/postgres-commit.js";

await run();
