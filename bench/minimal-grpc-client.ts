import * as http2 from "node:http2";

/**
 * Unary gRPC calls with nothing but node's HTTP/2 client: one connection, pre-enveloped requests,
 * responses checked for grpc-status 0 and collected as raw bytes.
 */
export class MinimalGrpcClient {
  private readonly session: http2.ClientHttp2Session;

  constructor(address: string) {
    this.session = http2.connect(`http://${address}`, { settings: { initialWindowSize: 16 * 1024 * 1024 } });
    this.session.once("connect", () => this.session.setLocalWindowSize(64 * 1024 * 1024));
    this.session.on("error", (error) => console.error("bench client:", error));
  }

  /** The response message's bytes (the envelope's payload). */
  call(path: string, message: Buffer): Promise<Buffer> {
    const envelope = Buffer.alloc(5 + message.length);
    envelope.writeUInt32BE(message.length, 1);
    message.copy(envelope, 5);
    return this.callEnveloped(path, envelope);
  }

  callEnveloped(path: string, envelope: Buffer): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const stream = this.session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers" });
      const chunks: Buffer[] = [];
      let status: string | undefined;
      let message: string | undefined;
      stream.on("response", (headers) => ((status = headers["grpc-status"] as string | undefined), (message = headers["grpc-message"] as string | undefined)));
      stream.on("trailers", (trailers) => ((status = trailers["grpc-status"] as string | undefined), (message = trailers["grpc-message"] as string | undefined)));
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.on("error", reject);
      stream.on("end", () => {
        if (status !== "0") return reject(new Error(`${path}: grpc-status ${status}${message ? ` ${decodeURIComponent(message)}` : ""}`));
        const body = Buffer.concat(chunks);
        resolve(body.subarray(5, 5 + body.readUInt32BE(1)));
      });
      stream.end(envelope);
    });
  }

  close(): void {
    this.session.close();
  }
}
