// The child processes the benches drive: the built sidecar and the do-nothing gRPC responder.
// Shared by bench:store and bench:scale so both measure the same processes the same way.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { HeapInspector, inspectorAddress, inspectorNodeArg } from "../test/support/heap-inspector.js";

export interface BuiltSidecar {
  url: string;
  /** The sidecar's process id (for its CPU time in /proc). */
  pid: number;
  /** The sidecar's resident set size now, from /proc (Linux). */
  rssBytes(): number;
  /** Its processes: the one process, or with --workers the primary and then every worker it announced. */
  pids: number[];
  /** Its V8 inspector (started with `{ inspect: true }` and test/support/heap-inspector.ts's node argument). */
  inspector(): Promise<HeapInspector>;
  stop(): Promise<void>;
}

/**
 * The built sidecar, next to this file in dist/ (test/support/sidecar.ts resolves dist/ from the
 * source tree, which does not hold once compiled), with `args` after `--port 0`, and `nodeArgs`
 * (such as `--cpu-prof`) given to node itself; with --workers the workers inherit them. `main`: another
 * build's dist/src/main.js, to compare two builds with one bench.
 */
export async function startBuiltSidecar(args: string[], nodeArgs: string[] = [], options: { inspect?: boolean; main?: string } = {}): Promise<BuiltSidecar> {
  const main = options.main ?? fileURLToPath(new URL("../src/main.js", import.meta.url));
  const child = spawn(process.execPath, [...nodeArgs, ...(options.inspect ? [inspectorNodeArg] : []), main, "--port", "0", ...args], { stdio: ["ignore", "pipe", options.inspect ? "pipe" : "inherit"] });
  // The inspector's address comes on stderr; everything else there is passed on.
  const address = options.inspect ? inspectorAddress(child.stderr!) : undefined;
  if (options.inspect) child.stderr!.on("data", (chunk: Buffer) => process.stderr.write(chunk));
  let workers: number[] = [];
  const port = await new Promise<number>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`sidecar exited with ${code}`)));
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const entry = JSON.parse(line) as { msg?: string; address?: string; workers?: number[] };
      if (entry.msg === "contextd listening" && entry.address) {
        workers = entry.workers ?? [];
        resolve(Number(entry.address.slice(entry.address.lastIndexOf(":") + 1)));
      }
    });
  });
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    pids: [child.pid!, ...workers],
    inspector: async () => {
      if (!address) throw new Error("the sidecar was started without { inspect: true }");
      return HeapInspector.connect(await address);
    },
    rssBytes: () => Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"))![1]) * 1024,
    stop: () => new Promise<void>((resolve) => (child.exitCode !== null ? resolve() : (child.once("exit", () => resolve()), child.kill("SIGTERM")))),
  };
}

/** bench/do-nothing-grpc-responder.ts in a child process (a load generator may block this one's event loop). */
export async function startDoNothingResponder(): Promise<{ address: string; stop: () => void }> {
  const script = fileURLToPath(new URL("./do-nothing-grpc-responder.js", import.meta.url));
  const child = spawn(process.execPath, [script], { stdio: ["ignore", "pipe", "inherit"] });
  const [line] = (await once(createInterface({ input: child.stdout! }), "line")) as [string];
  return { address: `127.0.0.1:${line}`, stop: () => child.kill("SIGTERM") };
}
