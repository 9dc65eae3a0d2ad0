import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";

type Handler = (request: http.IncomingMessage | http2.Http2ServerRequest, response: http.ServerResponse | http2.Http2ServerResponse) => void;

// Every HTTP/2 cleartext connection opens with this preface; HTTP/1.1 never does.
const http2Preface = Buffer.from("PRI * HTTP/2.0\r\n");

/**
 * One TCP listener for HTTP/1.1 and HTTP/2 cleartext (h2c with prior knowledge). Node's http2
 * module offers HTTP/1.1 fallback only over TLS, so the first bytes of each connection decide which
 * server gets it: gRPC needs HTTP/2, while Connect and gRPC-Web also work over HTTP/1.1.
 */
export function createDualProtocolServer(handler: Handler, http2Options: http2.ServerOptions = {}) {
  const h1 = http.createServer(handler);
  const h2 = http2.createServer(http2Options, handler);
  const tcp = net.createServer((socket) => {
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
  return { tcp, h1, h2 };
}
