import { parseArgs } from "node:util";

/** Everything the sidecar can be configured with. Flags win over `CONTEXTD_*` environment variables. */
export interface Config {
  /** Interface to bind; loopback by default, "0.0.0.0" in a container. */
  host: string;
  /** The one port serving gRPC, gRPC-Web and Connect; 0 picks a free port. */
  port: number;
  /** Redis URL for the production store; empty = the embedded in-memory store. */
  redisUrl: string;
  /** Log level: "debug" logs one line per RPC, "info" start/stop and errors, "error" only errors. */
  logLevel: "debug" | "info" | "error";
}

const defaults: Config = { host: "127.0.0.1", port: 7420, redisUrl: "", logLevel: "info" };

export function loadConfig(argv: string[], env: NodeJS.ProcessEnv): Config {
  const { values } = parseArgs({
    args: argv,
    options: {
      host: { type: "string" },
      port: { type: "string" },
      "redis-url": { type: "string" },
      "log-level": { type: "string" },
    },
    strict: true,
  });
  const config: Config = {
    host: values.host ?? env.CONTEXTD_HOST ?? defaults.host,
    port: parsePort(values.port ?? env.CONTEXTD_PORT ?? String(defaults.port)),
    redisUrl: values["redis-url"] ?? env.CONTEXTD_REDIS_URL ?? defaults.redisUrl,
    logLevel: parseLogLevel(values["log-level"] ?? env.CONTEXTD_LOG_LEVEL ?? defaults.logLevel),
  };
  return config;
}

function parsePort(text: string): number {
  const port = Number(text);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`invalid port "${text}": want an integer from 0 to 65535 (--port or CONTEXTD_PORT)`);
  }
  return port;
}

function parseLogLevel(text: string): Config["logLevel"] {
  if (text === "debug" || text === "info" || text === "error") return text;
  throw new Error(`invalid log level "${text}": want debug, info or error (--log-level or CONTEXTD_LOG_LEVEL)`);
}
