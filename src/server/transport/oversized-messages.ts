import type * as http from "node:http";
import type * as http2 from "node:http2";
import type { ConnectError } from "@connectrpc/connect";
import { envelopeHeaderBytes } from "../../codec/protobuf-encoder.js";
import type { Admission } from "../policy/admission.js";
import type { RequestKind } from "./content-type.js";
import { respondWithError } from "./error-responses.js";
import { maxDrainedBytes } from "./grpc-unary.js";

/**
 * The refusal of a request message over `--max-request-bytes` for what connect-node serves (gRPC
 * streams, gRPC-Web, Connect; HTTP/1.1 and HTTP/2), answered as the direct gRPC path answers it.
 *
 * Why it exists: connect refuses such a message the moment it reads its length, in its own words
 * (`readMaxBytes`), and answers while the client is still sending. On HTTP/2 it then resets the
 * stream; a node client holding more unsent body than its session memory (10 MB) cannot take the
 * answer and its caller saw INTERNAL (`ENHANCE_YOUR_CALM`, or "stream closed with NO_ERROR before
 * the response"). So the body connect reads passes through here first: the first message found
 * over the limit (an envelope's declared length; a Connect unary body's running size) is never
 * handed on, the rest of the body is read and discarded (nothing held; up to `maxDrainedBytes`,
 * and `--request-body-timeout-ms` still bounds the wait), and only then does connect's read fail
 * with `Admission.tooLarge`, which connect answers in the request's protocol like any error.
 */
export function refuseOversizedMessages(request: http.IncomingMessage | http2.Http2ServerRequest, kind: RequestKind, admission: Admission): void {
  const read = request.iterator.bind(request);
  // connect-node reads a request body only through `iterator` (universalRequestFromNodeRequest);
  // were that to change, test/server/transport/oversized-messages.test.ts would see connect's wording.
  request.iterator = ((options?: Parameters<typeof read>[0]) =>
    withinLimit(read(options), kind.stream ? new EnvelopeSizes(admission.maxRequestBytes) : new BodySize(admission.maxRequestBytes), admission)) as typeof read;
}

/**
 * Answers `error` (a Connect unary body whose `content-length` is over the limit, refused before
 * connect sees it) once the body has arrived, discarded as it comes, for the same reason: an
 * earlier answer is lost on a node client still sending. A body past `maxDrainedBytes`, or one
 * that stalls past `--request-body-timeout-ms`, is answered when that shows.
 */
export function refuseOnceBodyEnds(
  request: http.IncomingMessage | http2.Http2ServerRequest,
  response: http.ServerResponse | http2.Http2ServerResponse,
  error: ConnectError,
  admission: Admission,
): void {
  const cap = maxDrainedBytes(admission.maxRequestBytes);
  let drained = 0;
  let answered = false;
  const answer = () => {
    if (answered) return;
    answered = true;
    clearTimeout(timer);
    request.off("data", discard);
    respondWithError(request, response, error);
  };
  const discard = (chunk: Buffer) => {
    drained += chunk.length;
    if (drained > cap) answer();
  };
  const timer = setTimeout(answer, admission.bodyTimeoutMs);
  request.on("data", discard);
  request.once("end", answer);
  response.once("close", () => clearTimeout(timer));
}

/** Finds the first message over the limit in a body read chunk by chunk. */
interface MessageSizes {
  /** True once `chunk` shows a message over the limit. */
  over(chunk: Uint8Array): boolean;
  /** The oversized message's size, given how many bytes of the body followed the chunk that showed it. */
  size(drainedBytes: number): number;
}

/** Enveloped bodies (gRPC, gRPC-Web, Connect streams): each message's length is in its 5-byte header. */
export class EnvelopeSizes implements MessageSizes {
  private readonly header = new Uint8Array(envelopeHeaderBytes);
  private headerBytes = 0;
  // Data bytes of the current message still to skip before the next header.
  private skip = 0;
  private declared = 0;
  constructor(private readonly limit: number) {}

  over(chunk: Uint8Array): boolean {
    let at = 0;
    while (at < chunk.length) {
      if (this.skip > 0) {
        const skipped = Math.min(this.skip, chunk.length - at);
        this.skip -= skipped;
        at += skipped;
        continue;
      }
      const taken = Math.min(envelopeHeaderBytes - this.headerBytes, chunk.length - at);
      this.header.set(chunk.subarray(at, at + taken), this.headerBytes);
      this.headerBytes += taken;
      at += taken;
      if (this.headerBytes < envelopeHeaderBytes) break;
      this.headerBytes = 0;
      this.declared = new DataView(this.header.buffer).getUint32(1);
      if (this.declared > this.limit) return true;
      this.skip = this.declared;
    }
    return false;
  }

  size(): number {
    return this.declared;
  }
}

/** A Connect unary body is the message itself. */
class BodySize implements MessageSizes {
  private received = 0;
  constructor(private readonly limit: number) {}

  over(chunk: Uint8Array): boolean {
    this.received += chunk.length;
    return this.received > this.limit;
  }

  size(drainedBytes: number): number {
    return this.received + drainedBytes;
  }
}

async function* withinLimit(chunks: AsyncIterator<Uint8Array>, sizes: MessageSizes, admission: Admission): AsyncGenerator<Uint8Array, void, undefined> {
  try {
    for (;;) {
      const next = await chunks.next();
      if (next.done === true) return;
      if (!sizes.over(next.value)) {
        yield next.value;
        continue;
      }
      const cap = maxDrainedBytes(admission.maxRequestBytes);
      let drained = 0;
      while (drained <= cap) {
        const rest = await chunks.next();
        if (rest.done === true) break;
        drained += rest.value.length;
      }
      throw admission.tooLarge(sizes.size(drained));
    }
  } finally {
    await chunks.return?.();
  }
}
