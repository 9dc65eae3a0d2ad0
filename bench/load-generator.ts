import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The grpc-go load generator in bench/loadgen, for the benches: built once per run (the Go
 * toolchain is part of this project's setup), then run per measurement as a child process.
 */
const sourceDirectory = fileURLToPath(new URL("../../bench/loadgen", import.meta.url));

export interface LoadResult {
  /** Calls measured, after the warm-up. */
  calls: number;
  /** Calls made during the warm-up (the server worked through them too). */
  warmupCalls: number;
  seconds: number;
  p50Ms: number;
  p99Ms: number;
}

export interface LoadOptions {
  address: string;
  /** "/package.Service/Method". */
  method: string;
  /** One request sent by every call, or… */
  requestFile?: string;
  /** …a file of distinct requests (4-byte big-endian length + message each), one per call. */
  requestsFile?: string;
  concurrency: number;
  seconds: number;
  warmupSeconds: number;
  /** HTTP/2 connections the calls are spread over (1 when not given). */
  connections?: number;
}

/** Builds the load generator into `directory` and returns the binary's path. */
export function buildLoadGenerator(directory: string): string {
  const binary = join(directory, "loadgen");
  execFileSync("go", ["build", "-o", binary, "."], { cwd: sourceDirectory, stdio: "inherit" });
  return binary;
}

export function runLoadGenerator(binary: string, options: LoadOptions): LoadResult {
  const args = [
    "-address", options.address,
    "-method", options.method,
    "-concurrency", String(options.concurrency),
    "-duration", `${options.seconds}s`,
    "-warmup", `${options.warmupSeconds}s`,
  ];
  if (options.connections !== undefined) args.push("-connections", String(options.connections));
  if (options.requestsFile !== undefined) args.push("-requests", options.requestsFile);
  else args.push("-request", options.requestFile ?? "");
  return JSON.parse(execFileSync(binary, args).toString()) as LoadResult;
}

/** Requests for `-requests`: each a 4-byte big-endian length, then the message. */
export function lengthPrefixed(messages: Uint8Array[]): Buffer {
  const total = messages.reduce((sum, message) => sum + 4 + message.length, 0);
  const bytes = Buffer.alloc(total);
  let offset = 0;
  for (const message of messages) {
    bytes.writeUInt32BE(message.length, offset);
    bytes.set(message, offset + 4);
    offset += 4 + message.length;
  }
  return bytes;
}
