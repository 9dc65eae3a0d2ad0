import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll } from "vitest";
import { grpcJsClient } from "./grpc-js.js";
import { HeapInspector, inspectorAddress, inspectorNodeArg } from "./heap-inspector.js";
import { startPostgres } from "./postgres.js";
import { startRedis } from "./redis.js";

const mainScript = fileURLToPath(new URL("../../dist/src/main.js", import.meta.url));

/** A real contextd process, started from the built `dist/` on a port the OS picks. */
export interface Sidecar {
  port: number;
  url: string;
  process: ChildProcess;
  /** Every line the process wrote to stdout so far (JSON logs). */
  logs: string[];
  /** SIGTERM, then wait for exit; returns the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** Its V8 inspector, when started with `{ inspect: true }` (heap-inspector.ts). */
  inspector(): Promise<HeapInspector>;
}

/** How the sidecar process is confined, as an operator or an attack test would run it. */
export interface SidecarLimits {
  /** `--max-old-space-size` of its V8 heap, in MB: an out-of-memory attack crashes it instead of the machine. */
  heapMb?: number;
  /** Its soft open-file limit (`ulimit -n`). */
  openFiles?: number;
  /** Open the V8 inspector on a loopback port, for live-heap figures (`Sidecar.inspector`). */
  inspect?: boolean;
}

export async function startSidecar(args: string[] = [], env: NodeJS.ProcessEnv = {}, limits: SidecarLimits = {}): Promise<Sidecar> {
  const nodeArgs = [...(limits.heapMb ? [`--max-old-space-size=${limits.heapMb}`] : []), ...(limits.inspect ? [inspectorNodeArg] : []), mainScript, "--port", "0", ...args];
  const [command, commandArgs] = limits.openFiles
    ? ["sh", ["-c", `ulimit -n ${limits.openFiles} && exec "$0" "$@"`, process.execPath, ...nodeArgs]]
    : [process.execPath, nodeArgs];
  const child = spawn(command, commandArgs, {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const logs: string[] = [];
  let stderr = "";
  child.stderr!.on("data", (chunk) => (stderr += chunk));
  const inspecting = limits.inspect ? inspectorAddress(child.stderr!) : undefined;
  const lines = createInterface({ input: child.stdout! });
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`sidecar did not start in 15 s: ${stderr}`)), 15_000);
    child.once("exit", (code) => reject(new Error(`sidecar exited with ${code} before listening: ${stderr}`)));
    lines.on("line", (line) => {
      logs.push(line);
      try {
        const entry = JSON.parse(line) as { msg?: string; address?: string };
        if (entry.msg === "contextd listening" && entry.address) {
          clearTimeout(timer);
          resolve(Number(entry.address.slice(entry.address.lastIndexOf(":") + 1)));
        }
      } catch {
        // Not a JSON log line; kept in `logs` for the test to read.
      }
    });
  });
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    process: child,
    logs,
    async inspector() {
      if (!inspecting) throw new Error("the sidecar was started without { inspect: true }");
      return HeapInspector.connect(await inspecting);
    },
    async stop(signal = "SIGTERM") {
      if (child.exitCode !== null) return child.exitCode;
      const exited = once(child, "exit");
      child.kill(signal);
      const [code] = (await exited) as [number | null];
      return code;
    },
  };
}

/**
 * The stores a sidecar can run on, for suites that run once per store (`describe.each`): the
 * sidecar arguments for each, and how to stop what was started for it (a real redis-server, a
 * real PostgreSQL).
 */
/** Starts what one of `sidecarStores` needs: the sidecar arguments, and how to stop it. */
export type StoreBackend = () => Promise<{ args: string[]; stop?: () => Promise<void> }>;

export const sidecarStores: [name: string, start: StoreBackend][] = [
  ["memory store", async () => ({ args: [] })],
  [
    "redis store",
    async () => {
      const redis = await startRedis();
      return { args: ["--redis-url", redis.url], stop: () => redis.stop() };
    },
  ],
  [
    "postgres store",
    async () => {
      const postgres = await startPostgres();
      return { args: ["--postgres-url", postgres.url], stop: () => postgres.destroy() };
    },
  ],
];

/**
 * A sidecar on `backend` (with `args` besides) and a grpc-js client to it for the tests of the enclosing describe block:
 * started before them, stopped (client, sidecar, then the store) after. Read its fields inside tests.
 */
export function sidecarForSuite(backend: StoreBackend, args: string[] = []): { readonly sidecar: Sidecar; readonly client: ReturnType<typeof grpcJsClient> } {
  let sidecar: Sidecar | undefined;
  let client: ReturnType<typeof grpcJsClient> | undefined;
  let stopBackend: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    const started = await backend();
    stopBackend = started.stop;
    sidecar = await startSidecar([...started.args, ...args]);
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
    await stopBackend?.();
  });
  return {
    get sidecar() {
      if (!sidecar) throw new Error("the sidecar is started in beforeAll");
      return sidecar;
    },
    get client() {
      if (!client) throw new Error("the client is made in beforeAll");
      return client;
    },
  };
}
