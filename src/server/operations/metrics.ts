import type { ObserverEvent } from "../../../gen/ts/contextd/v1/telemetry_pb.js";
import { TransformationReason } from "../../../gen/ts/contextd/v1/compile_pb.js";

// Seconds; covers a sub-millisecond health check up to a slow stateful compile.
const latencyBuckets = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

interface Histogram {
  counts: number[];
  sum: number;
  count: number;
}

/**
 * The sidecar's Prometheus metrics, rendered in the text exposition format (version 0.0.4) on the
 * metrics path. Gauges that other parts own are read when scraped.
 */
export class Metrics {
  private readonly rpcs = new Map<string, number>();
  private readonly latency = new Map<string, Histogram>();
  private compiles = 0;
  private compileTokens = 0;
  /** Dropped messages by `TransformationReason` number. */
  private readonly droppedMessages = new Map<number, number>();
  private readonly gauges: { name: string; help: string; read: () => number }[] = [];

  /** One finished RPC: `method` is "package.Service/Method", `code` the gRPC code name ("ok", "not_found"). */
  recordRpc(method: string, code: string, seconds: number): void {
    const key = `${method}\u0000${code}`;
    this.rpcs.set(key, (this.rpcs.get(key) ?? 0) + 1);
    let histogram = this.latency.get(method);
    if (!histogram) {
      histogram = { counts: latencyBuckets.map(() => 0), sum: 0, count: 0 };
      this.latency.set(method, histogram);
    }
    for (let i = 0; i < latencyBuckets.length; i++) if (seconds <= latencyBuckets[i]!) histogram.counts[i]!++;
    histogram.sum += seconds;
    histogram.count++;
  }

  /** Compile telemetry: tokens of finished compiles and dropped messages. */
  readonly observe = (event: ObserverEvent): void => {
    switch (event.event.case) {
      case "pipelineCompiled":
        this.compiles++;
        this.compileTokens += Number(event.event.value.totalCost);
        return;
      case "messageDropped": {
        // Counted by the reason's number and named when rendered: a compile of a long history
        // drops thousands of messages, and naming each cost a string per event.
        const reason = event.event.value.reason;
        this.droppedMessages.set(reason, (this.droppedMessages.get(reason) ?? 0) + 1);
        return;
      }
      default:
        return;
    }
  };

  gauge(name: string, help: string, read: () => number): void {
    this.gauges.push({ name, help, read });
  }

  render(): string {
    const lines: string[] = [];
    lines.push("# HELP contextd_rpc_requests_total RPCs finished, by method and gRPC code.");
    lines.push("# TYPE contextd_rpc_requests_total counter");
    for (const [key, count] of [...this.rpcs].sort()) {
      const [method, code] = key.split("\u0000");
      lines.push(`contextd_rpc_requests_total{method="${method}",code="${code}"} ${count}`);
    }
    lines.push("# HELP contextd_rpc_duration_seconds RPC latency, from the handler's start to its last message.");
    lines.push("# TYPE contextd_rpc_duration_seconds histogram");
    for (const [method, histogram] of [...this.latency].sort((a, b) => a[0].localeCompare(b[0]))) {
      latencyBuckets.forEach((bound, i) => {
        lines.push(`contextd_rpc_duration_seconds_bucket{method="${method}",le="${bound}"} ${histogram.counts[i]}`);
      });
      lines.push(`contextd_rpc_duration_seconds_bucket{method="${method}",le="+Inf"} ${histogram.count}`);
      lines.push(`contextd_rpc_duration_seconds_sum{method="${method}"} ${histogram.sum}`);
      lines.push(`contextd_rpc_duration_seconds_count{method="${method}"} ${histogram.count}`);
    }
    lines.push("# HELP contextd_compiles_total Compiles finished (from observer events).");
    lines.push("# TYPE contextd_compiles_total counter");
    lines.push(`contextd_compiles_total ${this.compiles}`);
    lines.push("# HELP contextd_compile_tokens_total Tokens of compiled requests (pipeline_compiled total_cost).");
    lines.push("# TYPE contextd_compile_tokens_total counter");
    lines.push(`contextd_compile_tokens_total ${this.compileTokens}`);
    lines.push("# HELP contextd_messages_dropped_total Messages compiles left out of the prompt (DROPPED records), by reason.");
    lines.push("# TYPE contextd_messages_dropped_total counter");
    const dropped = [...this.droppedMessages].map(([reason, count]) => [(TransformationReason[reason] ?? String(reason)).toLowerCase(), count] as const);
    for (const [reason, count] of dropped.sort()) lines.push(`contextd_messages_dropped_total{reason="${reason}"} ${count}`);
    for (const gauge of this.gauges) {
      lines.push(`# HELP ${gauge.name} ${gauge.help}`);
      lines.push(`# TYPE ${gauge.name} gauge`);
      lines.push(`${gauge.name} ${gauge.read()}`);
    }
    return lines.join("\n") + "\n";
  }
}
