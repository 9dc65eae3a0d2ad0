import { loadConfig } from "./server/config.js";
import { startServer } from "./server/server.js";

// Wiring only: read the configuration, start the server, stop it on SIGTERM/SIGINT.
const config = loadConfig(process.argv.slice(2), process.env);
const server = await startServer({ host: config.host, port: config.port });
console.log(
  JSON.stringify({
    level: "info",
    msg: "contextd listening",
    address: `${server.address.address}:${server.address.port}`,
    protocols: ["grpc", "grpc-web", "connect"],
    config: { ...config, redisUrl: config.redisUrl ? "(set)" : "" },
  }),
);
let stopping = false;
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.on(signal, async () => {
    if (stopping) return;
    stopping = true;
    await server.shutdown();
    console.log(JSON.stringify({ level: "info", msg: "contextd stopped", signal }));
    process.exit(0);
  });
}
