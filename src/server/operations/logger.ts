import type { Config } from "./config.js";

export type LogLevel = Config["logLevel"];

const rank: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/** Structured logs: one JSON object per line on stdout, with `level`, `time` and `msg`. */
export interface Logger {
  enabled(level: LogLevel): boolean;
  log(level: LogLevel, msg: string, fields?: Record<string, unknown>): void;
  /** Lifecycle lines ("contextd listening", "contextd stopped"), printed at every level: launchers wait for them. */
  announce(msg: string, fields?: Record<string, unknown>): void;
}

export function createLogger(level: LogLevel, write: (line: string) => void = (line) => process.stdout.write(line + "\n")): Logger {
  return {
    enabled: (wanted) => rank[wanted] >= rank[level],
    log(wanted, msg, fields = {}) {
      if (rank[wanted] < rank[level]) return;
      write(JSON.stringify({ level: wanted, time: new Date().toISOString(), msg, ...fields }, jsonSafe));
    },
    announce(msg, fields = {}) {
      write(JSON.stringify({ level: "info", time: new Date().toISOString(), msg, ...fields }, jsonSafe));
    },
  };
}

// int64 fields are bigints; JSON.stringify throws on them.
function jsonSafe(_key: string, value: unknown): unknown {
  return typeof value === "bigint" ? value.toString() : value;
}
