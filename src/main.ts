#!/usr/bin/env node
import { readFileSync } from "node:fs";
import { Codec } from "./codec/codec.js";
import { loadConfig, printableConfig, usage } from "./server/operations/config.js";
import { ServingStatus } from "./server/operations/health.js";
import { createLogger } from "./server/operations/logger.js";
import { startServer } from "./server/server.js";
import { createConversationStore } from "./store/create-conversation-store.js";

// Wiring only: read the configuration, build the store, start the server, stop on SIGTERM/SIGINT.
const argv = process.argv.slice(2);
if (argv.includes("--help") || argv.includes("-h")) {
  console.log(usage());
  process.exit(0);
}
if (argv.includes("--version")) {
  const { version } = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };
  console.log(`contextd ${version}`);
  process.exit(0);
}
const fail = (error: unknown): never => {
  console.error(`contextd: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(2);
};
const config = (() => {
  try {
    return loadConfig(argv, process.env);
  } catch (error) {
    return fail(error);
  }
})();
const logger = createLogger(config.logLevel);
// One codec for the store and the server: the encodings of the states the store hands out are
// reused by the responses that carry them.
const codec = new Codec({ recentMessageBytes: config.recentMessageBytes, retainedEncodingBytes: config.retainedEncodingBytes });
const store = await createConversationStore(config.redisUrl, codec);
const server = await startServer({ ...config, store, codec, logger }).catch(fail);
// The test launchers (TypeScript, Go, Python) wait for this line and read `address` from it.
logger.announce("contextd listening", {
  address: `${server.address.address}:${server.address.port}`,
  protocols: ["grpc", "grpc-web", "connect"],
  tls: server.tls.enabled ? (server.tls.clientCertificates ? "on, client certificates required" : "on") : "off",
  store: { kind: config.redisUrl ? "redis" : "memory", reachable: server.health.current === ServingStatus.SERVING },
  metrics: config.metricsPath,
  config: printableConfig(config),
});

let stopping = false;
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.on(signal, async () => {
    if (stopping) return;
    stopping = true;
    logger.announce("contextd stopping", { signal, graceMs: config.shutdownGraceMs });
    await server.shutdown();
    // A store that cannot close (Redis unreachable) must not keep the process alive.
    await Promise.race([store.close(), new Promise((resolve) => setTimeout(resolve, 2_000).unref())]);
    logger.announce("contextd stopped", { signal });
    process.exit(0);
  });
}
