import { randomUUID } from "node:crypto";
import type * as http from "node:http";
import type * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { createContextValues } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { Codec } from "../codec/codec.js";
import type { ConversationStore } from "../store/conversation-store.js";
import { authenticate } from "./policy/auth.js";
import { decodeOpaqueRequests, withOpaqueRequests } from "./transport/binary-requests.js";
import { classifyContentType } from "./transport/content-type.js";
import { requestIdKey } from "./policy/call-context.js";
import { defaultConfig, type Config } from "./operations/config.js";
import { respondWithError } from "./transport/error-responses.js";
import { HealthStatus, ServingStatus } from "./operations/health.js";
import { encodeGrpcMessagesMinimally } from "./transport/grpc-message-encoding.js";
import { recordUnaryMethods, serveUnaryCall, takesStream } from "./transport/grpc-unary.js";
import { instrumentCalls } from "./policy/instrumentation.js";
import { enforceDeadlines, limitMessagesPerRequest } from "./policy/limits.js";
import { createDualProtocolServer } from "./transport/listen.js";
import { createLogger, type Logger } from "./operations/logger.js";
import { Metrics } from "./operations/metrics.js";
import { preEncodeBinaryResponses } from "./transport/pre-encoded-responses.js";
import { RequestMemoryBudget } from "./policy/request-memory.js";
import { contextdServiceNames, routes } from "./services/routes.js";
import { pollStoreHealth } from "./operations/store-health.js";
import { guardStreams, StreamCounter } from "./policy/stream-guard.js";
import { TelemetryHub } from "../application/telemetry-hub.js";

export interface ServerOptions extends Partial<Config> {
  store: ConversationStore;
  /**
   * Decodes requests and encodes responses; give the store the same one, so responses reuse the
   * encodings of the states it hands out. A new one bounded by the configuration otherwise.
   */
  codec?: Codec;
  logger?: Logger;
  /** Idle time after which a Watch stream sends a heartbeat; 15 s when not given. */
  watchHeartbeatMs?: number;
}

export interface RunningServer {
  /** The bound address, with the real port when 0 was asked for. */
  address: AddressInfo;
  health: HealthStatus;
  telemetry: TelemetryHub;
  metrics: Metrics;
  /**
   * Graceful stop: health NOT_SERVING, stop accepting, streams end with UNAVAILABLE, unary calls
   * may finish for `graceMs` (default: the configured grace), then every connection is cut.
   * Does not close the store: the caller owns it.
   */
  shutdown(graceMs?: number): Promise<void>;
}

// HTTP/2 streams per connection beyond --max-streams, so unary calls still get through while the
// streaming limit is reached (streaming calls beyond it get RESOURCE_EXHAUSTED, not a refused stream).
const unaryStreamSlots = 128;

// How long a shutdown waits for closing HTTP/2 sessions to deliver what was written to them.
const sessionFlushMs = 1_000;

// A caller's request id is echoed only if it is short and printable; otherwise a fresh one is used.
const acceptableRequestId = /^[\x21-\x7e]{1,128}$/;

/** Starts the sidecar on one port serving gRPC, gRPC-Web, Connect and the metrics path. */
export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const config: Config = { ...defaultConfig, ...withoutUndefined(options) };
  const logger = options.logger ?? createLogger(config.logLevel);
  const health = new HealthStatus(new Set(contextdServiceNames));
  const telemetry = new TelemetryHub(config.telemetryQueue);
  const metrics = new Metrics();
  const codec = options.codec ?? new Codec({ recentMessageBytes: config.recentMessageBytes, retainedEncodingBytes: config.retainedEncodingBytes });
  const streams = new StreamCounter();
  const shutdownController = new AbortController();
  telemetry.listen(metrics.observe);

  const requestIds = new WeakMap<object, string>();
  const routeDependencies = {
    health,
    store: options.store,
    telemetry,
    shutdown: shutdownController.signal,
    watchHeartbeatMs: options.watchHeartbeatMs ?? 15_000,
    summarizeTimeoutMs: config.summarizeTimeoutMs,
    maxCompileTextBytes: config.maxCompileTextBytes,
  };
  // Outermost first: every call is timed and logged, then authenticated, then checked.
  const interceptors = [
    instrumentCalls(logger, metrics),
    enforceDeadlines(),
    authenticate(config.authTokens),
    limitMessagesPerRequest(config.maxMessages),
    guardStreams(config.maxStreams, streams, shutdownController.signal),
  ];
  const adapterOptions = {
    readMaxBytes: config.maxRequestBytes,
    ...(config.maxDeadlineMs > 0 ? { maxTimeoutMs: config.maxDeadlineMs } : {}),
    // Compressing a 400 KB response costs more than sending it to a sidecar neighbour; compressed
    // requests are still accepted.
    compressMinBytes: config.compressMinBytes === 0 ? 0xffffffff : config.compressMinBytes,
    contextValues: (request: http.IncomingMessage | http2.Http2ServerRequest) =>
      createContextValues().set(requestIdKey, requestIds.get(request) ?? ""),
  };
  // Two adapters over the same services: binary requests are decoded by our own decoder (see
  // binary-requests.ts), JSON requests, GETs and everything else by connect as usual.
  const registerServices = routes(routeDependencies);
  const connectInterceptors = [...interceptors, preEncodeBinaryResponses(codec)];
  const connectHandler = connectNodeAdapter({ ...adapterOptions, routes: (router) => registerServices(router), interceptors: connectInterceptors });
  const binaryHandler = connectNodeAdapter({
    ...adapterOptions,
    routes: (router) => registerServices(router, withOpaqueRequests),
    interceptors: [decodeOpaqueRequests(codec), ...connectInterceptors],
  });
  const requestMemory = new RequestMemoryBudget(config.maxBufferedRequestBytes);
  // Unary binary gRPC skips connect's adapter (see grpc-unary.ts); same services, same interceptors.
  const unaryGrpc = {
    methods: recordUnaryMethods((router) => registerServices(router)),
    interceptors,
    maxRequestBytes: config.maxRequestBytes,
    requestMemory,
    codec,
    maxTimeoutMs: config.maxDeadlineMs > 0 ? config.maxDeadlineMs : Number.POSITIVE_INFINITY,
  };

  let inFlight = 0;
  let stopping = false;
  let drained: (() => void) | undefined;
  const track = () => {
    inFlight++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      inFlight--;
      if (inFlight === 0) drained?.();
    };
  };
  const requestIdOf = (offered: string | string[] | undefined) =>
    typeof offered === "string" && acceptableRequestId.test(offered) ? offered : randomUUID();
  const handle = (
    request: http.IncomingMessage | http2.Http2ServerRequest,
    response: http.ServerResponse | http2.Http2ServerResponse,
  ) => {
    // HTTP/1.1 keep-alive connections are told to go away once shutdown has begun.
    if (stopping && request.httpVersionMajor === 1) response.setHeader("connection", "close");
    if (request.method === "GET" && (request.url ?? "").split("?")[0] === config.metricsPath) {
      const body = metrics.render();
      response.writeHead(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
      response.end(body);
      return;
    }
    const requestId = requestIdOf(request.headers["x-request-id"]);
    requestIds.set(request, requestId);
    response.setHeader("x-request-id", requestId);
    const kind = classifyContentType(request.headers["content-type"]);
    if (kind?.protocol === "grpc") encodeGrpcMessagesMinimally(response);
    const settle = track();
    // HTTP/2 compat responses emit "finish" only once the whole stream closes, which a client that
    // got an early error (a message over --max-request-bytes) may never do; the stream's own
    // "finish" marks the end of our side, and that is when the call is over for us.
    const sent = "stream" in response ? response.stream : response;
    sent.once("finish", settle);
    response.once("close", settle);
    // A body of known size holds it until the call is over (see request-memory.ts).
    const declared = request.method === "POST" ? Number(request.headers["content-length"] ?? 0) : 0;
    if (declared > 0) {
      const release = requestMemory.tryHold(declared);
      if (release === undefined && respondWithError(request, response, requestMemory.refusal(declared))) return;
      if (release !== undefined) {
        sent.once("finish", release);
        response.once("close", release);
      }
    }
    (request.method === "POST" && kind?.binary ? binaryHandler : connectHandler)(request, response);
  };

  const serveStream = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => {
    const spec = takesStream(unaryGrpc.methods, headers);
    if (spec === undefined) return false;
    const requestId = requestIdOf(headers["x-request-id"]);
    // Our side is done at "finish"; "close" also covers a stream reset before that.
    const settle = track();
    stream.once("finish", settle);
    stream.once("close", settle);
    serveUnaryCall(stream, headers, spec, unaryGrpc, createContextValues().set(requestIdKey, requestId), { "x-request-id": requestId });
    return true;
  };
  const { tcp, h2, sockets } = createDualProtocolServer(handle, {
    maxConcurrentStreams: config.maxStreams + unaryStreamSlots,
    streamHandler: serveStream,
  });
  const sessions = new Set<http2.ServerHttp2Session>();
  h2.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
    if (stopping) session.close();
  });
  await new Promise<void>((resolve, reject) => {
    tcp.once("error", reject);
    tcp.listen(config.port, config.host, () => {
      tcp.off("error", reject);
      resolve();
    });
  });

  const storeHealth = pollStoreHealth(options.store, health, config.healthIntervalMs, logger);
  await storeHealth.firstCheck;
  metrics.gauge("contextd_serving", "1 while health is SERVING.", () => (health.current === ServingStatus.SERVING ? 1 : 0));
  metrics.gauge("contextd_requests_in_flight", "HTTP requests being handled (RPCs of every kind).", () => inFlight);
  metrics.gauge("contextd_streams_active", "Streaming RPCs open.", () => streams.active);
  metrics.gauge("contextd_telemetry_subscribers", "WatchEvents subscribers.", () => telemetry.subscriberCount);
  metrics.gauge(
    "contextd_recent_messages_bytes",
    "Request messages kept to be handed out again, counted as encoding plus per-entry overhead (bounded by --recent-message-bytes).",
    () => codec.stats.recentMessageBytes,
  );
  metrics.gauge(
    "contextd_buffered_request_bytes",
    "Request bytes held by calls in progress (bounded by --max-buffered-request-bytes).",
    () => requestMemory.heldBytes,
  );
  metrics.gauge(
    "contextd_retained_encoding_bytes",
    "Encodings of immutable messages kept across calls (bounded by --retained-encoding-bytes).",
    () => codec.stats.retainedEncodingBytes,
  );

  let stopped: Promise<void> | undefined;
  return {
    address: tcp.address() as AddressInfo,
    health,
    telemetry,
    metrics,
    shutdown(graceMs = config.shutdownGraceMs) {
      stopped ??= (async () => {
        stopping = true;
        storeHealth.stop();
        health.set(ServingStatus.NOT_SERVING);
        // Let health watchers write NOT_SERVING before their streams are ended.
        await new Promise((resolve) => setImmediate(resolve));
        await new Promise((resolve) => setImmediate(resolve));
        const closed = new Promise<void>((resolve) => tcp.close(() => resolve()));
        shutdownController.abort();
        for (const session of sessions) session.close();
        if (inFlight > 0) {
          let timer: NodeJS.Timeout | undefined;
          await Promise.race([
            new Promise<void>((resolve) => (drained = resolve)),
            new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs))),
          ]);
          clearTimeout(timer);
          if (inFlight > 0) logger.log("error", "shutdown grace period over: cutting connections", { inFlight, graceMs });
        }
        // A call is over for us when its stream finished, which can be before its trailers (the
        // status of a stream ended by the shutdown) left the socket. A closing session closes once
        // its peer has them all, so the sessions get a moment to do that before they are cut.
        await sessionsClosed(sessions, Math.min(graceMs, sessionFlushMs));
        for (const session of sessions) session.destroy();
        for (const socket of sockets) socket.destroy();
        await closed;
      })();
      return stopped;
    },
  };
}

/** Resolves once every session has closed, or after `timeoutMs`. */
async function sessionsClosed(sessions: Set<http2.ServerHttp2Session>, timeoutMs: number): Promise<void> {
  if (sessions.size === 0) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    Promise.all([...sessions].map((session) => (session.destroyed ? undefined : new Promise((resolve) => session.once("close", resolve))))),
    new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs))),
  ]);
  clearTimeout(timer);
}

function withoutUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, entry]) => entry !== undefined)) as Partial<T>;
}
