import { parseConnectContentType, parseGrpcContentType, parseGrpcWebContentType } from "./connect-internals.js";

/** What a request's content type says: which protocol carries it, and whether its codec is protobuf binary. */
export interface RequestKind {
  protocol: "grpc" | "grpc-web" | "connect";
  /** Protobuf binary (`application/grpc`, `+proto`, `application/proto`); false for JSON. */
  binary: boolean;
  /** Connect streaming (`application/connect+…`); gRPC and gRPC-Web are always enveloped. */
  stream: boolean;
}

/**
 * The one classifier of request content types: every routing decision (the direct unary gRPC
 * path, the binary decoder, binary responses, gRPC message encoding) reads this, so two parts of
 * the server can never disagree on what a request is. It is connect's own parsing, so the server
 * classifies exactly as the handlers that serve the request will. Undefined: not an RPC content
 * type (connect answers it with 415).
 */
export function classifyContentType(contentType: string | null | undefined): RequestKind | undefined {
  if (contentType === undefined || contentType === null) return undefined;
  const grpc = parseGrpcContentType(contentType);
  if (grpc !== undefined) return { protocol: "grpc", binary: grpc.binary, stream: true };
  const grpcWeb = parseGrpcWebContentType(contentType);
  if (grpcWeb !== undefined) return { protocol: "grpc-web", binary: grpcWeb.binary, stream: true };
  const connect = parseConnectContentType(contentType);
  if (connect !== undefined) return { protocol: "connect", binary: connect.binary, stream: connect.stream };
  return undefined;
}
