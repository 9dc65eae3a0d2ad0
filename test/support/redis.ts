import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A real redis-server on a free loopback port, in a temporary directory (persistence off unless asked for). */
export interface RedisProcess {
  port: number;
  url: string;
  /** The running server's process id (for the benches' CPU figures). */
  pid(): number | undefined;
  /** Stops the server (SIGTERM) and waits for it to exit. */
  stop(): Promise<void>;
  /** Kills the server (SIGKILL: no goodbye to clients, replies in flight lost) and waits for it to exit. */
  kill(): Promise<void>;
  /** Starts it again on the same port (for outage tests). */
  restart(): Promise<void>;
}

export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, "close");
  return port;
}

/** Whether nothing listens on `port` of 127.0.0.1 now (a listen there succeeds). */
export async function portFree(port: number): Promise<boolean> {
  const server = createServer();
  server.listen(port, "127.0.0.1");
  const listened = await Promise.race([once(server, "listening").then(() => true), once(server, "error").then(() => false)]);
  if (listened) {
    server.close();
    await once(server, "close");
  }
  return listened;
}

export interface RedisOptions {
  /**
   * Append-only file with fsync on every write, so a stop/restart keeps every acknowledged write
   * (for outage tests). Off by default: persistence only slows the other suites down.
   */
  appendOnly?: boolean;
  /** More redis-server arguments, e.g. `["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"]`. */
  args?: string[];
}

export async function startRedis(options: RedisOptions = {}): Promise<RedisProcess> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "contextd-redis-"));
  let child: ChildProcess | undefined;
  const launch = async () => {
    const persistence = options.appendOnly ? ["--appendonly", "yes", "--appendfsync", "always"] : ["--appendonly", "no"];
    child = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", ...persistence, "--dir", dir, ...(options.args ?? [])], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`redis-server did not start: ${output}`)), 10_000);
      child!.once("exit", (code) => reject(new Error(`redis-server exited with ${code}: ${output}`)));
      child!.stdout!.on("data", (chunk: Buffer) => {
        output += chunk;
        if (output.includes("Ready to accept connections")) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
  };
  const end = async (signal: NodeJS.Signals) => {
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, "exit");
    child.kill(signal);
    await exited;
  };
  await launch();
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    pid: () => child?.pid,
    stop: () => end("SIGTERM"),
    kill: () => end("SIGKILL"),
    restart: launch,
  };
}
