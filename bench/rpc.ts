/**
 * `npm run bench:rpc`: Compile over gRPC for 10, 100 and 1,000 history messages against the real
 * sidecar (a child process started from dist/), beside a bare grpc-js server (another child
 * process) that answers with the very same response bytes without doing any work. Both are driven
 * by the same load generator, and beside the same sidecar with `--direct-unary-grpc false` (connect-node's
 * adapter serving unary gRPC too), `bench/loadgen` (grpc-go over one connection, pre-encoded requests,
 * responses not decoded): a Node client costs 0.15–0.5 ms of CPU per call (grpc-js the most), which
 * on two shared cores caps both servers and measures the client. Prints p50/p99 latency and
 * requests/s at concurrency 1 and 16, and each server's CPU time per request (from /proc, so other
 * load on the machine inflates it less than it inflates latency). Everything shares this machine's
 * cores: read the numbers side by side, not absolutely.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { create, toBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { CompileRequestSchema, CompileResultPart } from "#gen/contextd/v1/compile_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { buildLoadGenerator, runLoadGenerator } from "./load-generator.js";
import { MinimalGrpcClient } from "./minimal-grpc-client.js";

const compilePath = "/contextd.v1.ContextService/Compile";
const sizes = [10, 100, 1000];
const concurrencies = [1, 16];
const secondsPerRun = Number(process.env.BENCH_SECONDS ?? 2);
const thisFile = fileURLToPath(import.meta.url);
const allResultParts = [
  CompileResultPart.SOURCE,
  CompileResultPart.NORMALIZED_SNAPSHOT,
  CompileResultPart.WRITEBACK_SNAPSHOT,
  CompileResultPart.PERSISTENCE,
  CompileResultPart.ALL_TRANSFORMATIONS,
];


/** A history of `count` user/assistant turns of ~90 characters each. */
function compileRequest(count: number): Uint8Array {
  const sentence = "The quick brown fox jumps over the lazy dog while the agent plans its next tool call. ";
  const history = Array.from({ length: count }, (_, i) => ({
    id: `m${i}`,
    role: i % 2 === 0 ? Role.USER : Role.ASSISTANT,
    parts: [{ kind: { case: "text" as const, value: { text: `${i}: ${sentence}` } } }],
  }));
  return toBinary(
    CompileRequestSchema,
    create(CompileRequestSchema, {
      system: { messages: [{ id: "sys", role: Role.SYSTEM, parts: [{ kind: { case: "text", value: { text: "You are a helpful agent." } } }] }] },
      history: { messages: history },
      // BENCH_INCLUDE_ALL=1: the whole result (source, snapshots, persistence, every record), as the
      // default answer was before answers became lean; the same work as earlier figures.
      include: process.env.BENCH_INCLUDE_ALL === "1" ? allResultParts : [],
    }),
  );
}

async function main() {
  const contextd = await startChild(process.execPath, [join(thisFile, "../../src/main.js"), "--port", "0", "--log-level", "error", "--max-messages", "100000"], "contextd listening");
  const client = new MinimalGrpcClient(contextd.address);
  const directory = mkdtempSync(join(tmpdir(), "contextd-bench-"));
  const requests = new Map<number, Buffer>();
  const responseBytes = new Map<number, number>();
  for (const size of sizes) {
    const request = Buffer.from(compileRequest(size));
    const response = await call(client, request);
    requests.set(size, request);
    responseBytes.set(size, response.length);
    // The bare server answers a request of this length with these bytes.
    writeFileSync(join(directory, `${request.length}.bin`), response);
  }
  client.close();
  const bare = await startChild(process.execPath, [thisFile, "--serve-bare", directory], "bare listening");
  // The same sidecar with the direct unary gRPC path switched off: what that path still wins.
  const throughConnect = await startChild(
    process.execPath,
    [join(thisFile, "../../src/main.js"), "--port", "0", "--log-level", "error", "--max-messages", "100000", "--direct-unary-grpc", "false"],
    "contextd listening",
  );
  const loadgen = buildLoadGenerator(directory);

  console.log(`Compile over gRPC (grpc-go load generator, ${secondsPerRun} s per cell, ${cpus().length} cores shared by client and servers)`);
  console.log(`load average at start: ${formatLoad()} (1/5/15 min; above the core count, other work competes for the CPU)`);
  console.log(
    "messages  response   conc | contextd p50    p99   req/s  CPU/req | bare grpc-js p50   p99   req/s  CPU/req | p50 ratio  CPU ratio | through connect p50  req/s  CPU/req",
  );
  for (const size of sizes) {
    for (const concurrency of concurrencies) {
      const requestFile = join(directory, `request-${size}.bin`);
      writeFileSync(requestFile, requests.get(size)!);
      // Each run warms up for a second first, so both servers are measured with their hot paths
      // compiled by the JIT.
      const ours = run(loadgen, contextd.address, requestFile, concurrency, contextd.child.pid!);
      const theirs = run(loadgen, bare.address, requestFile, concurrency, bare.child.pid!);
      const adapter = run(loadgen, throughConnect.address, requestFile, concurrency, throughConnect.child.pid!);
      console.log(
        [
          String(size).padStart(8),
          `${(responseBytes.get(size)! / 1024).toFixed(0)} KB`.padStart(9),
          String(concurrency).padStart(6),
          " |",
          `${ours.p50.toFixed(2)} ms`.padStart(12),
          `${ours.p99.toFixed(2)} ms`.padStart(9),
          ours.perSecond.toFixed(0).padStart(8),
          `${ours.cpuMs.toFixed(2)} ms`.padStart(9),
          " |",
          `${theirs.p50.toFixed(2)} ms`.padStart(14),
          `${theirs.p99.toFixed(2)} ms`.padStart(9),
          theirs.perSecond.toFixed(0).padStart(7),
          `${theirs.cpuMs.toFixed(2)} ms`.padStart(9),
          " |",
          `${(ours.p50 / theirs.p50).toFixed(2)}x`.padStart(8),
          `${(ours.cpuMs / theirs.cpuMs).toFixed(2)}x`.padStart(10),
          " |",
          `${adapter.p50.toFixed(2)} ms`.padStart(20),
          adapter.perSecond.toFixed(0).padStart(7),
          `${adapter.cpuMs.toFixed(2)} ms`.padStart(9),
        ].join(""),
      );
    }
  }
  console.log(`load average at end: ${formatLoad()}`);
  contextd.child.kill("SIGTERM");
  bare.child.kill("SIGTERM");
  throughConnect.child.kill("SIGTERM");
}

function formatLoad(): string {
  return loadavg().map((value) => value.toFixed(2)).join(" / ");
}

function call(client: MinimalGrpcClient, request: Buffer): Promise<Buffer> {
  return client.call(compilePath, request);
}

/** User + system CPU time of a process so far, in milliseconds (Linux /proc, 100 ticks per second). */
function cpuMsOf(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** One cell: the load generator's latencies and rate, and the server's CPU time per call meanwhile. */
function run(loadgen: string, address: string, requestFile: string, concurrency: number, serverPid: number) {
  const cpuBefore = cpuMsOf(serverPid);
  const result = runLoadGenerator(loadgen, { address, method: compilePath, requestFile, concurrency, seconds: secondsPerRun, warmupSeconds: 1 });
  const cpuMs = cpuMsOf(serverPid) - cpuBefore;
  return {
    p50: result.p50Ms,
    p99: result.p99Ms,
    perSecond: result.calls / result.seconds,
    // The server worked through the warm-up calls too.
    cpuMs: cpuMs / (result.calls + result.warmupCalls),
  };
}

async function startChild(command: string, args: string[], readyMessage: string): Promise<{ child: ChildProcess; address: string }> {
  const child = spawn(command, args, { stdio: ["ignore", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout! });
  const address = await new Promise<string>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`${args[0]} exited with ${code}`)));
    lines.on("line", (line) => {
      try {
        const entry = JSON.parse(line) as { msg?: string; address?: string };
        if (entry.msg === readyMessage && entry.address) resolve(entry.address);
      } catch {
        // not a log line
      }
    });
  });
  process.on("exit", () => child.kill("SIGKILL"));
  return { child, address };
}

/** The reference: grpc-js answering each request with bytes read from disk beforehand. */
async function serveBare(directory: string) {
  const { readdirSync } = await import("node:fs");
  const answers = new Map<number, Buffer>();
  for (const name of readdirSync(directory)) answers.set(Number(name.replace(".bin", "")), readFileSync(join(directory, name)));
  const server = new grpc.Server({ "grpc.max_receive_message_length": -1, "grpc.max_send_message_length": -1 });
  server.register(
    compilePath,
    (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => callback(null, answers.get(call.request.length)!),
    (bytes: Buffer) => bytes,
    (bytes: Buffer) => bytes,
    "unary",
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
  );
  console.log(JSON.stringify({ msg: "bare listening", address: `127.0.0.1:${port}` }));
  process.on("SIGTERM", () => server.forceShutdown());
}

// Last, so that every class above is initialised before it runs.
if (process.argv[2] === "--serve-bare") {
  await serveBare(process.argv[3]!);
} else {
  await main();
}
