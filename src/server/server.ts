import { readFileSync } from "node:fs";
import type * as http from "node:http";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import * as tls from "node:tls";
import { createContextValues } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { TelemetryHub } from "../application/telemetry-hub.js";
import { composeSidecar, type Sidecar, type SidecarParts } from "./composition-root.js";
import { decodeOpaqueRequests, withOpaqueRequests } from "./transport/binary-requests.js";
import { classifyContentType } from "./transport/content-type.js";
import { requestIdKey } from "./policy/call-context.js";
import { defaultConfig, type Config } from "./operations/config.js";
import { respondWithError } from "./transport/error-responses.js";
import type { HealthStatus } from "./operations/health.js";
import { serveMetrics } from "./operations/metrics-route.js";
import { registerServerGauges } from "./server-gauges.js";
import { shutDown } from "./operations/shutdown.js";
import { encodeGrpcMessagesMinimally } from "./transport/grpc-message-encoding.js";
import { encodeUnaryResponses, recordUnaryMethods, serveUnaryCall, takesStream } from "./transport/grpc-unary.js";
import { createDualProtocolServer, type ListenerTls } from "./transport/listen.js";
import { defaultMaxConnections } from "./transport/open-connections.js";
import type { Metrics } from "./operations/metrics.js";
import { freezeJsonRequests } from "./transport/json-requests.js";
import { preEncodeBinaryResponses } from "./transport/pre-encoded-responses.js";
import { refuseOnceBodyEnds, refuseOversizedMessages } from "./transport/oversized-messages.js";
import { requestIdOf } from "./transport/request-ids.js";
import { pollStoreHealth } from "./operations/store-health.js";

/** The configuration (defaults for what is not given) and what the caller brings (see `SidecarParts`). */
export interface ServerOptions extends Partial<Config>, SidecarParts {}

export interface RunningServer {
  /** The bound address, with the real port when 0 was asked for. */
  address: AddressInfo;
  health: HealthStatus;
  telemetry: TelemetryHub;
  metrics: Metrics;
  /** Whether the port serves TLS, and whether it requires client certificates. */
  tls: { enabled: boolean; clientCertificates: boolean };
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

/**
 * Composes the sidecar from `options` over defaults (composition-root.ts) and serves it: the
 * entry point for embedders, tests and benchmarks.
 */
export async function startServer(options: ServerOptions): Promise<RunningServer> {
  return serveSidecar(composeSidecar({ ...defaultConfig, ...withoutUndefined(options) }, options));
}

/**
 * Serves a composed sidecar on one port: gRPC, gRPC-Web, Connect and the metrics path. This file
 * owns the transport only — the listener (HTTP/1.1 and h2c, TLS: transport/listen.ts), how bytes
 * become messages and back (the three paths below), admission before a body is read, request
 * ids, and the bounded shutdown; what it serves, and the policy every call runs through, come
 * composed (composition-root.ts).
 */
export async function serveSidecar(sidecar: Sidecar): Promise<RunningServer> {
  const { config, logger, application, health, metrics, tracing, admission, policy, registerServices, calls, streams, inspector, metricsText } = sidecar;
  const { codec, store, telemetry, tokenCounts, regexSearch } = application;
  // Three ways bytes become messages, one policy (docs/architecture.md, "One request path"):
  // unary binary gRPC straight from the HTTP/2 stream; other binary requests through connect with
  // the codec decoding and encoding; JSON and the rest through connect as it is.
  const requestIds = new WeakMap<object, string>();
  const adapterOptions = {
    readMaxBytes: config.maxRequestBytes,
    // Standard protobuf JSON: an unknown field or enum name is INVALID_ARGUMENT naming it, not
    // silently dropped (connect ignores unknown fields by default, so a misspelled "appendUsr"
    // came back as "deltas[0]: no operation set").
    jsonOptions: { ignoreUnknownFields: false },
    ...(config.maxDeadlineMs > 0 ? { maxTimeoutMs: config.maxDeadlineMs } : {}),
    // Compressing a 400 KB response costs more than sending it to a sidecar neighbour; compressed
    // requests are still accepted.
    compressMinBytes: config.compressMinBytes === 0 ? 0xffffffff : config.compressMinBytes,
    contextValues: (request: http.IncomingMessage | http2.Http2ServerRequest) =>
      createContextValues().set(requestIdKey, requestIds.get(request) ?? ""),
  };
  const connectHandler = connectNodeAdapter({
    ...adapterOptions,
    routes: (router) => registerServices(router),
    interceptors: [...policy, freezeJsonRequests(), preEncodeBinaryResponses(codec)],
  });
  const binaryHandler = connectNodeAdapter({
    ...adapterOptions,
    routes: (router) => registerServices(router, withOpaqueRequests),
    interceptors: [decodeOpaqueRequests(codec), ...policy, preEncodeBinaryResponses(codec)],
  });
  const unaryGrpc = {
    methods: recordUnaryMethods((router) => registerServices(router)),
    interceptors: [...policy, encodeUnaryResponses(codec)],
    admission,
    codec,
    maxTimeoutMs: config.maxDeadlineMs > 0 ? config.maxDeadlineMs : Number.POSITIVE_INFINITY,
  };

  let stopping = false;
  const handle = (
    request: http.IncomingMessage | http2.Http2ServerRequest,
    response: http.ServerResponse | http2.Http2ServerResponse,
  ) => {
    // HTTP/1.1 keep-alive connections are told to go away once shutdown has begun.
    if (stopping && request.httpVersionMajor === 1) response.setHeader("connection", "close");
    // Host and Origin first, for every path and method (policy/request-origin.ts).
    const foreign = admission.refusalByOrigin(request.url ?? "", request.headers[":authority"] ?? request.headers.host, request.headers.origin);
    if (foreign !== undefined) {
      if (!respondWithError(request, response, foreign)) {
        request.resume();
        response.writeHead(403, { "content-type": "text/plain; charset=utf-8" });
        response.end(`${foreign.rawMessage}\n`);
      }
      return;
    }
    if (serveMetrics(request, response, metricsText, config.metricsPath)) return;
    if (inspector?.serve(request, response)) return;
    const requestId = requestIdOf(request.headers["x-request-id"]);
    requestIds.set(request, requestId);
    response.setHeader("x-request-id", requestId);
    const kind = classifyContentType(request.headers["content-type"]);
    if (kind?.protocol === "grpc") encodeGrpcMessagesMinimally(response);
    const settle = calls.track();
    // HTTP/2 compat responses emit "finish" only once the whole stream closes, which a client that
    // got an early error (a message over --max-request-bytes) may never do; the stream's own
    // "finish" marks the end of our side, and that is when the call is over for us.
    const sent = "stream" in response ? response.stream : response;
    sent.once("finish", settle);
    response.once("close", settle);
    if (request.method === "POST" && !admit(request, response, sent)) return;
    if (request.method === "POST" && kind !== undefined) refuseOversizedMessages(request, kind, admission);
    (request.method === "POST" && kind?.binary ? binaryHandler : connectHandler)(request, response);
  };
  // Admission for what connect serves: auth on the headers, a body of known size held up front,
  // and a body that stalls reset once --request-body-timeout-ms has passed (connect is reading it
  // by then, so the stream is reset rather than answered).
  const admit = (
    request: http.IncomingMessage | http2.Http2ServerRequest,
    response: http.ServerResponse | http2.Http2ServerResponse,
    sent: NodeJS.EventEmitter,
  ): boolean => {
    const path = request.url ?? "";
    const refusal = admission.refusalByHeaders(path, request.headers.authorization);
    if (refusal !== undefined && respondWithError(request, response, refusal)) return false;
    const declared = Number(request.headers["content-length"] ?? 0);
    // A Connect unary body is the message itself (uncompressed: no content-encoding).
    const kind = classifyContentType(request.headers["content-type"]);
    if (kind?.protocol === "connect" && !kind.stream && request.headers["content-encoding"] === undefined && declared > admission.maxRequestBytes) {
      refuseOnceBodyEnds(request, response, admission.tooLarge(declared), admission);
      return false;
    }
    if (declared > 0) {
      const release = admission.tryHold(path, declared);
      if (release === undefined && respondWithError(request, response, admission.memory.refusal(declared))) return false;
      if (release !== undefined) {
        sent.once("finish", release);
        response.once("close", release);
      }
    }
    if (!request.readableEnded) {
      const timer = setTimeout(() => {
        if (request.readableEnded) return;
        logger.log("error", "request body timed out: connection reset", { path, timeoutMs: admission.bodyTimeoutMs });
        if ("stream" in response) response.stream.close(http2.constants.NGHTTP2_CANCEL);
        else request.socket.destroy();
      }, admission.bodyTimeoutMs);
      request.once("end", () => clearTimeout(timer));
      response.once("close", () => clearTimeout(timer));
    }
    return true;
  };

  const serveStream = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => {
    const spec = takesStream(unaryGrpc.methods, headers);
    if (spec === undefined) return false;
    const requestId = requestIdOf(headers["x-request-id"]);
    // Our side is done at "finish"; "close" also covers a stream reset before that.
    const settle = calls.track();
    stream.once("finish", settle);
    stream.once("close", settle);
    serveUnaryCall(stream, headers, spec, unaryGrpc, createContextValues().set(requestIdKey, requestId), { "x-request-id": requestId });
    return true;
  };
  const listenerTls = readListenerTls(config);
  const { tcp, h2, sockets, connections } = createDualProtocolServer(handle, {
    maxConcurrentStreams: config.maxStreams + unaryStreamSlots,
    streamHandler: config.directUnaryGrpc ? serveStream : undefined,
    tls: listenerTls,
    connections: {
      maxConnections: config.maxConnections === 0 ? defaultMaxConnections() : config.maxConnections,
      idleTimeoutMs: config.idleTimeoutMs,
      headersTimeoutMs: config.headersTimeoutMs,
    },
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
  // Once listening, a failed accept (EMFILE: out of descriptors despite --max-connections) is that
  // connection's failure, not the process's; unheard, node would throw it.
  tcp.on("error", (error) => logger.log("error", "accepting a connection failed", { error: error.message }));

  const storeHealth = pollStoreHealth(store, health, config.healthIntervalMs, logger);
  await storeHealth.firstCheck;
  registerServerGauges(metrics, { health, calls, streams, telemetry, codec, requestMemory: admission.memory, tokenCounts, connections, spanQueue: tracing?.queue, store });

  let stopped: Promise<void> | undefined;
  return {
    address: tcp.address() as AddressInfo,
    health,
    telemetry,
    metrics,
    tls: { enabled: listenerTls !== undefined, clientCertificates: listenerTls?.requestCert ?? false },
    shutdown(graceMs = config.shutdownGraceMs) {
      stopping = true;
      stopped ??= shutDown(
        { health, stopStoreHealth: storeHealth.stop, listener: tcp, endStreams: () => sidecar.endStreams.abort(), sessions, sockets, calls, logger },
        graceMs,
      ).finally(() => {
        regexSearch.close();
        connections.stop();
      });
      return stopped;
    },
  };
}

/**
 * The TLS files named by the configuration, read once at start (a changed certificate takes a
 * restart); undefined for cleartext. An unreadable file or a key that does not match its
 * certificate throws, naming the flag.
 */
function readListenerTls(config: Config): ListenerTls | undefined {
  if (config.tlsCert === "") return undefined;
  const read = (path: string, flag: string) => {
    try {
      return readFileSync(path);
    } catch (error) {
      throw new Error(`cannot read --${flag} ${path}: ${error instanceof Error ? error.message : String(error)}`);
    }
  };
  const listenerTls: ListenerTls = {
    cert: read(config.tlsCert, "tls-cert"),
    key: read(config.tlsKey, "tls-key"),
    ...(config.tlsClientCa ? { ca: read(config.tlsClientCa, "tls-client-ca") } : {}),
    requestCert: config.tlsClientCa !== "",
  };
  try {
    tls.createSecureContext(listenerTls);
  } catch (error) {
    throw new Error(`invalid --tls-cert ${config.tlsCert} / --tls-key ${config.tlsKey}: ${error instanceof Error ? error.message : String(error)}`);
  }
  return listenerTls;
}

function withoutUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, entry]) => entry !== undefined)) as Partial<T>;
}
