import * as http2 from "node:http2";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextKey,
  createContextValues,
  createServiceImplSpec,
  type ConnectRouter,
  type ContextValues,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
} from "@connectrpc/connect";
import { invokeUnaryImplementation, parseTimeout, setTrailerStatus } from "./connect-internals.js";
import { classifyContentType } from "./content-type.js";
import { encodeGrpcMessage } from "./grpc-message-encoding.js";
import type { Codec } from "../../codec/codec.js";
import { envelopeHeaderBytes } from "../../codec/protobuf-encoder.js";
import type { Admission } from "../policy/admission.js";

/**
 * Unary gRPC calls served straight from the HTTP/2 stream, without connect-node's adapter.
 *
 * Why: connect-node turns every call into a web-style request (node's HTTP/2 compatibility layer,
 * `Headers`, async iterables for a single message, two `AbortController`s and an abort per call),
 * which measured 0.8–1.1 ms of CPU per call on this class of machine with a handler that does
 * nothing — more than a small compile costs, and 3x what grpc-js needs for the same bytes. Unary gRPC
 * is what the Go and Python clients send on every model call, so that one case gets a direct path.
 *
 * What stays the same: the service implementations, the interceptors (auth, limits, deadlines,
 * logging, metrics) and connect's own pieces for the protocol details (`invokeUnaryImplementation`,
 * `parseTimeout`, `setTrailerStatus`), so a call behaves as it does through connect, with the same
 * codes and messages. Everything else — streaming methods, Connect, gRPC-Web, the JSON codec,
 * compressed requests, anything this path does not recognise — is left to connect (`takesStream`).
 */

/** The unary methods this path serves, by request path ("/contextd.v1.ContextService/Compile"). */
export type UnaryMethods = Map<string, UnaryMethodSpec>;
type UnaryMethodSpec = Extract<MethodImplSpec, { kind: "unary" }>;

/**
 * The unary method implementations that `register` puts on a router, recorded instead of being
 * turned into connect handlers. Streaming methods are not recorded: connect serves them.
 */
export function recordUnaryMethods(register: (router: ConnectRouter) => void): UnaryMethods {
  const methods: UnaryMethods = new Map();
  const add = (method: DescMethod, spec: MethodImplSpec) => {
    if (spec.kind === "unary") methods.set(`/${method.parent.typeName}/${method.name}`, spec);
  };
  const recorder: ConnectRouter = {
    handlers: [],
    service(service: DescService, implementation: object) {
      const specs = createServiceImplSpec(service, implementation as never);
      for (const method of service.methods) add(method, specs.methods[method.localName]!);
      return recorder;
    },
    rpc(method: DescMethod, implementation: unknown) {
      add(method, { kind: method.methodKind, method, impl: implementation } as MethodImplSpec);
      return recorder;
    },
  } as ConnectRouter;
  register(recorder);
  return methods;
}

// Where `encodeUnaryResponses` leaves a call's encoded response for `answer` to send.
const encodedResponseKey = createContextKey<Uint8Array[]>([], { description: "contextd encoded unary response" });

/**
 * The innermost interceptor of the direct path: encodes the response with the codec inside the
 * interceptor chain, so a response that cannot be encoded is a failed call to the interceptors
 * outside it — logged and counted under INTERNAL — and not a call counted "ok" whose caller then
 * got INTERNAL. Chunks: long encodings kept from earlier calls (a stored history) are sent, not
 * copied.
 */
export function encodeUnaryResponses(codec: Codec): Interceptor {
  return (next) => async (request) => {
    const response = await next(request);
    if (response.stream) return response;
    const chunks = codec.encodeEnvelopedChunks(request.method.output, response.message as never);
    const target = request.contextValues.get(encodedResponseKey);
    for (const chunk of chunks) target.push(chunk);
    return response;
  };
}

export interface UnaryGrpcOptions {
  methods: UnaryMethods;
  /** Outermost first, as for connect; the last must be `encodeUnaryResponses`. */
  interceptors: Interceptor[];
  /** Longest deadline accepted (connect's `maxTimeoutMs`); `Infinity` for no limit. */
  maxTimeoutMs: number;
  /** Auth on the headers, the shared request-memory budget and the body timeout (also for what connect serves). */
  admission: Admission;
  /** The server's codec: decodes requests, encodes responses. */
  codec: Codec;
}

/**
 * The method to serve the stream with on this path — a unary method, binary gRPC, an uncompressed
 * request — or undefined to leave the stream to connect.
 */
export function takesStream(methods: UnaryMethods, headers: http2.IncomingHttpHeaders): UnaryMethodSpec | undefined {
  if (headers[":method"] !== "POST") return undefined;
  // Binary gRPC only: "application/grpc+json" goes to connect.
  const kind = classifyContentType(headers["content-type"]);
  if (kind?.protocol !== "grpc" || !kind.binary) return undefined;
  const encoding = headers["grpc-encoding"];
  if (encoding !== undefined && encoding !== "identity") return undefined;
  return methods.get(headers[":path"] ?? "");
}

/**
 * Serves one unary gRPC call on `stream`: reads the enveloped request, runs the interceptors and
 * the implementation, and answers with headers, one enveloped response and the status trailers.
 * Errors, including malformed requests, end the call with a gRPC status; the stream never throws.
 */
export function serveUnaryCall(
  stream: http2.ServerHttp2Stream,
  headers: http2.IncomingHttpHeaders,
  spec: UnaryMethodSpec,
  options: UnaryGrpcOptions,
  contextValues: ContextValues = createContextValues(),
  responseHeaders: Record<string, string> = {},
): void {
  // A caller resetting the stream with an error code makes node emit "error"; unhandled, that
  // would end the process. The call is over either way: "close" follows and aborts it.
  stream.on("error", ignoreStreamError);
  const { admission } = options;
  const path = headers[":path"] ?? "";
  const refusal = admission.refusalByOrigin(path, headers[":authority"] ?? headers.host, headers.origin) ?? admission.refusalByHeaders(path, headers.authorization);
  if (refusal !== undefined) {
    respondError(stream, new Headers(responseHeaders), refusal);
    return;
  }
  const chunks: Buffer[] = [];
  let received = 0;
  let declared: number | undefined;
  let rejected = false;
  // A refusal waiting for the rest of an oversized body to arrive (and be discarded) before it is sent.
  let refusalAfterBody: ConnectError | undefined;
  // What the call holds is what has arrived, given back when the call is over.
  const holding = admission.open(path);
  stream.once("close", holding.release);
  const bodyTimer = setTimeout(() => reject(refusalAfterBody ?? admission.bodyTimeout(received)), admission.bodyTimeoutMs);
  const reject = (error: ConnectError) => {
    rejected = true;
    refusalAfterBody = undefined;
    clearTimeout(bodyTimer);
    chunks.length = 0;
    holding.release();
    respondError(stream, new Headers(responseHeaders), error);
  };
  // Why wait: a client still sending tens of MB (node's, connect-node's) cannot take the response
  // headers while its own unsent data is over its session memory (10 MB by default): it reset the
  // stream with ENHANCE_YOUR_CALM and its caller saw INTERNAL instead of RESOURCE_EXHAUSTED (17 to
  // 40 MB requests). The body is discarded as it arrives, nothing is held, and
  // --request-body-timeout-ms still bounds the wait; a body announced past `maxDrainedBytes` is
  // refused at once.
  const rejectAfterBody = (error: ConnectError) => {
    if (declared! > maxDrainedBytes(admission.maxRequestBytes)) return reject(error);
    rejected = true;
    refusalAfterBody = error;
    chunks.length = 0;
    holding.release();
  };
  stream.on("data", (chunk: Buffer) => {
    if (rejected) return;
    chunks.push(chunk);
    received += chunk.length;
    // The declared length is known from the first five bytes: an oversized message is refused
    // before it is read, as connect does, and nothing beyond one envelope is ever buffered.
    if (declared === undefined && received >= envelopeHeaderBytes) {
      if (chunks.length > 1) chunks.splice(0, chunks.length, Buffer.concat(chunks));
      declared = chunks[0]!.readUInt32BE(1);
      if (declared > admission.maxRequestBytes) {
        rejectAfterBody(admission.tooLarge(declared));
        return;
      }
    }
    if (!holding.grow(chunk.length)) {
      reject(holding.refusal(declared === undefined ? received : envelopeHeaderBytes + declared));
      return;
    }
    if (declared !== undefined && received > envelopeHeaderBytes + declared) {
      reject(new ConnectError("protocol error: received extra input message for unary method", Code.Unimplemented));
    }
  });
  stream.once("end", () => {
    clearTimeout(bodyTimer);
    if (refusalAfterBody !== undefined) reject(refusalAfterBody);
    if (rejected) return;
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    void answer(stream, headers, spec, options, contextValues, new Headers(responseHeaders), body);
  });
}

async function answer(
  stream: http2.ServerHttp2Stream,
  headers: http2.IncomingHttpHeaders,
  spec: UnaryMethodSpec,
  options: UnaryGrpcOptions,
  contextValues: ContextValues,
  responseHeader: Headers,
  body: Buffer,
): Promise<void> {
  const requestHeader = toHeaders(headers);
  responseHeader.set("content-type", "application/grpc+proto");
  const responseTrailer = new Headers();
  // One controller per call, aborted only if the call is cut short (deadline, the caller going
  // away); a call that ends normally never allocates an abort reason.
  const controller = new AbortController();
  const onClose = () => controller.abort(new ConnectError("the caller went away", Code.Canceled));
  stream.once("close", onClose);
  let deadline: NodeJS.Timeout | undefined;
  try {
    const timeout = parseTimeout(requestHeader.get("grpc-timeout"), options.maxTimeoutMs);
    if (timeout.error) throw timeout.error;
    if (timeout.timeoutMs !== undefined) {
      const expired = () => controller.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded));
      if (timeout.timeoutMs <= 0) expired();
      else deadline = setTimeout(expired, timeout.timeoutMs);
    }
    const expires = timeout.timeoutMs === undefined ? undefined : Date.now() + timeout.timeoutMs;
    const context: HandlerContext = {
      method: spec.method,
      service: spec.method.parent,
      signal: controller.signal,
      timeoutMs: () => (expires === undefined ? undefined : expires - Date.now()),
      requestMethod: "POST",
      requestHeader,
      responseHeader,
      responseTrailer,
      protocolName: "grpc",
      values: contextValues,
      url: `http://${headers[":authority"] ?? "localhost"}${headers[":path"]}`,
    };
    const input = parseRequest(options.codec, spec, body);
    const chunks: Uint8Array[] = [];
    contextValues.set(encodedResponseKey, chunks);
    await invokeUnaryImplementation(spec, context, input as never, options.interceptors);
    if (stream.closed || stream.destroyed) return;
    stream.respond(toHeaderBlock(responseHeader, { ":status": 200 }), { waitForTrailers: true });
    stream.once("wantTrailers", () => stream.sendTrailers(toHeaderBlock(responseTrailer, { "grpc-status": "0" })));
    // Corked, so the chunks leave as one write; end() uncorks.
    stream.cork();
    for (const chunk of chunks) stream.write(chunk);
    stream.end();
  } catch (error) {
    respondError(stream, responseHeader, error instanceof ConnectError ? error : new ConnectError("internal error", Code.Internal, undefined, undefined, error), responseTrailer);
  } finally {
    clearTimeout(deadline);
    stream.off("close", onClose);
  }
}

// The request body must be exactly one uncompressed envelope; the errors are connect's.
function parseRequest(codec: Codec, spec: UnaryMethodSpec, body: Buffer): unknown {
  if (body.length === 0) throw new ConnectError("protocol error: missing input message for unary method", Code.Unimplemented);
  if (body.length < envelopeHeaderBytes) throw new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument);
  const declared = body.readUInt32BE(1);
  const end = envelopeHeaderBytes + declared;
  if (body.length < end) throw new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument);
  if (body.length > end) throw new ConnectError("protocol error: received extra input message for unary method", Code.Unimplemented);
  if ((body[0]! & 0b1) !== 0) throw new ConnectError("protocol error: received compressed message without grpc-encoding", Code.Internal);
  try {
    return codec.decode(spec.method.input, body.subarray(envelopeHeaderBytes, end));
  } catch (error) {
    // The decoder's own limits (repeated elements, stream events) are answered as they are.
    if (error instanceof ConnectError) throw error;
    throw new ConnectError(`parse binary: ${(error as Error).message}`, Code.Internal);
  }
}

// Headers, then the status as trailers, as connect's gRPC handler answers an error (not the
// trailers-only form): clients read error metadata such as `contextd-current-version` from trailers.
function respondError(stream: http2.ServerHttp2Stream, header: Headers, error: ConnectError, trailer = new Headers()): void {
  if (stream.closed || stream.destroyed || stream.headersSent) return;
  setTrailerStatus(trailer, error);
  trailer.set("grpc-message", encodeGrpcMessage(error.rawMessage));
  if (!header.has("content-type")) header.set("content-type", "application/grpc+proto");
  stream.respond(toHeaderBlock(header, { ":status": 200 }), { waitForTrailers: true });
  stream.once("wantTrailers", () => {
    stream.sendTrailers(toHeaderBlock(trailer, {}));
    // A caller refused before its body ended (auth, memory, body timeout) may never end it; the
    // stream is reset after the status, as gRPC servers do, so it holds no stream slot either. Not
    // at once: nghttp2 would send the reset ahead of the final frames and the status be lost.
    if (!stream.readableEnded) setTimeout(() => stream.closed || stream.close(http2.constants.NGHTTP2_NO_ERROR), statusFlushMs).unref();
  });
  stream.end();
  // Whatever the caller is still sending is not wanted.
  stream.resume();
}

function ignoreStreamError(): void {}

/** The largest oversized body read to its end (and discarded) before it is refused: 4x the limit, at least 64 MiB. */
export function maxDrainedBytes(maxRequestBytes: number): number {
  return Math.max(64 * 1024 * 1024, 4 * maxRequestBytes);
}

// How long the status of a refused call gets to leave before its stream is reset.
const statusFlushMs = 200;

function toHeaders(headers: http2.IncomingHttpHeaders): Headers {
  const result = new Headers();
  for (const name in headers) {
    if (name.charCodeAt(0) === 0x3a) continue; // pseudo-headers (":path") are not metadata
    const value = headers[name];
    if (Array.isArray(value)) for (const item of value) result.append(name, item);
    else if (value !== undefined) result.append(name, value);
  }
  return result;
}

function toHeaderBlock(headers: Headers, first: http2.OutgoingHttpHeaders): http2.OutgoingHttpHeaders {
  const block = first;
  headers.forEach((value, name) => {
    block[name] = value;
  });
  return block;
}
