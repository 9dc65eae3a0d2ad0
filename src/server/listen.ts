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
export function createDualProtocolServer(handler: Handler, options: { maxConcurrentStreams: number }): DualProtocolServer {
  // Streams over HTTP/1.1 (Connect server streaming) live as long as the caller wants: no request timeout.
  const h1 = http.createServer({ requestTimeout: 0, keepAliveTimeout: 65_000 }, handler);
  const h2 = http2.createServer(
    {
      settings: { initialWindowSize: streamWindowBytes, maxConcurrentStreams: options.maxConcurrentStreams },
      maxSessionMemory: 64,
    },
    handler,
  );
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
