import type * as http from "node:http";
import type * as http2 from "node:http2";
import type { ConnectError } from "@connectrpc/connect";
import {
  codeToHttpStatus,
  contentTypeUnaryJson,
  endStreamFlag,
  endStreamToJson,
  errorToJsonBytes,
  setTrailerStatus,
  trailerFlag,
  trailerSerialize,
} from "./connect-internals.js";
import { classifyContentType } from "./content-type.js";

/**
 * Answers `request` with `error` in the request's own protocol, as connect would, for a request that
 * never reaches connect (refused before its body is read). The body is discarded as it arrives.
 * Returns false, answering nothing, when the content type is of no protocol connect serves (connect
 * then answers it as it always does).
 */
export function respondWithError(
  request: http.IncomingMessage | http2.Http2ServerRequest,
  response: http.ServerResponse | http2.Http2ServerResponse,
  error: ConnectError,
): boolean {
  const contentType = request.headers["content-type"] ?? null;
  const answer = (status: number, responseContentType: string, body: Uint8Array, trailers?: Headers) => {
    request.resume();
    response.writeHead(status, { "content-type": responseContentType });
    if (trailers) response.addTrailers(Object.fromEntries(trailers));
    response.end(body);
  };
  const kind = classifyContentType(contentType);
  if (kind === undefined) return false;
  if (kind.protocol === "grpc-web") {
    // gRPC-Web sends the status as a trailer frame at the end of the body.
    const trailer = new Headers();
    setTrailerStatus(trailer, error);
    answer(200, contentType!, envelope(trailerFlag, trailerSerialize(trailer)));
  } else if (kind.protocol === "grpc") {
    const trailer = new Headers();
    setTrailerStatus(trailer, error);
    answer(200, contentType!, new Uint8Array(0), trailer);
  } else if (kind.stream) {
    // A streaming Connect call ends with an end-of-stream message carrying the error.
    const endStream = JSON.stringify(endStreamToJson(new Headers(), error, undefined));
    answer(200, contentType!, envelope(endStreamFlag, new TextEncoder().encode(endStream)));
  } else {
    answer(codeToHttpStatus(error.code), contentTypeUnaryJson, errorToJsonBytes(error, {}));
  }
  return true;
}

/** One message of a streaming body: flags, big-endian length, the data. */
function envelope(flags: number, data: Uint8Array): Uint8Array {
  const bytes = new Uint8Array(5 + data.length);
  bytes[0] = flags;
  new DataView(bytes.buffer).setUint32(1, data.length);
  bytes.set(data, 5);
  return bytes;
}
