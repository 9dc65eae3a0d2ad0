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
server.on("stream", (stream) => {
  stream.resume();
  stream.on("end", () => {
    stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
    stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
    stream.end(emptyMessage);
  });
});
server.listen(0, "127.0.0.1", () => {
  const address = server.address();
  console.log(typeof address === "object" && address ? address.port : "");
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
