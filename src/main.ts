import { loadConfig } from "./server/config.js";
import { startServer } from "./server/server.js";
import { createConversationStore } from "./store/create-conversation-store.js";

// Wiring only: read the configuration, start the server, stop it on SIGTERM/SIGINT.
const config = loadConfig(process.argv.slice(2), process.env);
const store = await createConversationStore(config.redisUrl);
const server = await startServer({ host: config.host, port: config.port, store });
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
    await store.close();
    console.log(JSON.stringify({ level: "info", msg: "contextd stopped", signal }));
    process.exit(0);
  });
}
