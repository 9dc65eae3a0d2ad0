import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";

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
  tcp: net.Server;
  h1: http.Server;
  h2: http2.Http2Server;
  /** Every open TCP connection, for shutdown. */
  sockets: Set<net.Socket>;
}

/**
 * One TCP listener for HTTP/1.1 and HTTP/2 cleartext (h2c with prior knowledge). Node's http2
 * module offers HTTP/1.1 fallback only over TLS, so the first bytes of each connection decide which
 * server gets it: gRPC needs HTTP/2, while Connect and gRPC-Web also work over HTTP/1.1.
 */
/**
 * Serves an HTTP/2 stream directly and returns true, or returns false to leave it to `Handler`
 * through node's compatibility API (see grpc-unary.ts for why some streams skip it).
 */
export type StreamHandler = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => boolean;

export function createDualProtocolServer(
  handler: Handler,
  options: { maxConcurrentStreams: number; streamHandler?: StreamHandler },
): DualProtocolServer {
  // Streams over HTTP/1.1 (Connect server streaming) live as long as the caller wants: no request timeout.
  const h1 = http.createServer({ requestTimeout: 0, keepAliveTimeout: 65_000 }, handler);
  // No request listener: node would then wrap every stream in a request/response pair before we
  // could look at it. Streams the stream handler declines are wrapped here, as node does.
  const h2 = http2.createServer({
    settings: { initialWindowSize: streamWindowBytes, maxConcurrentStreams: options.maxConcurrentStreams },
    maxSessionMemory: 64,
  });
  h2.on("stream", (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, _flags: number, rawHeaders: string[]) => {
    if (options.streamHandler?.(stream, headers)) return;
    handleCompatibly(handler, stream, headers, rawHeaders);
  });
  h2.on("session", (session) => {
    session.once("localSettings", () => session.setLocalWindowSize(sessionWindowBytes));
  });
  const sockets = new Set<net.Socket>();
  const tcp = net.createServer((socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    // Without this, Nagle's algorithm holds back the small frames that end a response (gRPC
    // trailers) until the peer acknowledges the previous segment: a delayed-ACK wait per call.
    socket.setNoDelay(true);
    socket.once("readable", function route() {
      const head: Buffer | null = socket.read();
      if (head === null) {
        socket.once("readable", route);
        return;
      }
      socket.unshift(head);
      const prefix = head.subarray(0, Math.min(head.length, http2Preface.length));
      const isHttp2 = prefix.equals(http2Preface.subarray(0, prefix.length));
      (isHttp2 ? h2 : h1).emit("connection", socket);
    });
    socket.on("error", () => socket.destroy());
  });
  return { tcp, h1, h2, sockets };
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
