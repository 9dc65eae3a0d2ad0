import * as http2 from "node:http2";

export interface RawResponse {
  status: number;
  headers: http2.IncomingHttpHeaders;
  trailers: http2.IncomingHttpHeaders;
  body: Buffer;
}

/**
 * One POST on `session` with frames built by hand: what a buggy or hostile client sends. A body
 * given as pieces is written piece by piece (a request arriving in many small DATA frames).
 */
export function rawHttp2Request(
  session: http2.ClientHttp2Session,
  path: string,
  headers: http2.OutgoingHttpHeaders,
  body: Uint8Array | Uint8Array[],
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ":method": "POST", ":path": path, ...headers });
    const chunks: Buffer[] = [];
    let responseHeaders: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    stream.on("response", (received) => (responseHeaders = received));
    stream.on("trailers", (received) => (trailers = received));
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("error", reject);
    stream.on("end", () => resolve({ status: Number(responseHeaders[":status"]), headers: responseHeaders, trailers, body: Buffer.concat(chunks) }));
    for (const piece of Array.isArray(body) ? body : [body]) stream.write(piece);
    stream.end();
  });
}

/** `rawHttp2Request` on a connection of its own. */
export async function rawHttp2(url: string, path: string, headers: http2.OutgoingHttpHeaders, body: Uint8Array | Uint8Array[]): Promise<RawResponse> {
  const session = http2.connect(url);
  const failed = new Promise<never>((_, reject) => session.once("error", reject));
  try {
    return await Promise.race([rawHttp2Request(session, path, headers, body), failed]);
  } finally {
    session.close();
  }
}

/** A gRPC envelope around `payload`; `declaredLength` may lie, as a broken client's would. */
export function grpcEnvelope(payload: Uint8Array, { flags = 0, declaredLength = payload.length } = {}): Buffer {
  const bytes = Buffer.alloc(5 + payload.length);
  bytes[0] = flags;
  bytes.writeUInt32BE(declaredLength, 1);
  bytes.set(payload, 5);
  return bytes;
}

/**
 * The gRPC status of a response: trailers, or headers for a trailers-only response. `message` is
 * percent-decoded; `rawMessage` is the header as sent.
 */
export function grpcStatus(response: RawResponse): { code: number; message: string; rawMessage: string } {
  const source = response.trailers["grpc-status"] !== undefined ? response.trailers : response.headers;
  const rawMessage = String(source["grpc-message"] ?? "");
  return { code: Number(source["grpc-status"]), message: decodeURIComponent(rawMessage), rawMessage };
}
