// Where a sidecar process's CPU went, from the .cpuprofile `node --cpu-prof` wrote when it exited:
// every sample's time given to one part of a call (HTTP/2, protobuf, the codec, the store, ioredis,
// socket writes to Redis or to clients, metrics and tracing, logging, ...), divided by the calls the
// process served. bench:store's 1 vs 2 worker rounds print it with CONTEXTD_BENCH_CPU_PROFILE=1.
//
// Why it exists: at concurrency 32, two workers spent 1.5-2x the CPU per commit of one worker; the
// question was whether one part of the call grows (a fixed cost per socket write or per event-loop
// turn) or all of them do. Samples are wall-clock time while the thread was not idle, so time the
// process spent preempted counts too: compare parts with each other, not with /proc's CPU time.
import { readFileSync } from "node:fs";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** The part of a call a sample belongs to, from its stack (leaf first). */
function partOf(stack: ProfileNode["callFrame"][]): string | undefined {
  const leaf = stack[0]!;
  if (leaf.functionName === "(idle)") return undefined;
  if (stack.some((frame) => /modules\/esm\/|modules\/cjs\/|module_job/.test(frame.url) || frame.functionName === "compileSourceTextModule")) return undefined;
  if (leaf.functionName === "(garbage collector)") return "garbage collector";
  if (leaf.functionName === "(program)") return "native, unattributed";
  if (/^(writev|writeBuffer|writeUtf8String|writeLatin1String)$/.test(leaf.functionName)) {
    return stack.some((frame) => /ioredis|\/store\/redis-/.test(frame.url)) ? "socket writes to Redis" : "socket writes to clients (HTTP/2)";
  }
  const url = stack.find((frame) => frame.url !== "")?.url ?? "";
  const parts: [RegExp, string][] = [
    [/ioredis|redis-parser|denque|standard-as-callback/, "ioredis"],
    [/internal\/http2/, "node http2"],
    [/node:net|internal\/(stream_base_commons|streams\/)/, "node net and streams"],
    [/@bufbuild\/protobuf/, "@bufbuild/protobuf"],
    [/@connectrpc/, "connect"],
    [/undici/, "Headers (undici)"],
    [/src\/codec\//, "codec: decode, encode, freeze"],
    [/src\/store\//, "store: commit plan, script arguments"],
    [/src\/core\//, "core: apply deltas, prepare messages"],
    [/operations\/(metrics|tracing|call-tracker|observed-store)|policy\/(instrumentation|call-tracing)/, "metrics and tracing"],
    [/operations\/logger/, "logging"],
    [/src\/server\//, "server: transport and policy"],
    [/node:buffer|internal\/buffer/, "buffers"],
    [/crypto/, "crypto (request ids)"],
    [/internal\/timers|task_queues|node:events|node:timers/, "event loop: timers, ticks, events"],
  ];
  if (leaf.functionName === "runMicrotasks") return "event loop: timers, ticks, events";
  return parts.find(([pattern]) => pattern.test(url))?.[1] ?? "other";
}

/** Microseconds of samples per part in one profile, idle time and module loading left out. */
export function cpuProfileParts(file: string): Map<string, number> {
  const profile = JSON.parse(readFileSync(file, "utf8")) as CpuProfile;
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parentOf = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);
  const selfTime = new Map<number, number>();
  profile.samples.forEach((id, index) => selfTime.set(id, (selfTime.get(id) ?? 0) + (profile.timeDeltas[index] ?? 0)));
  const parts = new Map<string, number>();
  for (const [id, micros] of selfTime) {
    const stack: ProfileNode["callFrame"][] = [];
    for (let current: number | undefined = id; current !== undefined; current = parentOf.get(current)) stack.push(byId.get(current)!.callFrame);
    const part = partOf(stack);
    if (part !== undefined) parts.set(part, (parts.get(part) ?? 0) + micros);
  }
  return parts;
}

/** Prints each part's microseconds per call beside its share, largest first, over the profiles of the processes that served `calls` together. */
export function printCpuProfileParts(label: string, files: string[], calls: number): void {
  const parts = new Map<string, number>();
  for (const file of files) for (const [part, micros] of cpuProfileParts(file)) parts.set(part, (parts.get(part) ?? 0) + micros);
  const total = [...parts.values()].reduce((sum, micros) => sum + micros, 0);
  console.log(`${label}: ${Math.round(total / calls)} µs of samples per call (${calls} calls; ${files.join(", ")})`);
  for (const [part, micros] of [...parts].sort((a, b) => b[1] - a[1])) {
    if (micros / calls < 0.05) continue;
    console.log(`  ${(micros / calls).toFixed(1).padStart(6)} µs  ${((micros / total) * 100).toFixed(1).padStart(5)}%  ${part}`);
  }
}
