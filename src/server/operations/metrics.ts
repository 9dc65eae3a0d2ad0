import { collectDefaultMetrics, Counter, Gauge, Registry, type Metric, type MetricObjectWithValues, type MetricValue, type MetricValueWithName } from "prom-client";
import type { ObserverEvent } from "#gen/contextd/v1/telemetry_pb";
import { TransformationReason } from "#gen/contextd/v1/compile_pb";

// Seconds; covers a sub-millisecond health check up to a slow stateful compile.
const latencyBuckets = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
// Store operations: an in-memory load takes microseconds, a Redis round trip a fraction of a millisecond.
const storeBuckets = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

export interface MetricsOptions {
  /**
   * Where the sidecar's own metrics are registered; a fresh one when not given. Injectable so a
   * process running several servers (tests, workers) can aggregate or keep them apart.
   */
  registry?: Registry;
  /**
   * Where the process and Node.js runtime metrics (heap, RSS, event-loop lag, GC) live: one per
   * process, since they describe the process. `processRegistry()` when not given; null = none.
   */
  processRegistry?: Registry | null;
}

/**
 * The sidecar's Prometheus metrics, kept by prom-client and rendered in the text exposition
 * format (version 0.0.4) on the metrics path: its own (RPCs, compiles, store operations, caches)
 * and the process's (prom-client's default collectors). Gauges other parts own are read when scraped.
 *
 * Why prom-client rather than OpenTelemetry metrics: the exposition stays the pull-based text
 * endpoint operators already scrape, under the same names and labels; prom-client's default
 * collectors are the standard Node.js runtime metrics (event-loop lag from `monitorEventLoopDelay`,
 * GC from perf_hooks), and its registry merges and aggregates (workers). The metrics every call
 * records — RPC count and latency, store latency — are `SeriesCounter`/`SeriesHistogram` below,
 * registered in the same registry: prom-client's own Counter and Histogram hash their label values
 * on every observation (~1.5–3 µs per RPC measured with `npm run bench:observability`, against
 * ~0.25–0.8 µs for plain counters), so these resolve a series once and then only add.
 */
export class Metrics {
  readonly registry: Registry;
  private readonly processMetrics: Registry | undefined;
  private readonly rpcs: SeriesCounter;
  private readonly latency: SeriesHistogram;
  private readonly storeLatency: SeriesHistogram;
  private readonly compiles: Counter;
  private readonly compileTokens: Counter;
  private readonly droppedMessages: SeriesCounter;
  /** Dropped-message series by `TransformationReason` number. */
  private readonly droppedSeries = new Map<number, { inc(by?: number): void }>();
  private readonly clearedMessages: SeriesCounter;
  private readonly clearedTokens: SeriesCounter;
  /** Cleared-message and freed-token series by `TransformationReason` number. */
  private readonly clearedSeries = new Map<number, { messages: { inc(): void }; tokens: { inc(by: number): void } }>();
  private readonly rpcSeries = new Map<string, { inc(): void }>();
  private readonly latencySeries = new Map<string, { observe(value: number): void }>();
  private readonly storeSeries = new Map<string, { observe(value: number): void }>();
  private readonly caches: { cache: string; read: () => CacheReading }[] = [];

  constructor(options: MetricsOptions = {}) {
    this.registry = options.registry ?? new Registry();
    this.processMetrics = options.processRegistry === null ? undefined : (options.processRegistry ?? processRegistry());
    const registers = [this.registry];
    this.rpcs = new SeriesCounter("contextd_rpc_requests_total", "RPCs finished, by method and gRPC code.", ["method", "code"], this.registry);
    this.latency = new SeriesHistogram("contextd_rpc_duration_seconds", "RPC latency, from the handler's start to its last message.", ["method"], latencyBuckets, this.registry);
    this.compiles = new Counter({ name: "contextd_compiles_total", help: "Compiles finished (from observer events).", registers });
    this.compileTokens = new Counter({ name: "contextd_compile_tokens_total", help: "Tokens of compiled requests (pipeline_compiled total_cost).", registers });
    this.droppedMessages = new SeriesCounter("contextd_messages_dropped_total", "Messages compiles left out of the prompt (DROPPED records), by reason.", ["reason"], this.registry);
    this.clearedMessages = new SeriesCounter(
      "contextd_messages_cleared_total",
      "History messages whose old tool results or reasoning compiles cleared (message_cleared events), by reason.",
      ["reason"],
      this.registry,
    );
    this.clearedTokens = new SeriesCounter("contextd_cleared_tokens_total", "Estimated tokens tool-result and reasoning clearing freed (message_cleared freed_tokens), by reason.", ["reason"], this.registry);
    this.storeLatency = new SeriesHistogram(
      "contextd_store_operation_duration_seconds",
      "Conversation store operations (load, read_window, commit, current_version, clear, list, ping, read_calibration, report_calibration, record_usage, read_usage, list_tenant_usage), by outcome (ok or error).",
      ["operation", "outcome"],
      storeBuckets,
      this.registry,
    );
    const caches = this.caches;
    for (const [name, help, field] of [
      ["contextd_cache_lookups_total", "Lookups in a cache (recent_messages, retained_encodings, token_count_lists).", "lookups"],
      ["contextd_cache_hits_total", "Lookups a cache answered; hit rate = rate(hits) / rate(lookups).", "hits"],
    ] as const) {
      const reported = new Map<string, number>();
      new Counter({
        name,
        help,
        labelNames: ["cache"],
        registers,
        // The caches count for themselves; a scrape adds what they counted since the last one.
        collect() {
          for (const { cache, read } of caches) {
            const now = read()[field];
            const delta = now - (reported.get(cache) ?? 0);
            reported.set(cache, now);
            this.inc({ cache }, Math.max(0, delta));
          }
        },
      });
    }
  }

  /** One finished RPC: `method` is "package.Service/Method", `code` the gRPC code name ("ok", "not_found"). */
  recordRpc(method: string, code: string, seconds: number): void {
    const key = `${method}\u0000${code}`;
    let counter = this.rpcSeries.get(key);
    if (counter === undefined) {
      counter = this.rpcs.series(method, code);
      this.rpcSeries.set(key, counter);
    }
    counter.inc();
    let histogram = this.latencySeries.get(method);
    if (histogram === undefined) {
      histogram = this.latency.series(method);
      this.latencySeries.set(method, histogram);
    }
    histogram.observe(seconds);
  }

  /** One store operation ("load", "commit", …) that took `seconds`. */
  recordStoreOperation(operation: string, ok: boolean, seconds: number): void {
    const key = ok ? operation : `${operation}\u0000error`;
    let histogram = this.storeSeries.get(key);
    if (histogram === undefined) {
      histogram = this.storeLatency.series(operation, ok ? "ok" : "error");
      this.storeSeries.set(key, histogram);
    }
    histogram.observe(seconds);
  }

  /** Compile telemetry: tokens of finished compiles and dropped messages. */
  readonly observe = (event: ObserverEvent): void => {
    switch (event.event.case) {
      case "pipelineCompiled":
        this.compiles.inc();
        this.compileTokens.inc(Number(event.event.value.totalCost));
        return;
      case "messageDropped":
        this.droppedSeriesFor(event.event.value.reason).inc();
        return;
      case "historyHeadDropped":
        this.droppedSeriesFor(TransformationReason.TOKEN_BUDGET_EXCEEDED).inc(Number(event.event.value.count));
        return;
      case "messageCleared": {
        const reason = event.event.value.reason;
        let series = this.clearedSeries.get(reason);
        if (series === undefined) {
          const name = (TransformationReason[reason] ?? String(reason)).toLowerCase();
          series = { messages: this.clearedMessages.series(name), tokens: this.clearedTokens.series(name) };
          this.clearedSeries.set(reason, series);
        }
        series.messages.inc();
        series.tokens.inc(Number(event.event.value.freedTokens));
        return;
      }
      default:
        return;
    }
  };

  /** Counted by the reason's number and named once per reason, not a string per event. */
  private droppedSeriesFor(reason: TransformationReason) {
    let series = this.droppedSeries.get(reason);
    if (series === undefined) {
      series = this.droppedMessages.series((TransformationReason[reason] ?? String(reason)).toLowerCase());
      this.droppedSeries.set(reason, series);
    }
    return series;
  }

  /** A gauge read at every scrape from whoever owns the value. */
  gauge(name: string, help: string, read: () => number): void {
    new Gauge({
      name,
      help,
      registers: [this.registry],
      collect() {
        this.set(read());
      },
    });
  }

  /** A counter without labels whose total `read` returns at every scrape (a count since its owner was made). */
  total(name: string, help: string, read: () => number): void {
    new Counter({
      name,
      help,
      registers: [this.registry],
      collect() {
        this.reset();
        this.inc(read());
      },
    });
  }

  /** A counter with one label whose totals per label value `read` returns at every scrape (counts since start). */
  countedBy(name: string, help: string, label: string, read: () => Readonly<Record<string, number>>): void {
    new Counter({
      name,
      help,
      labelNames: [label],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const [value, count] of Object.entries(read())) this.labels(value).inc(count);
      },
    });
  }

  /** A cache whose counters `read` returns at every scrape (counts since the cache was made). */
  cache(cache: string, read: () => CacheReading): void {
    this.caches.push({ cache, read });
  }

  /** The exposition text: the sidecar's metrics, then the process's. */
  async render(): Promise<string> {
    const own = await this.registry.metrics();
    return this.processMetrics ? own + (await this.processMetrics.metrics()) : own;
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

export interface CacheReading {
  lookups: number;
  hits: number;
}

let processMetrics: Registry | undefined;

/**
 * The process's runtime metrics (prom-client's default collectors: CPU, RSS, heap and heap spaces,
 * event-loop lag and its percentiles, GC durations by kind, handles, file descriptors). Made once
 * per process: the collectors install perf_hooks observers, and every server in the process
 * describes the same process.
 */
export function processRegistry(): Registry {
  if (processMetrics === undefined) {
    processMetrics = new Registry();
    collectDefaultMetrics({ register: processMetrics, eventLoopMonitoringPrecision: 10 });
  }
  return processMetrics;
}

/** One series of a `SeriesCounter` or `SeriesHistogram`: resolved once, then only added to. */
interface Series {
  labels: Record<string, string>;
  count: number;
  sum: number;
  /** Cumulative bucket counts (histograms). */
  buckets: number[];
}

/**
 * A counter with labels whose series are resolved once (`series(...)`), registered in a
 * prom-client registry as a custom metric: the registry renders and aggregates it like its own
 * (`get()` returns prom-client's metric object; labels in declaration order).
 */
class SeriesCounter {
  readonly type = "counter";
  private readonly all: Series[] = [];

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly string[],
    registry: Registry,
  ) {
    registry.registerMetric(this as unknown as Metric);
  }

  series(...values: string[]): { inc(by?: number): void } {
    const series: Series = { labels: labelsOf(this.labelNames, values), count: 0, sum: 0, buckets: [] };
    this.all.push(series);
    return { inc: (by = 1) => void (series.count += by) };
  }

  get(): MetricObjectWithValues<MetricValue<string>> {
    const values = [...this.all].sort(bySeries).map((series) => ({ labels: series.labels, value: series.count }));
    return { name: this.name, help: this.help, type: "counter" as never, aggregator: "sum", values, collect: () => undefined };
  }

  reset(): void {
    for (const series of this.all) series.count = 0;
  }
}

/** A histogram with labels whose series are resolved once; see `SeriesCounter`. */
class SeriesHistogram {
  readonly type = "histogram";
  private readonly all: Series[] = [];

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly string[],
    private readonly bounds: readonly number[],
    registry: Registry,
  ) {
    registry.registerMetric(this as unknown as Metric);
  }

  series(...values: string[]): { observe(value: number): void } {
    const series: Series = { labels: labelsOf(this.labelNames, values), count: 0, sum: 0, buckets: this.bounds.map(() => 0) };
    this.all.push(series);
    const bounds = this.bounds;
    return {
      observe(value: number) {
        for (let index = bounds.length - 1; index >= 0 && value <= bounds[index]!; index--) series.buckets[index]!++;
        series.sum += value;
        series.count++;
      },
    };
  }

  get(): MetricObjectWithValues<MetricValueWithName<string>> {
    const values: MetricValueWithName<string>[] = [];
    for (const series of [...this.all].sort(bySeries)) {
      this.bounds.forEach((bound, index) => values.push({ metricName: `${this.name}_bucket`, labels: { ...series.labels, le: bound }, value: series.buckets[index]! }));
      values.push({ metricName: `${this.name}_bucket`, labels: { ...series.labels, le: "+Inf" }, value: series.count });
      values.push({ metricName: `${this.name}_sum`, labels: series.labels, value: series.sum });
      values.push({ metricName: `${this.name}_count`, labels: series.labels, value: series.count });
    }
    return { name: this.name, help: this.help, type: "histogram" as never, aggregator: "sum", values, collect: () => undefined };
  }

  reset(): void {
    for (const series of this.all) {
      series.count = 0;
      series.sum = 0;
      series.buckets.fill(0);
    }
  }
}

function labelsOf(names: readonly string[], values: readonly string[]): Record<string, string> {
  return Object.fromEntries(names.map((name, index) => [name, values[index] ?? ""]));
}

function bySeries(a: Series, b: Series): number {
  const left = Object.values(a.labels).join("\u0000");
  const right = Object.values(b.labels).join("\u0000");
  return left < right ? -1 : left > right ? 1 : 0;
}
