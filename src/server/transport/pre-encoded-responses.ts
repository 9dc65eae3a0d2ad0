import { create, type DescMessage, type Message } from "@bufbuild/protobuf";
import type { Interceptor } from "@connectrpc/connect";
import type { Codec } from "../../codec/codec.js";
import { classifyContentType } from "./content-type.js";

/**
 * Encodes binary responses with the fast single-buffer encoder (see `protobuf-encoder.ts`) and
 * hands connect an empty message of the same type that carries those bytes as unknown fields.
 * protobuf-es writes unknown fields verbatim, so connect's own `toBinary` then only copies them:
 * the bytes on the wire are exactly what `toBinary` would have produced, at a fraction of the cost.
 * JSON responses are left alone (unknown fields are not part of JSON). Must be the innermost
 * interceptor: interceptors outside it see the carrier, not the fields.
 */
export function preEncodeBinaryResponses(codec: Codec): Interceptor {
  return (next) => async (request) => {
    const response = await next(request);
    if (classifyContentType(request.header.get("content-type"))?.binary !== true) return response;
    const schema = request.method.output;
    if (!response.stream) return { ...response, message: preEncode(codec, schema, response.message) };
    const messages = response.message;
    return {
      ...response,
      message: (async function* () {
        for await (const message of messages) yield preEncode(codec, schema, message);
      })(),
    };
  };
}

function preEncode<T extends Message>(codec: Codec, schema: DescMessage, message: T): T {
  const fields = codec.encodeTopLevelFields(schema, message as never);
  const carrier = create(schema) as unknown as T;
  carrier.$unknown = fields;
  return carrier;
}
