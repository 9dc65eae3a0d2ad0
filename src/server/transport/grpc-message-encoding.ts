import type * as http from "node:http";
import type * as http2 from "node:http2";

/**
 * The gRPC spec percent-encodes `grpc-message` only for bytes outside printable ASCII and "%".
 * connect-es encodes it with `encodeURIComponent` (":" → "%3A", "/" → "%2F"), and grpc-js decodes
 * with `decodeURI`, which leaves those escapes in place, so grpc-js callers would read
 * "Health%2FWatch%3A ...". This rewrites the header of gRPC responses to the spec's minimal
 * encoding, which every gRPC client decodes the same way.
 */
export function encodeGrpcMessagesMinimally(response: http.ServerResponse | http2.Http2ServerResponse): void {
  const writeHead = response.writeHead as (...args: unknown[]) => unknown;
  response.writeHead = function (this: unknown, status: number, ...rest: unknown[]) {
    const headers = rest.find((value) => typeof value === "object" && value !== null) as Record<string, unknown> | undefined;
    if (headers) reencode(headers);
    return writeHead.call(this, status, ...rest);
  } as typeof response.writeHead;
  const addTrailers = response.addTrailers as (trailers: Record<string, unknown>) => void;
  response.addTrailers = function (this: unknown, trailers: Record<string, unknown>) {
    reencode(trailers);
    addTrailers.call(this, trailers);
  } as typeof response.addTrailers;
}

function reencode(headers: Record<string, unknown>): void {
  const value = headers["grpc-message"];
  if (typeof value !== "string") return;
  let text: string;
  try {
    text = decodeURIComponent(value);
  } catch {
    return;
  }
  headers["grpc-message"] = encodeGrpcMessage(text);
}

/** `grpc-message` as the gRPC spec encodes it: bytes outside printable ASCII, and "%", escaped. */
export function encodeGrpcMessage(text: string): string {
  let encoded = "";
  for (const byte of Buffer.from(text, "utf8")) {
    encoded += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return encoded;
}
