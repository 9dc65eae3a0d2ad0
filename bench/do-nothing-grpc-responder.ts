// The least a Node process can do to answer a unary gRPC call: node:http2 alone, no library, no
// decoding, an empty message with status 0. bench:store runs it as a child process and drives it
// with the same grpc-go load generator as the sidecar, so the gap between the two is what the
// sidecar's code costs, and this line is the floor under any sidecar written for Node.
// Prints the port it listens on.
import * as http2 from "node:http2";

const emptyMessage = Buffer.from([0, 0, 0, 0, 0]);
const server = http2.createServer();
// As the sidecar does: small responses must not wait for Nagle's algorithm.
server.on("connection", (socket: import("node:net").Socket) => socket.setNoDelay(true));
// A path ending in /bytes/N answers a message of N zero bytes instead: the same round trip
// carrying an answer the size of a compile's (bench:scale's floor with the answer's bytes).
server.on("stream", (stream, headers) => {
  stream.resume();
  const sized = /\/bytes\/(\d+)$/.exec(String(headers[":path"] ?? ""));
  stream.on("end", () => {
    stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
    stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
    if (!sized) return void stream.end(emptyMessage);
    const length = Number(sized[1]);
    const message = Buffer.alloc(5 + length);
    message.writeUInt32BE(length, 1);
    stream.end(message);
  });
});
server.listen(0, "127.0.0.1", () => {
  const address = server.address();
  console.log(typeof address === "object" && address ? address.port : "");
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
