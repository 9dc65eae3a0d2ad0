// Starts a real contextd process on a port the OS picks, for the client's e2e tests. The tests run
// from a temporary project where the packed client is installed, so the sidecar's entry point
// comes from CONTEXTD_MAIN (scripts/test-installed.sh sets it to the repository's dist/src/main.js).
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { after, before } from "node:test";
import { Client } from "@contextd/client";

export interface Sidecar {
  address: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

export async function startSidecar(args: string[] = [], env: NodeJS.ProcessEnv = {}): Promise<Sidecar> {
  const main = process.env.CONTEXTD_MAIN;
  if (!main) throw new Error("CONTEXTD_MAIN must name the sidecar's dist/src/main.js");
  const port = args.includes("--port") ? [] : ["--port", "0"];
  const child = spawn(process.execPath, [main, ...port, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const lines = createInterface({ input: child.stdout! });
  const listening = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`sidecar did not start in 15 s: ${stderr}`)), 15_000);
    child.once("exit", (code) => reject(new Error(`sidecar exited with ${code} before listening: ${stderr}`)));
    lines.on("line", (line) => {
      try {
        const entry = JSON.parse(line) as { msg?: string; address?: string };
        if (entry.msg === "contextd listening" && entry.address) {
          clearTimeout(timer);
          resolve(Number(entry.address.slice(entry.address.lastIndexOf(":") + 1)));
        }
      } catch {
        // not a JSON log line
      }
    });
  });
  return {
    address: `127.0.0.1:${listening}`,
    process: child,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = once(child, "exit");
      child.kill("SIGTERM");
      await exited;
    },
  };
}

/** A fresh conversation id per test run, so that reruns never collide. */
export function freshId(prefix: string): string {
  return `${prefix}-${process.pid}-${Math.random().toString(36).slice(2, 10)}`;
}

/**
 * One sidecar and one ready client for a whole test file: started before its first test, both
 * stopped after its last. Tests read `client` once the file has started.
 */
export function sidecarForFile(args: string[] = []): { readonly client: Client } {
  let sidecar: Sidecar | undefined;
  let client: Client | undefined;
  before(async () => {
    sidecar = await startSidecar(args);
    client = new Client({ address: sidecar.address });
    await client.waitReady();
  });
  after(async () => {
    client?.close();
    await sidecar?.stop();
  });
  return {
    get client(): Client {
      if (!client) throw new Error("the test file's sidecar has not started");
      return client;
    },
  };
}
