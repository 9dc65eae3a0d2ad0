import { mkdtempSync } from "node:fs";
import { tmpdir, loadavg } from "node:os";
import { join } from "node:path";
import { buildLoadGenerator } from "./load-generator.js";
import { postgresStoreBench } from "./store-postgres.js";
const directory = mkdtempSync(join(tmpdir(), "pgb-"));
console.log("load", loadavg());
await postgresStoreBench(buildLoadGenerator(directory), directory);
console.log("load", loadavg());
