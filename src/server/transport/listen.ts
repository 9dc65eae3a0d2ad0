import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";
import * as tls from "node:tls";
import { OpenConnections, type ConnectionBounds } from "./open-connections.js";

export type Handler = (
  request: http.IncomingMessage | http2.Http2ServerRequest,
  response: http.ServerResponse | http2.Http2ServerResponse,
) => void;

// Every HTTP/2 cleartext connection opens with this preface; HTTP/1.1 never does.
const http2Preface = Buffer.from("PRI * HTTP/2.0\r\n");

/**
 * HTTP/2 flow-control windows. Node's default is the protocol's 65,535 bytes, so a 400 KB request
 * needs several round trips of WINDOW_UPDATEs before the server has read it. Bigger windows let a
 * large compile request arrive in one flight; memory stays bounded by `maxSessionMemory`.
 */
const streamWindowBytes = 4 * 1024 * 1024;
const sessionWindowBytes = 16 * 1024 * 1024;

export interface DualProtocolServer {
  /** The listener: a `tls.Server` when TLS is on. */
  tcp: net.Server;
  h1: http.Server;
  h2: http2.Http2Server;
  /** Every open TCP connection, for shutdown. */
  sockets: Set<net.Socket>;
  /** The same connections with what they have in flight: timeouts and the connection cap. */
  connections: OpenConnections;
}

/**
 * Serves an HTTP/2 stream directly and returns true, or returns false to leave it to `Handler`
 * through node's compatibility API (see grpc-unary.ts for why some streams skip it).
 */
export type StreamHandler = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => boolean;

/**
 * TLS for the listener: the certificate chain and key, and `ca` + `requestCert` for mutual TLS
 * (a client without a certificate signed by `ca` is refused during the handshake).
 */
export interface ListenerTls {
  cert: Buffer;
  key: Buffer;
  ca?: Buffer;
  requestCert: boolean;
}

/**
 * One TCP listener for HTTP/1.1 and HTTP/2: gRPC needs HTTP/2, while Connect and gRPC-Web also
 * work over HTTP/1.1. In cleartext (h2c with prior knowledge) the first bytes of each connection
 * decide which server gets it. With `tls` every connection is TLS and the protocol the client chose
 * by ALPN decides: h2, or HTTP/1.1 for http/1.1 and for a client that offered no ALPN. Node's own
 * `http2.createSecureServer({allowHTTP1})` would do the ALPN part, but as a third server object
 * with its own stream and session handling; handing decrypted sockets to the same two servers
 * keeps one code path (stream handler, sessions, shutdown) for both modes.
 */
export function createDualProtocolServer(
  handler: Handler,
  options: { maxConcurrentStreams: number; streamHandler?: StreamHandler; tls?: ListenerTls; connections: ConnectionBounds },
): DualProtocolServer {
  const connections = new OpenConnections(options.connections);
  // Streams over HTTP/1.1 (Connect server streaming) live as long as the caller wants: no request
  // timeout. Node enforces its header and request timeouts only for a server that listens itself
  // (this one is handed sockets), so `connections` bounds headers and idle time instead.
  const h1 = http.createServer({ requestTimeout: 0, keepAliveTimeout: options.connections.idleTimeoutMs }, handler);
  h1.on("request", (request: http.IncomingMessage, response: http.ServerResponse) => response.once("close", connections.begin(request.socket)));
  // No request listener: node would then wrap every stream in a request/response pair before we
  // could look at it. Streams the stream handler declines are wrapped here, as node does.
  const h2 = http2.createServer({
    settings: { initialWindowSize: streamWindowBytes, maxConcurrentStreams: options.maxConcurrentStreams },
    maxSessionMemory: 64,
  });
  h2.on("stream", (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, _flags: number, rawHeaders: string[]) => {
    stream.once("close", connections.begin(stream.session!));
    if (options.streamHandler?.(stream, headers)) return;
    handleCompatibly(handler, stream, headers, rawHeaders);
  });
  // The socket being handed to the HTTP/2 server: node makes its session synchronously.
  let handing: net.Socket | undefined;
  h2.on("session", (session) => {
    session.once("localSettings", () => session.setLocalWindowSize(sessionWindowBytes));
    if (handing !== undefined) connections.alias(handing, session, () => session.close());
  });
  const handTo = (server: http.Server | http2.Http2Server, socket: net.Socket) => {
    handing = socket;
    try {
      server.emit("connection", socket);
    } finally {
      handing = undefined;
    }
  };
  const sockets = new Set<net.Socket>();
  const track = (socket: net.Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
  };
  const routeByPreface = (socket: net.Socket) => {
    socket.once("readable", function route() {
      const head: Buffer | null = socket.read();
      if (head === null) {
        socket.once("readable", route);
        return;
      }
      socket.unshift(head);
      const prefix = head.subarray(0, Math.min(head.length, http2Preface.length));
      const isHttp2 = prefix.equals(http2Preface.subarray(0, prefix.length));
      handTo(isHttp2 ? h2 : h1, socket);
    });
  };
  // Without setNoDelay, Nagle's algorithm holds back the small frames that end a response (gRPC
  // trailers) until the peer acknowledges the previous segment: a delayed-ACK wait per call.
  let tcp: net.Server;
  if (options.tls) {
    const secure = tls.createServer({
      cert: options.tls.cert,
      key: options.tls.key,
      ...(options.tls.ca ? { ca: options.tls.ca } : {}),
      requestCert: options.tls.requestCert,
      rejectUnauthorized: options.tls.requestCert,
      ALPNProtocols: ["h2", "http/1.1"],
      minVersion: "TLSv1.2",
    });
    // A handshake is bounded by the headers timeout of the accepted socket, which ends the TLS
    // socket over it too.
    secure.on("connection", (socket: net.Socket) => {
      if (!connections.accept(socket)) return;
      track(socket);
      socket.setNoDelay(true);
    });
    secure.on("secureConnection", (socket: tls.TLSSocket) => {
      track(socket);
      // node keeps the accepted socket a TLS socket wraps as `_parent`.
      const raw = (socket as unknown as { _parent?: net.Socket })._parent;
      if (raw !== undefined) connections.alias(raw, socket);
      // HTTP/2 over TLS is negotiated by ALPN only (RFC 9113 §3.2); without it, HTTP/1.1.
      handTo(socket.alpnProtocol === "h2" ? h2 : h1, socket);
    });
    // A failed handshake (no or a wrong client certificate, plain HTTP on the TLS port) only ends
    // that connection.
    secure.on("tlsClientError", (_error, socket) => socket.destroy());
    tcp = secure;
  } else {
    tcp = net.createServer((socket) => {
      if (!connections.accept(socket)) return;
      track(socket);
      socket.setNoDelay(true);
      routeByPreface(socket);
    });
  }
  return { tcp, h1, h2, sockets, connections };
}

// What node's HTTP/2 server does for a stream when it has a request listener.
function handleCompatibly(handler: Handler, stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, rawHeaders: string[]): void {
  const request = new http2.Http2ServerRequest(stream, headers, {}, rawHeaders);
  const response = new http2.Http2ServerResponse(stream);
  if (headers[":method"] === "CONNECT") {
    response.statusCode = 405;
    response.end();
    return;
  }
  if (headers.expect !== undefined) {
    if (headers.expect !== "100-continue") {
      response.statusCode = 417;
      response.end();
      return;
    }
    response.writeContinue();
  }
  handler(request, response);
}
