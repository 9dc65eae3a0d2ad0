// The scale-out part of `npm run bench:store`: Commit and stateful Compile throughput at concurrency
// 32 (and Commit p50 at concurrency 1) through the real sidecar on one Redis with 1 and 2 workers,
// and on a real six-node Redis Cluster, beside the bare commit script (EVALSHA) on each in the same
// run, with every process's CPU share over each measurement (the load generator's too) and each
// one's CPU per call, context switches and socket writes. Then 1 and 2 workers side by side in
// alternating rounds, with 1 worker at concurrency 16 as a control (the ratio of each round, and
// their median: the machine's other load changes between lines), and the CPU budget: what 2 cores
// allow 2 workers at the CPU per commit each process was measured to spend. Run alone with
// `CONTEXTD_BENCH_STORE_ONLY=scale-out npm run bench:store`; the rounds alone with
// `CONTEXTD_BENCH_STORE_ONLY=workers` (and `CONTEXTD_BENCH_CPU_PROFILE=1` to profile them).
//
// The calls come from the grpc-go load generator over 8 HTTP/2 connections (a sidecar with
// --workers serves each connection from one worker, so one connection would keep one worker busy;
// 2 or 4 connections cut the load generator's CPU per commit a little, 41 -> 31-36 us, but did not
// raise the 2-worker ratio).
import { create, toBinary } from "@bufbuild/protobuf";
import { Cluster, Redis } from "ioredis";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { once } from "node:events";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { CommitRequestSchema, ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment, type Delta } from "#gen/contextd/v1/state_pb";
import { redisClusterOptions, redisConnectionOptions } from "../src/store/redis-connection.js";
import { startRedis } from "../test/support/redis.js";
import { startRedisCluster } from "../test/support/redis-cluster.js";
import { bareAppendCall, defineBareCommit, runBareCommit } from "./bare-commit.js";
import { startBuiltSidecar, type BuiltSidecar } from "./bench-processes.js";
import { printCpuProfileParts } from "./cpu-profile-parts.js";
import { buildLoadGenerator, lengthPrefixed, runLoadGenerator, type LoadResult } from "./load-generator.js";
import { MinimalGrpcClient } from "./minimal-grpc-client.js";

const connections = 8;
const seconds = 2;

function appendedMessage(id: string, text: string): Message {
  return create(MessageSchema, { id, role: Role.USER, parts: [{ kind: { case: "text", value: { text } } }] });
}

function appendDelta(id: string, text: string): Delta {
  return create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: [appendedMessage(id, text)] } } });
}

/** User + system CPU seconds of a process so far, from /proc/<pid>/stat (Linux; clock ticks of 1/100 s). */
function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

/**
 * CPU seconds of this process's children that have exited and been waited for, from /proc/self/stat
 * (cutime + cstime): across a synchronous run of the load generator, that run's CPU.
 */
function waitedChildrenSeconds(): number {
  const stat = readFileSync("/proc/self/stat", "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[13]) + Number(fields[14])) / 100;
}

/** Voluntary + involuntary context switches of a process so far, from /proc/<pid>/status: how often it went to sleep or was preempted. */
function contextSwitches(pid: number): number {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    return Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(status)![1]) + Number(/^nonvoluntary_ctxt_switches:\s+(\d+)/m.exec(status)![1]);
  } catch {
    return 0;
  }
}

/** Write system calls of a process so far (`syscw` of /proc/<pid>/io): one per socket write. */
function writeCalls(pid: number): number {
  try {
    return Number(/^syscw:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/io`, "utf8"))![1]);
  } catch {
    return 0;
  }
}

/** Busy and total CPU seconds of the whole machine, from /proc/stat. */
function machineSeconds(): { busy: number; total: number } {
  const [, ...values] = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).map(Number);
  const total = values.slice(0, 8).reduce((sum, value) => sum + value, 0);
  return { busy: (total - values[3]! - values[4]!) / 100, total: total / 100 };
}

/** CPU seconds over one measurement: the sidecar's processes together, the store's, the load generator's. */
interface CpuUse {
  sidecarSeconds: number;
  storeSeconds: number;
  loadGeneratorSeconds: number;
  /** Context switches of the sidecar's processes together. */
  sidecarSwitches: number;
  /** Write system calls of the sidecar's processes together (to clients and to the store). */
  sidecarWrites: number;
  /** Busy CPU seconds of everything else on the machine (other sessions, this bench's own process). */
  otherSeconds: number;
}

interface Measured<T> {
  result: T;
  shares: string;
  cpu: CpuUse;
}

const isSidecarProcess = (label: string) => /^(sidecar|primary|worker)/.test(label);

/**
 * Runs `measure` (a synchronous run of the load generator) and returns its result with each listed
 * process's CPU share (percent of one core), the load generator's and the machine's.
 */
function withCpu<T>(processes: [string, number][], measure: () => T): Measured<T> {
  const before = processes.map(([, pid]) => cpuSeconds(pid));
  const switchesBefore = processes.map(([, pid]) => contextSwitches(pid));
  const writesBefore = processes.map(([, pid]) => writeCalls(pid));
  const childrenBefore = waitedChildrenSeconds();
  const machineBefore = machineSeconds();
  const started = process.hrtime.bigint();
  const result = measure();
  const wall = Number(process.hrtime.bigint() - started) / 1e9;
  const machineAfter = machineSeconds();
  const used = processes.map(([, pid], index) => cpuSeconds(pid) - before[index]!);
  const loadGeneratorSeconds = waitedChildrenSeconds() - childrenBefore;
  const shares = processes.map(([label], index) => `${label} ${Math.round((used[index]! / wall) * 100)}%`);
  shares.push(`load generator ${Math.round((loadGeneratorSeconds / wall) * 100)}%`);
  const busy = (machineAfter.busy - machineBefore.busy) / wall;
  const cores = (machineAfter.total - machineBefore.total) / wall;
  shares.push(`machine ${Math.round(busy * 100)}% of ${Math.round(cores * 100)}%`);
  const sum = (select: (label: string) => boolean, values: number[]) => processes.reduce((total, [label], index) => (select(label) ? total + values[index]! : total), 0);
  const switches = processes.map(([, pid], index) => contextSwitches(pid) - switchesBefore[index]!);
  const writes = processes.map(([, pid], index) => writeCalls(pid) - writesBefore[index]!);
  return {
    result,
    shares: shares.join(", "),
    cpu: {
      sidecarSeconds: sum(isSidecarProcess, used),
      storeSeconds: sum((label) => !isSidecarProcess(label), used),
      loadGeneratorSeconds,
      sidecarSwitches: sum(isSidecarProcess, switches),
      sidecarWrites: sum(isSidecarProcess, writes),
      otherSeconds: machineAfter.busy - machineBefore.busy - used.reduce((total, value) => total + value, 0) - loadGeneratorSeconds,
    },
  };
}

/** CPU microseconds per call of each part; the warm-up calls count too (the CPU window spans them). */
function perCall(measured: Measured<LoadResult>): { sidecar: number; store: number; loadGenerator: number; switches: number; writes: number } {
  const calls = measured.result.calls + measured.result.warmupCalls;
  return {
    sidecar: (measured.cpu.sidecarSeconds / calls) * 1e6,
    store: (measured.cpu.storeSeconds / calls) * 1e6,
    loadGenerator: (measured.cpu.loadGeneratorSeconds / calls) * 1e6,
    switches: measured.cpu.sidecarSwitches / calls,
    writes: measured.cpu.sidecarWrites / calls,
  };
}

/** One measured line. */
function line(label: string, measured: Measured<LoadResult>, unit: string): void {
  const { result, shares } = measured;
  const each = perCall(measured);
  console.log(
    `${label.padEnd(58)} p50 ${result.p50Ms.toFixed(3)} ms  p99 ${result.p99Ms.toFixed(3)} ms  ${Math.round(result.calls / result.seconds)} ${unit}/s  ` +
      `(n=${result.calls}; CPU per call: sidecar ${Math.round(each.sidecar)} µs, store ${Math.round(each.store)} µs, load generator ${Math.round(each.loadGenerator)} µs; ` +
      `sidecar context switches per call ${each.switches.toFixed(2)}, socket writes per call ${each.writes.toFixed(2)}; CPU: ${shares})`,
  );
}

/** The bare commit script at concurrency 32 from this process: new conversations of one appended message each. */
async function bareCommits(client: Redis | Cluster, label: string, concurrency: number, count: number): Promise<{ p50: number; perSecond: number }> {
  const scripted = defineBareCommit(client);
  const call = bareAppendCall("bench", 0n, 0, [appendedMessage("m0", "hello world")]);
  const latencies: number[] = [];
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      for (let iteration = 0; iteration < count; iteration++) {
        const before = process.hrtime.bigint();
        await runBareCommit(scripted, "bench-scale-out-bare", `${label}-${worker}-${iteration}`, call);
        latencies.push(Number(process.hrtime.bigint() - before) / 1e6);
      }
    }),
  );
  const elapsed = Number(process.hrtime.bigint() - started) / 1e9;
  latencies.sort((a, b) => a - b);
  return { p50: latencies[Math.floor(latencies.length / 2)]!, perSecond: latencies.length / elapsed };
}

interface Setup {
  label: string;
  sidecar: BuiltSidecar;
  /** Processes whose CPU is reported: the sidecar's, then the store's. */
  processes: [string, number][];
}

interface SetupFigures {
  commitC1: LoadResult;
  commitC32: LoadResult;
  compileC32: LoadResult;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

/** `which`: everything, or only the alternating 1 vs 2 worker rounds and the CPU budget. */
export async function benchScaleOut(which: "all" | "workers"): Promise<void> {
  if (which === "workers") {
    console.log(`\nscale-out, workers only: grpc-go load generator, ${connections} connections, ${seconds} s per line`);
    console.log(`load average at start: ${loadavg().map((value) => value.toFixed(2)).join(" / ")} (shared cores: compare ratios within this run)`);
    const directory = mkdtempSync(join(tmpdir(), "contextd-bench-scale-out-"));
    const loadgen = buildLoadGenerator(directory);
    const redis = await startRedis();
    try {
      await alternatingWorkerRounds(redis.url, [["redis", redis.pid()!]], loadgen, directory, `${Date.now()}-rounds`, `/${ConversationService.typeName}/${ConversationService.method.commit.name}`);
    } finally {
      await redis.stop();
    }
    console.log(`load average at end: ${loadavg().map((value) => value.toFixed(2)).join(" / ")}`);
    return;
  }
  console.log(`\nscale-out: Redis 1 vs 2 workers, Redis Cluster (3 masters + 3 replicas); grpc-go load generator, ${connections} connections, ${seconds} s per line`);
  console.log(`load average at start of scale-out: ${loadavg().map((value) => value.toFixed(2)).join(" / ")} (shared cores: compare ratios within this run)`);
  const directory = mkdtempSync(join(tmpdir(), "contextd-bench-scale-out-"));
  const loadgen = buildLoadGenerator(directory);
  const redis = await startRedis();
  const cluster = await startRedisCluster();
  const run = Date.now();
  const redisProcesses = (): [string, number][] => [["redis", redis.pid()!]];
  const clusterProcesses = (): [string, number][] => cluster.nodes.map((node, index) => [`${index < 3 ? "master" : "replica"}:${node.port}`, node.pid()!] as [string, number]);
  const commitMethod = `/${ConversationService.typeName}/${ConversationService.method.commit.name}`;
  const compileMethod = `/${ContextService.typeName}/${ContextService.method.compile.name}`;
  const figures = new Map<string, SetupFigures>();
  try {
    // The bare script on each store, from this process (ioredis, the store's connection settings).
    const bareRedis = new Redis(redis.url, redisConnectionOptions);
    const bareCluster = new Cluster(cluster.addresses.map((address) => ({ host: "127.0.0.1", port: Number(address.split(":")[1]) })), redisClusterOptions);
    if (bareRedis.status !== "ready") await once(bareRedis, "ready");
    if (bareCluster.status !== "ready") await once(bareCluster, "ready");
    const bare = new Map<string, { p50: number; perSecond: number }>();
    for (const [label, client, processes] of [["redis", bareRedis, redisProcesses()], ["redis cluster", bareCluster, clusterProcesses()]] as const) {
      await bareCommits(client, `${run}-warm-${label}`, 32, 20);
      for (const concurrency of [1, 32]) {
        const count = concurrency === 1 ? 2_000 : 150;
        const before = processes.map(([, pid]) => cpuSeconds(pid));
        const started = process.hrtime.bigint();
        const result = await bareCommits(client, `${run}-c${concurrency}-${label.replace(" ", "")}`, concurrency, count);
        const wall = Number(process.hrtime.bigint() - started) / 1e9;
        const shares = processes.map(([name, pid], index) => `${name} ${Math.round(((cpuSeconds(pid) - before[index]!) / wall) * 100)}%`).join(", ");
        bare.set(`${label} c${concurrency}`, result);
        console.log(`${`bare EVALSHA commit on ${label}, concurrency ${concurrency}`.padEnd(58)} p50 ${result.p50.toFixed(3)} ms  ${Math.round(result.perSecond)} commits/s  (CPU: ${shares})`);
      }
    }
    bareRedis.disconnect();
    bareCluster.disconnect();

    const setups: [string, string[], () => [string, number][]][] = [
      ["redis, 1 worker", ["--redis-url", redis.url], redisProcesses],
      ["redis, 2 workers", ["--redis-url", redis.url, "--workers", "2"], redisProcesses],
      ["redis cluster, 1 worker", ["--redis-cluster-nodes", cluster.addresses.join(",")], clusterProcesses],
      ["redis cluster, 2 workers", ["--redis-cluster-nodes", cluster.addresses.join(","), "--workers", "2"], clusterProcesses],
    ];
    for (const [label, args, storeProcesses] of setups) {
      const sidecar = await startBuiltSidecar(args);
      const sidecarProcesses: [string, number][] =
        sidecar.pids.length > 1 ? sidecar.pids.map((pid, index) => [index === 0 ? "primary" : `worker ${index}`, pid] as [string, number]) : [["sidecar", sidecar.pids[0]!]];
      const setup: Setup = { label, sidecar, processes: [...sidecarProcesses, ...storeProcesses()] };
      try {
        figures.set(label, await measureSetup(setup, loadgen, directory, `${run}-${label.replace(/\W/g, "")}`, commitMethod, compileMethod));
      } finally {
        await sidecar.stop();
      }
    }
    await alternatingWorkerRounds(redis.url, redisProcesses(), loadgen, directory, `${run}-rounds`, commitMethod);
  } finally {
    await cluster.stop();
    await redis.stop();
  }
  const throughput = (result: LoadResult) => result.calls / result.seconds;
  const one = figures.get("redis, 1 worker")!;
  const two = figures.get("redis, 2 workers")!;
  const clustered = figures.get("redis cluster, 1 worker")!;
  const workersRatio = throughput(two.commitC32) / throughput(one.commitC32);
  const clusterC1 = clustered.commitC1.p50Ms / one.commitC1.p50Ms;
  const clusterC32 = clustered.commitC32.p50Ms / one.commitC32.p50Ms;
  console.log(`target: 2 workers >= 1.4x the Commit throughput of 1 worker on Redis (concurrency 32): ${workersRatio.toFixed(2)}x ${workersRatio >= 1.4 ? "met" : "NOT met"}`);
  console.log(`        stateful Compile throughput, 2 workers / 1 worker: ${(throughput(two.compileC32) / throughput(one.compileC32)).toFixed(2)}x`);
  console.log(`target: Redis Cluster Commit p50 <= 1.3x single-node Redis: concurrency 1 ${clusterC1.toFixed(2)}x ${clusterC1 <= 1.3 ? "met" : "NOT met"}, concurrency 32 ${clusterC32.toFixed(2)}x ${clusterC32 <= 1.3 ? "met" : "NOT met"}`);
  console.log(`load average at end of scale-out: ${loadavg().map((value) => value.toFixed(2)).join(" / ")}`);
}

/** Commits at concurrency 32 on `address`: distinct commits without expected version into 400 conversations, enough for the run at ~20,000/s. */
function commitRequestsFile(directory: string, tag: string, label: string): string {
  const requests = Array.from({ length: Math.ceil((seconds + 0.5) * 20_000) }, (_, index) =>
    toBinary(CommitRequestSchema, create(CommitRequestSchema, { conversationId: `bench-scale-out-${tag}-${label}-${index % 400}`, deltas: [appendDelta(`m${index}`, "hello world")] })),
  );
  const file = join(directory, `commits-${tag}-${label}.bin`);
  writeFileSync(file, lengthPrefixed(requests));
  return file;
}

const rounds = 3;

/**
 * A 1-worker and a 2-worker sidecar on one Redis, both running, measured in turn for `rounds`
 * rounds of Commit at concurrency 32: each round's ratio compares two lines seconds apart, under
 * about the same load from the rest of the machine. Then the CPU budget from the medians.
 */
async function alternatingWorkerRounds(redisUrl: string, storeProcesses: [string, number][], loadgen: string, directory: string, tag: string, commitMethod: string): Promise<void> {
  console.log(`1 vs 2 workers on Redis in ${rounds} alternating rounds (Commit RPC; 1 worker at concurrency 32 and 16, 2 workers at 32; both sidecars running throughout)`);
  // CONTEXTD_BENCH_CPU_PROFILE=1: every sidecar process writes a CPU profile on exit, summarised per call below.
  const profiles = process.env.CONTEXTD_BENCH_CPU_PROFILE ? mkdtempSync(join(directory, "cpu-profiles-")) : undefined;
  const nodeArgs = profiles === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${profiles}`];
  const single = await startBuiltSidecar(["--redis-url", redisUrl], nodeArgs);
  const pair = await startBuiltSidecar(["--redis-url", redisUrl, "--workers", "2"], nodeArgs);
  // 1 worker at c32, 2 workers at c32, 1 worker at c16.
  const measured: Measured<LoadResult>[][] = [[], [], []];
  try {
    // The control line: 1 worker at concurrency 16, the share of the calls each of 2 workers gets.
    // Had the 2 workers' extra CPU per commit come from each seeing fewer calls at once (fewer per
    // socket write and per event-loop turn), this line would show it too.
    const setups = [
      { label: "1 worker, c32", index: 0, concurrency: 32, sidecar: single, processes: [["sidecar", single.pids[0]!], ...storeProcesses] as [string, number][] },
      { label: "1 worker, c16", index: 2, concurrency: 16, sidecar: single, processes: [["sidecar", single.pids[0]!], ...storeProcesses] as [string, number][] },
      { label: "2 workers, c32", index: 1, concurrency: 32, sidecar: pair, processes: [...pair.pids.map((pid, index) => [index === 0 ? "primary" : `worker ${index}`, pid] as [string, number]), ...storeProcesses] },
    ];
    for (let round = 1; round <= rounds; round++) {
      for (const setup of setups) {
        const address = new URL(setup.sidecar.url).host;
        const requestsFile = commitRequestsFile(directory, tag, `round${round}-${setup.index}`);
        const result = withCpu(setup.processes, () => runLoadGenerator(loadgen, { address, method: commitMethod, requestsFile, concurrency: setup.concurrency, seconds, warmupSeconds: 0.5, connections }));
        measured[setup.index]!.push(result);
        line(`round ${round}: Commit RPC, redis, ${setup.label}`, result, "commits");
      }
      const [one, two] = [measured[0]![round - 1]!, measured[1]![round - 1]!];
      const otherCores = (entry: Measured<LoadResult>) => entry.cpu.otherSeconds / entry.result.seconds;
      console.log(
        `round ${round}: 2 workers / 1 worker (c32) = ${(two.result.calls / two.result.seconds / (one.result.calls / one.result.seconds)).toFixed(2)}x ` +
          `(the rest of the machine used ${Math.round(otherCores(one) * 100)}% and ${Math.round(otherCores(two) * 100)}% of a core beside them)`,
      );
    }
    printCpuBudget(measured[0]!, measured[1]!, measured[2]!);
  } finally {
    await single.stop();
    await pair.stop();
  }
  if (profiles === undefined) return;
  const calls = (entries: Measured<LoadResult>[]) => entries.reduce((sum, entry) => sum + entry.result.calls + entry.result.warmupCalls, 0);
  const files = (pids: number[]) => readdirSync(profiles).filter((name) => pids.includes(Number(name.split(".")[3]))).map((name) => join(profiles, name));
  // The two workers' profiles together: which worker served which call is not known, their sum is.
  for (const [label, pids, served] of [["1 worker (its c32 and c16 lines)", single.pids, calls(measured[0]!) + calls(measured[2]!)], ["2 workers, both workers together", pair.pids.slice(1), calls(measured[1]!)]] as const) {
    const found = files(pids);
    if (found.length < pids.length) console.log(`${label}: CPU profiles missing (pids ${pids.join(", ")})`);
    else printCpuProfileParts(`CPU profile, ${label}`, found, served);
  }
}

/**
 * What 2 cores allow at the CPU per commit measured (medians over the rounds): one worker can use
 * at most one core, so it is bounded by 1 core / its CPU per commit; two workers share the 2 cores
 * with Redis and the load generator, so they are bounded by 2 cores / (workers + Redis + load
 * generator per commit). The ratio of the two bounds is the most 2 workers can give on this machine
 * with nothing else running.
 */
function printCpuBudget(one: Measured<LoadResult>[], two: Measured<LoadResult>[], control: Measured<LoadResult>[]): void {
  const rate = (entries: Measured<LoadResult>[]) => median(entries.map((entry) => entry.result.calls / entry.result.seconds));
  const cost = (entries: Measured<LoadResult>[]) => {
    const each = entries.map(perCall);
    return { sidecar: median(each.map((entry) => entry.sidecar)), store: median(each.map((entry) => entry.store)), loadGenerator: median(each.map((entry) => entry.loadGenerator)), switches: median(each.map((entry) => entry.switches)), writes: median(each.map((entry) => entry.writes)) };
  };
  const [a, b] = [cost(one), cost(two)];
  const ratios = one.map((entry, index) => two[index]!.result.calls / two[index]!.result.seconds / (entry.result.calls / entry.result.seconds));
  console.log(`median over the rounds: 1 worker ${Math.round(rate(one))} commits/s, 2 workers ${Math.round(rate(two))} commits/s; median of the rounds' ratios ${median(ratios).toFixed(2)}x (target 1.4x)`);
  console.log(
    `CPU per commit (medians): 1 worker: sidecar ${Math.round(a.sidecar)} µs + Redis ${Math.round(a.store)} µs + load generator ${Math.round(a.loadGenerator)} µs, ${a.switches.toFixed(2)} sidecar context switches and ${a.writes.toFixed(2)} socket writes; ` +
      `2 workers: ${Math.round(b.sidecar)} µs + ${Math.round(b.store)} µs + ${Math.round(b.loadGenerator)} µs, ${b.switches.toFixed(2)} switches and ${b.writes.toFixed(2)} writes`,
  );
  const c = cost(control);
  console.log(`control, 1 worker at concurrency 16 (each of 2 workers' share of the calls): sidecar ${Math.round(c.sidecar)} µs per commit, ${c.switches.toFixed(2)} context switches, ${c.writes.toFixed(2)} socket writes`);
  const oneBound = 1e6 / a.sidecar;
  const twoBoundAtOne = 2e6 / (a.sidecar + a.store + a.loadGenerator);
  const twoBound = 2e6 / (b.sidecar + b.store + b.loadGenerator);
  console.log(
    `CPU budget of 2 cores: 1 worker <= 1 core / ${Math.round(a.sidecar)} µs = ${Math.round(oneBound)}/s; ` +
      `2 workers <= 2 cores / ${Math.round(b.sidecar + b.store + b.loadGenerator)} µs = ${Math.round(twoBound)}/s (${(twoBound / oneBound).toFixed(2)}x); ` +
      `had each worker kept 1 worker's CPU per commit: 2 cores / ${Math.round(a.sidecar + a.store + a.loadGenerator)} µs = ${Math.round(twoBoundAtOne)}/s (${(twoBoundAtOne / oneBound).toFixed(2)}x)`,
  );
}

/** Commit at concurrency 1 and 32, then stateful Compile of a stored 100-message conversation at 32, through one sidecar. */
async function measureSetup(setup: Setup, loadgen: string, directory: string, tag: string, commitMethod: string, compileMethod: string): Promise<SetupFigures> {
  const address = new URL(setup.sidecar.url).host;
  const commitsFile = (label: string) => commitRequestsFile(directory, tag, label);
  const commitC1 = withCpu(setup.processes, () => runLoadGenerator(loadgen, { address, method: commitMethod, requestsFile: commitsFile("c1"), concurrency: 1, seconds, warmupSeconds: 0.5, connections }));
  line(`Commit RPC, ${setup.label}, concurrency 1`, commitC1, "commits");
  const commitC32 = withCpu(setup.processes, () => runLoadGenerator(loadgen, { address, method: commitMethod, requestsFile: commitsFile("c32"), concurrency: 32, seconds, warmupSeconds: 0.5, connections }));
  line(`Commit RPC, ${setup.label}, concurrency 32`, commitC32, "commits");
  // The conversation a stateful compile reads: 100 messages committed in one batch beforehand.
  const conversationId = `bench-scale-out-compile-${tag}`;
  const seeder = new MinimalGrpcClient(address);
  try {
    await seeder.call(
      commitMethod,
      Buffer.from(
        toBinary(
          CommitRequestSchema,
          create(CommitRequestSchema, {
            conversationId,
            deltas: Array.from({ length: 100 }, (_, index) => appendDelta(`h${index}`, `message ${index}: ${"lorem ipsum dolor sit amet ".repeat(4)}`)),
          }),
        ),
      ),
    );
  } finally {
    seeder.close();
  }
  const compileRequest = join(directory, `compile-${tag}.bin`);
  writeFileSync(compileRequest, toBinary(CompileRequestSchema, create(CompileRequestSchema, { conversationId })));
  const compileC32 = withCpu(setup.processes, () => runLoadGenerator(loadgen, { address, method: compileMethod, requestFile: compileRequest, concurrency: 32, seconds, warmupSeconds: 0.5, connections }));
  line(`stateful Compile (100 stored), ${setup.label}, concurrency 32`, compileC32, "compiles");
  return { commitC1: commitC1.result, commitC32: commitC32.result, compileC32: compileC32.result };
}
