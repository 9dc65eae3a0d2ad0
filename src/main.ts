#!/usr/bin/env node
import { readFileSync } from "node:fs";
import { composeSidecar, openConfiguredStore } from "./server/composition-root.js";
import { loadConfig, printableConfig, usage, type Config } from "./server/operations/config.js";
import { ServingStatus } from "./server/operations/health.js";
import { createLogger, type Logger } from "./server/operations/logger.js";
import { tracingFromEnvironment } from "./server/operations/tracing.js";
import { isWorkerProcess, reportListening, shareWorkerMetrics, shareWorkerTelemetry, superviseWorkers } from "./server/operations/worker-processes.js";
import { serveSidecar } from "./server/server.js";

// Wiring only: the admin command when asked for; else read the configuration, compose the sidecar from it (server/composition-root.ts),
// serve it, stop on SIGTERM/SIGINT;
// with --workers N, the primary process forks N workers that each do that (see worker-processes.ts).
const argv = process.argv.slice(2);
// `contextd conversations ...`: the admin command, a client of a running sidecar (src/admin).
if (argv[0] === "conversations") {
  const { runConversationsCommand } = await import("./admin/conversations-command.js");
  process.exit(await runConversationsCommand(argv.slice(1), process.env));
}
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
if (config.workers > 1 && !isWorkerProcess()) await supervise(config, logger);
else await serve(config, logger);

/** The primary of `--workers N`: serves nothing itself; forks the workers, announces them, drains them on a signal. */
async function supervise(config: Config, logger: Logger): Promise<void> {
  const workers = superviseWorkers(config.workers, logger, { batchEvents: config.telemetryQueue, batchBytes: config.telemetryQueueBytes });
  let listening;
  try {
    listening = await workers.listening;
  } catch (error) {
    console.error(`contextd: ${error instanceof Error ? error.message : String(error)}`);
    process.exit(1);
  }
  logger.announce("contextd listening", {
    address: listening.address,
    protocols: ["grpc", "grpc-web", "connect"],
    metrics: config.metricsPath,
    inspector: config.inspector ? "/inspector/" : "off",
    workers: listening.pids,
    config: printableConfig(config),
  });
  let stopping = false;
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    process.on(signal, async () => {
      if (stopping) return;
      stopping = true;
      logger.announce("contextd stopping", { signal, graceMs: config.shutdownGraceMs, workers: config.workers });
      const drained = await workers.stop(signal, config.shutdownGraceMs);
      logger.announce("contextd stopped", { signal, ...(drained ? {} : { killed: "workers still running after the grace period + 5 s" }) });
      process.exit(drained ? 0 : 1);
    });
  }
}

/** One sidecar: this process alone, or one worker of `--workers N`. */
async function serve(config: Config, logger: Logger): Promise<void> {
  // OpenTelemetry tracing, when the OTEL_* environment asks for it (off otherwise).
  const tracing = await tracingFromEnvironment(process.env, { queueBytes: config.traceQueueBytes }).catch(fail);
  // One codec for the store and the server: the encodings of the states the store hands out are
  // reused by the responses that carry them.
  const { codec, store } = await openConfiguredStore(config, redisTlsCa(config));
  const worker = isWorkerProcess();
  const sidecar = (() => {
    try {
      return composeSidecar(config, {
        store,
        codec,
        logger,
        tracing,
        ...(worker ? { gatherMetrics: shareWorkerMetrics, shareTelemetry: (telemetry) => shareWorkerTelemetry(telemetry, { batchEvents: config.telemetryQueue, batchBytes: config.telemetryQueueBytes }) } : {}),
      });
    } catch (error) {
      return fail(error);
    }
  })();
  const server = await serveSidecar(sidecar).catch(fail);
  if (config.storeRequired && server.health.current !== ServingStatus.SERVING) {
    console.error(`contextd: --store-required true: the store is not reachable: ${server.health.reason}`);
    await server.shutdown(0);
    await Promise.race([store.close(), new Promise((resolve) => setTimeout(resolve, 2_000).unref())]);
    process.exit(1);
  }
  const address = `${server.address.address}:${server.address.port}`;
  // The test launchers (TypeScript, Go, Python) wait for this line and read `address` from it; with
  // --workers the primary says it once every worker listens.
  if (worker) reportListening(address, server.address.port);
  else {
    logger.announce("contextd listening", {
      address,
      protocols: ["grpc", "grpc-web", "connect"],
      tls: server.tls.enabled ? (server.tls.clientCertificates ? "on, client certificates required" : "on") : "off",
      store: { kind: config.redisClusterNodes.length > 0 ? "redis-cluster" : config.redisUrl ? "redis" : config.postgresUrl ? "postgres" : "memory", reachable: server.health.current === ServingStatus.SERVING, ...(server.health.reason !== "" ? { error: server.health.reason } : {}) },
      metrics: config.metricsPath,
      tracing: tracing ? "otlp" : "off",
      inspector: config.inspector ? "/inspector/" : "off",
      config: printableConfig(config),
    });
  }
  const whose = worker ? { pid: process.pid } : {};
  let stopping = false;
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    process.on(signal, async () => {
      if (stopping) return;
      stopping = true;
      logger.announce("contextd stopping", { signal, graceMs: config.shutdownGraceMs, ...whose });
      await server.shutdown();
      // Spans still buffered leave now, within the same bound as the store.
      if (tracing) await Promise.race([tracing.shutdown(), new Promise((resolve) => setTimeout(resolve, 2_000).unref())]);
      // A store that cannot close (Redis unreachable) must not keep the process alive.
      await Promise.race([store.close(), new Promise((resolve) => setTimeout(resolve, 2_000).unref())]);
      logger.announce("contextd stopped", { signal, ...whose });
      process.exit(0);
    });
  }
}

/** The CA file `--redis-tls-ca` names, read once at start (an unreadable file stops the start). */
function redisTlsCa(config: Config): { tlsCa?: string } {
  if (config.redisTlsCa === "") return {};
  try {
    return { tlsCa: readFileSync(config.redisTlsCa, "utf8") };
  } catch (error) {
    return fail(new Error(`--redis-tls-ca ${config.redisTlsCa}: ${(error as Error).message}`));
  }
}
