import { fromBinary, toBinary } from "@bufbuild/protobuf";
import cluster, { type Worker } from "node:cluster";
import { ObserverEventSchema, type ObserverEvent } from "#gen/contextd/v1/telemetry_pb";
import { matchesFilter, observerEventBytes, type EventFilter, type TelemetryHub } from "../../application/telemetry-hub.js";
import type { Logger } from "./logger.js";

// `--workers N`: N processes serve the one port through node:cluster. The primary process serves
// nothing itself: it forks the workers (each a whole sidecar with its own store connection, codec
// and health poll; the primary accepts connections and hands each to one worker in turn), says
// "contextd listening" once all of them listen, answers /metrics requests of a worker with every
// worker's metrics, relays compile events to the workers whose WatchEvents subscribers would not
// see them otherwise, replaces a worker that dies, and on SIGTERM/SIGINT drains all of them.
//
// Why: one sidecar is one JavaScript thread; at concurrency 32 a Commit RPC on Redis was
// CPU-bound at ~2,900/s in the sidecar while the bare script does 10,000-13,000/s in Redis.

/** The IPC messages between the primary and its workers (node:cluster's channel, JSON). */
type WorkerMessage =
  | { contextd: "listening"; address: string; port: number }
  | { contextd: "metrics-wanted"; request: number }
  | { contextd: "render-metrics"; request: number }
  | { contextd: "rendered-metrics"; request: number; text: string }
  | { contextd: "metrics"; request: number; text: string }
  // The events a worker's WatchEvents subscribers would receive (their filters), sent when one
  // comes or goes.
  | { contextd: "telemetry-wanted"; wanted: WantedEvents }
  // Which of its compile events a worker sends: those another worker's subscribers would receive.
  | { contextd: "telemetry-forward"; wanted: WantedEvents }
  // One event-loop turn's events of one worker (binary ObserverEvents, base64), and how many were
  // left out before them (the batch full, or the channel backed up); relayed to the workers that want them.
  | { contextd: "telemetry-events"; events: string[]; dropped: number };

/** Events some subscribers would receive: none, every event, or those matching one of the filters. */
export type WantedEvents = "none" | "all" | EventFilter[];

/**
 * Filters beyond which a worker's wanted events are sent coarser (tenant prefixes only, then
 * "all"), so that announcing them stays a small message whatever the subscribers asked for.
 */
const maxWantedFilters = 128;
const maxWantedChars = 16 * 1024;

/** How much telemetry crosses the IPC channel: bytes of one message, and bytes sent but not yet written, per channel. */
export interface TelemetryRelayBounds {
  batchEvents: number;
  batchBytes: number;
}

function isWorkerMessage(message: unknown): message is WorkerMessage {
  return typeof message === "object" && message !== null && typeof (message as { contextd?: unknown }).contextd === "string";
}

/** How long the primary waits for each worker's metrics before leaving that worker out. */
const metricsAnswerMs = 1_000;

/** Whether this process is a worker forked by `superviseWorkers`. */
export function isWorkerProcess(): boolean {
  return cluster.isWorker;
}

export interface WorkerSupervision {
  /** Resolves once the workers listen, with the address they share (what "contextd listening" announces). */
  listening: Promise<{ address: string; port: number; pids: number[] }>;
  /**
   * Sends every worker SIGTERM (each runs its bounded shutdown) and resolves once all exited, or
   * kills the ones still running after `graceMs` + 5 s. Resolves whether they all left by themselves.
   */
  stop(signal: NodeJS.Signals, graceMs: number): Promise<boolean>;
}

/**
 * Forks `count` workers running this same entry script with the same arguments. A worker that
 * exits before all of them listen fails the start; one that dies later is logged and replaced
 * after a second.
 */
export function superviseWorkers(count: number, logger: Logger, relayBounds: TelemetryRelayBounds): WorkerSupervision {
  let stopping = false;
  let started = false;
  const workers = new Set<Worker>();
  const pendingMetrics = new Map<number, { texts: Map<number, string>; done: () => void }>();
  let nextRequest = 0;
  let resolveListening!: (value: { address: string; port: number; pids: number[] }) => void;
  let rejectListening!: (error: Error) => void;
  const listening = new Promise<{ address: string; port: number; pids: number[] }>((resolve, reject) => {
    resolveListening = resolve;
    rejectListening = reject;
  });
  const listeningWorkers = new Map<number, { address: string; port: number }>();
  // What each worker's WatchEvents subscribers would receive, and what each was last told to forward.
  const wantingTelemetry = new Map<number, WantedEvents>();
  const forwarding = new Map<number, string>();
  const updateForwarding = () => {
    for (const worker of workers) {
      const wanted = unionOfWanted([...wantingTelemetry].filter(([id]) => id !== worker.id).map(([, each]) => each));
      const told = JSON.stringify(wanted);
      if ((forwarding.get(worker.id) ?? '"none"') === told || !worker.isConnected()) continue;
      forwarding.set(worker.id, told);
      worker.send({ contextd: "telemetry-forward", wanted } satisfies WorkerMessage);
    }
  };
  // Relayed bytes not yet written to each worker's channel, and events left out for it since.
  const relaying = new Map<number, { inFlight: number; dropped: number }>();
  const relay = (from: Worker, message: Extract<WorkerMessage, { contextd: "telemetry-events" }>) => {
    const bytes = messageBytes(message);
    for (const other of workers) {
      const wanted = wantingTelemetry.get(other.id);
      if (other === from || wanted === undefined || wanted === "none" || !other.isConnected()) continue;
      let channel = relaying.get(other.id);
      if (channel === undefined) relaying.set(other.id, (channel = { inFlight: 0, dropped: 0 }));
      // A worker that does not read its channel (its event loop held) makes the primary buffer
      // what is sent to it: past the bound, events are left out and counted instead.
      if (channel.inFlight + bytes > relayBounds.batchBytes * 4) {
        channel.dropped += message.events.length + message.dropped;
        continue;
      }
      const sent = { ...message, dropped: message.dropped + channel.dropped };
      channel.dropped = 0;
      channel.inFlight += bytes;
      const written = channel;
      other.send(sent satisfies WorkerMessage, undefined, undefined, () => (written.inFlight -= bytes));
    }
  };

  /** Asks every worker for its metrics text; answers `from` with all of them merged. */
  const gatherMetrics = (from: Worker, request: number) => {
    const id = nextRequest++;
    const asked = [...workers];
    const texts = new Map<number, string>();
    const finish = () => {
      if (!pendingMetrics.delete(id)) return;
      clearTimeout(timer);
      const missing = asked.filter((worker) => !texts.has(worker.id)).map((worker) => worker.id);
      const merged = mergeWorkerMetrics([...texts].sort((a, b) => a[0] - b[0]).map(([worker, text]) => ({ worker, text })));
      const note = missing.length > 0 ? `# workers ${missing.join(", ")} did not answer within ${metricsAnswerMs} ms and are left out\n` : "";
      if (from.isConnected()) from.send({ contextd: "metrics", request, text: note + merged } satisfies WorkerMessage);
    };
    const timer = setTimeout(finish, metricsAnswerMs);
    pendingMetrics.set(id, {
      texts,
      done: finish,
    });
    for (const worker of asked) {
      if (worker.isConnected()) worker.send({ contextd: "render-metrics", request: id } satisfies WorkerMessage);
    }
    // Not one worker to ask (all just died): answer with what there is.
    if (asked.length === 0) finish();
  };

  const fork = () => {
    const worker = cluster.fork();
    workers.add(worker);
    worker.on("message", (message: unknown) => {
      if (!isWorkerMessage(message)) return;
      if (message.contextd === "telemetry-events") {
        relay(worker, message);
      } else if (message.contextd === "telemetry-wanted") {
        if (message.wanted === "none") wantingTelemetry.delete(worker.id);
        else wantingTelemetry.set(worker.id, message.wanted);
        updateForwarding();
      } else if (message.contextd === "listening") {
        listeningWorkers.set(worker.id, { address: message.address, port: message.port });
        // A replacement worker forwards its events at once if another worker has subscribers.
        updateForwarding();
        if (!started && listeningWorkers.size === count) {
          started = true;
          resolveListening({ ...message, pids: [...workers].map((each) => each.process.pid!) });
        }
      } else if (message.contextd === "metrics-wanted") {
        gatherMetrics(worker, message.request);
      } else if (message.contextd === "rendered-metrics") {
        const pending = pendingMetrics.get(message.request);
        if (!pending) return;
        pending.texts.set(worker.id, message.text);
        if (pending.texts.size === workers.size) pending.done();
      }
    });
    worker.once("exit", (code, signal) => {
      workers.delete(worker);
      listeningWorkers.delete(worker.id);
      wantingTelemetry.delete(worker.id);
      forwarding.delete(worker.id);
      relaying.delete(worker.id);
      updateForwarding();
      for (const pending of pendingMetrics.values()) if (pending.texts.size === workers.size) pending.done();
      if (stopping) return;
      if (!started) {
        rejectListening(new Error(`worker ${worker.id} exited with ${signal ?? code} before all ${count} workers listened`));
        return;
      }
      logger.log("error", "worker died: starting a new one", { worker: worker.id, pid: worker.process.pid, code, signal });
      setTimeout(() => {
        if (!stopping) fork();
      }, 1_000).unref();
    });
  };
  for (let index = 0; index < count; index++) fork();
  listening.catch(() => {
    stopping = true;
    for (const worker of workers) worker.process.kill("SIGKILL");
  });

  return {
    listening,
    async stop(signal, graceMs) {
      stopping = true;
      const running = [...workers];
      const exits = running.map((worker) => (worker.isDead() ? Promise.resolve() : new Promise<void>((resolve) => worker.once("exit", () => resolve()))));
      for (const worker of running) if (!worker.isDead()) worker.process.kill(signal);
      let timer: NodeJS.Timeout | undefined;
      const inTime = await Promise.race([
        Promise.all(exits).then(() => true),
        new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), graceMs + 5_000))),
      ]);
      clearTimeout(timer);
      if (!inTime) {
        for (const worker of running) if (!worker.isDead()) worker.process.kill("SIGKILL");
        await Promise.all(exits);
      }
      return inTime;
    },
  };
}

/** In a worker: tells the primary it listens (the primary announces the address once all do). */
export function reportListening(address: string, port: number): void {
  process.send!({ contextd: "listening", address, port } satisfies WorkerMessage);
}

/**
 * In a worker: answers the primary's requests for this worker's metrics with `render()`, and
 * returns what the metrics route serves instead of this worker's own text: every worker's,
 * gathered by the primary (see `mergeWorkerMetrics`).
 */
export function shareWorkerMetrics(render: () => Promise<string>): () => Promise<string> {
  let nextRequest = 0;
  const waiting = new Map<number, (text: string) => void>();
  process.on("message", (message: unknown) => {
    if (!isWorkerMessage(message)) return;
    if (message.contextd === "render-metrics") {
      const request = message.request;
      void render().then((text) => process.send!({ contextd: "rendered-metrics", request, text } satisfies WorkerMessage));
    } else if (message.contextd === "metrics") {
      waiting.get(message.request)?.(message.text);
      waiting.delete(message.request);
    }
  });
  return () =>
    new Promise<string>((resolve) => {
      const request = nextRequest++;
      // The primary always answers (it leaves out workers that do not); this bound covers a
      // primary that is itself gone, when this worker's own metrics are all there is.
      const timer = setTimeout(() => {
        waiting.delete(request);
        void render().then((text) => resolve(`# the primary process did not answer; this worker's metrics alone\n${text}`));
      }, metricsAnswerMs * 2);
      waiting.set(request, (text) => {
        clearTimeout(timer);
        resolve(text);
      });
      process.send!({ contextd: "metrics-wanted", request } satisfies WorkerMessage);
    });
}

/**
 * In a worker: makes `hub`'s WatchEvents subscribers see the compiles of every worker. The
 * primary tells each worker which events the other workers' subscribers would receive (their
 * filters: a conversation, a tenant's prefix, or all); this worker sends only those (binary,
 * batched per event-loop turn, at most `bounds.batchEvents` events and `bounds.batchBytes` bytes a
 * turn, the rest counted as dropped) and the primary relays them to the workers that want them,
 * where they reach the subscribers only (metrics and traces counted them where the compile ran).
 * Nothing is sent while no other worker watches, so a sidecar without subscribers pays nothing.
 *
 * Why bounded in bytes: every compile event of one worker crossed the primary while any other
 * worker had a subscriber, carrying the conversation id: 40 compiles with 1 MB ids took the primary
 * from 90 to 777 MB, and 60 with 4 MB ids killed it with out-of-memory in `JSON.parse` (the IPC
 * channel's encoding), and the sidecar with it. Now no message exceeds about `batchBytes`, and
 * neither side buffers more than four of them for a channel that is not being read.
 */
export function shareWorkerTelemetry(hub: TelemetryHub, bounds: TelemetryRelayBounds): void {
  let batch: string[] = [];
  let batchBytes = 0;
  let dropped = 0;
  let inFlight = 0;
  let flushScheduled = false;
  let forwarded: WantedEvents = "none";
  const flush = () => {
    flushScheduled = false;
    const bytes = batchBytes + 64;
    if (!process.connected || inFlight + bytes > bounds.batchBytes * 4) {
      dropped += batch.length;
    } else {
      inFlight += bytes;
      process.send!({ contextd: "telemetry-events", events: batch, dropped } satisfies WorkerMessage, undefined, undefined, () => (inFlight -= bytes));
      dropped = 0;
    }
    batch = [];
    batchBytes = 0;
  };
  const forward = (event: ObserverEvent) => {
    if (forwarded === "none" || (forwarded !== "all" && !forwarded.some((filter) => matchesFilter(filter, event)))) return;
    // Base64 is 4/3 of the binary encoding, which is at most about the event's size.
    if (batch.length >= bounds.batchEvents || batchBytes + (observerEventBytes(event) * 4) / 3 > bounds.batchBytes) dropped++;
    else {
      const encoded = Buffer.from(toBinary(ObserverEventSchema, event)).toString("base64");
      batch.push(encoded);
      batchBytes += encoded.length + 3;
    }
    if (!flushScheduled) {
      flushScheduled = true;
      setImmediate(flush);
    }
  };
  let announced = '"none"';
  hub.onSubscribers((filters) => {
    const wanted = wantedBy(filters);
    const text = JSON.stringify(wanted);
    if (text === announced || !process.connected) return;
    announced = text;
    process.send!({ contextd: "telemetry-wanted", wanted } satisfies WorkerMessage);
  });
  process.on("message", (message: unknown) => {
    if (!isWorkerMessage(message)) return;
    if (message.contextd === "telemetry-forward") {
      forwarded = message.wanted;
      hub.forwardTo(forwarded === "none" ? undefined : forward);
    } else if (message.contextd === "telemetry-events") {
      message.events.forEach((encoded, index) => hub.deliver(fromBinary(ObserverEventSchema, Buffer.from(encoded, "base64")), index === 0 ? BigInt(message.dropped) : 0n));
    }
  });
}

/** What subscribers with `filters` would receive, announced small: coarser (tenant prefixes, then all) past the bounds. */
export function wantedBy(filters: readonly EventFilter[]): WantedEvents {
  if (filters.length === 0) return "none";
  if (filters.some((filter) => filter.conversationId === "" && filter.conversationPrefix === "")) return "all";
  const exact = distinctFilters(filters);
  if (exact.length <= maxWantedFilters && filterChars(exact) <= maxWantedChars) return exact;
  const prefixes = distinctFilters(filters.map((filter) => ({ conversationId: "", conversationPrefix: filter.conversationPrefix })));
  if (prefixes.some((filter) => filter.conversationPrefix === "") || prefixes.length > maxWantedFilters || filterChars(prefixes) > maxWantedChars) return "all";
  return prefixes;
}

/** What the subscribers of several workers would receive together. */
export function unionOfWanted(wanted: readonly WantedEvents[]): WantedEvents {
  if (wanted.includes("all")) return "all";
  const filters = wanted.flatMap((each) => (each === "none" || each === "all" ? [] : each));
  return filters.length === 0 ? "none" : distinctFilters(filters);
}

function distinctFilters(filters: readonly EventFilter[]): EventFilter[] {
  const byKey = new Map<string, EventFilter>();
  for (const filter of filters) byKey.set(`${filter.conversationPrefix}\u0000${filter.conversationId}`, { conversationId: filter.conversationId, conversationPrefix: filter.conversationPrefix });
  return [...byKey.values()];
}

function filterChars(filters: readonly EventFilter[]): number {
  return filters.reduce((sum, filter) => sum + filter.conversationId.length + filter.conversationPrefix.length, 0);
}

// About the JSON text of a relayed message: its events are base64, which JSON leaves as is.
function messageBytes(message: { events: string[] }): number {
  return message.events.reduce((sum, event) => sum + event.length + 3, 64);
}

/**
 * Several workers' Prometheus texts as one: each metric family once (its HELP and TYPE from the
 * first worker that has it), holding every worker's samples with a `worker` label added, so that
 * `sum by (...)` gives the sidecar's totals and nothing is double-counted. Counters, histograms
 * and gauges alike stay per worker: a gauge such as in-flight calls sums, one such as health does not.
 */
export function mergeWorkerMetrics(workers: readonly { worker: number; text: string }[]): string {
  const families = new Map<string, { header: string[]; samples: string[] }>();
  for (const { worker, text } of workers) {
    let family: { header: string[]; samples: string[] } | undefined;
    for (const line of text.split("\n")) {
      if (line === "") continue;
      const header = /^# (HELP|TYPE) (\S+)/.exec(line);
      if (header) {
        const name = header[2]!;
        let known = families.get(name);
        if (!known) {
          known = { header: [], samples: [] };
          families.set(name, known);
        }
        if (known.header.length < 2 && !known.header.some((existing) => existing.startsWith(`# ${header[1]} `))) known.header.push(line);
        family = known;
        continue;
      }
      if (line.startsWith("#") || !family) continue;
      family.samples.push(withWorkerLabel(line, worker));
    }
  }
  const lines: string[] = [];
  for (const family of families.values()) lines.push(...family.header, ...family.samples);
  return lines.join("\n") + "\n";
}

/** `name{a="b"} 1` → `name{worker="3",a="b"} 1`; `name 1` → `name{worker="3"} 1`. */
function withWorkerLabel(sample: string, worker: number): string {
  const brace = sample.indexOf("{");
  const space = sample.indexOf(" ");
  if (brace >= 0 && (space < 0 || brace < space)) {
    const closing = sample.indexOf("}", brace);
    const inner = sample.slice(brace + 1, closing);
    return `${sample.slice(0, brace)}{worker="${worker}"${inner === "" ? "" : "," + inner}${sample.slice(closing)}`;
  }
  return `${sample.slice(0, space)}{worker="${worker}"}${sample.slice(space)}`;
}
