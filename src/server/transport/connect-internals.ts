/**
 * Every piece of @connectrpc/connect's protocol internals contextd uses, in one file.
 *
 * Why: the direct unary gRPC path (grpc-unary.ts), early refusals (error-responses.ts) and the
 * request classifier (content-type.ts) must behave exactly as
 * connect does — same timeout parsing, same status trailers, same interceptor chain, same reading
 * of content types — and connect exports those pieces only from its `protocol*` entry points,
 * marked "internal code, does not follow semantic versioning". Importing them here and nowhere
 * else keeps the exposure to one file, and test/server/transport/connect-internals.test.ts pins what we rely
 * on, so a connect upgrade that changes them fails there, by name, instead of somewhere in a call.
 */
export { invokeUnaryImplementation } from "@connectrpc/connect/protocol";
export {
  codeToHttpStatus,
  contentTypeUnaryJson,
  endStreamFlag,
  endStreamToJson,
  errorToJsonBytes,
  parseContentType as parseConnectContentType,
} from "@connectrpc/connect/protocol-connect";
export { parseContentType as parseGrpcContentType, parseTimeout, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
export { parseContentType as parseGrpcWebContentType, trailerFlag, trailerSerialize } from "@connectrpc/connect/protocol-grpc-web";
