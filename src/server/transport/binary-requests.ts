import type { DescMessage, DescMethod, DescService, Message } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import type { WireType } from "@bufbuild/protobuf/wire";
import type { Codec } from "../../codec/codec.js";
import { varintLength, writeVarint } from "../../codec/varint.js";

/**
 * Binary requests decoded by `protobuf-decoder.ts` instead of connect's `fromBinary`.
 *
 * connect-node has no server-side codec hook: every handler calls `fromBinary(method.input, …)`.
 * So the binary adapter registers the services with request types that have no fields
 * (`withOpaqueRequests`): protobuf-es then keeps the whole request as unknown fields, which costs
 * a few slices. The outermost interceptor (`decodeOpaqueRequests`) puts the real request type back
 * on the call and decodes those bytes with the fast decoder, so every later interceptor and the
 * service implementation see exactly what they would have seen. JSON requests must not take this
 * path (unknown fields are not part of JSON): `server.ts` routes on `classifyContentType`.
 */

// Opaque method → real method, for the interceptor; opaque services cached so each is built once.
const realMethods = new WeakMap<DescMethod, DescMethod>();
const opaqueServices = new WeakMap<DescService, DescService>();

/**
 * The service with each method's input replaced by a field-less message of the same type name.
 * Only for the binary adapter, and only together with `decodeOpaqueRequests`.
 */
export function withOpaqueRequests<S extends DescService>(service: S): S {
  const cached = opaqueServices.get(service);
  if (cached !== undefined) return cached as S;
  const methods = service.methods.map((method) => {
    const opaque = { ...method, input: opaqueMessage(method.input) } as DescMethod;
    realMethods.set(opaque, method);
    return opaque;
  });
  const opaqueService = {
    ...service,
    methods,
    method: Object.fromEntries(methods.map((method) => [method.localName, method])),
  } as unknown as S;
  opaqueServices.set(service, opaqueService);
  return opaqueService;
}

// The descriptor's own properties are plain data (protobuf-es builds them as object literals), so
// a spread copy with no fields is the same type to protobuf-es, minus the fields.
function opaqueMessage(message: DescMessage): DescMessage {
  return { ...message, fields: [], field: {}, oneofs: [], members: [] };
}

/**
 * Decodes requests of services registered with `withOpaqueRequests`. Must be the outermost
 * interceptor: before it, the request is an empty carrier of the wrong type. Being outermost also
 * keeps malformed requests where connect's own decoding put them, before any other interceptor.
 */
export function decodeOpaqueRequests(codec: Codec): Interceptor {
  return (next) => async (request) => {
    const method = realMethods.get(request.method);
    if (method === undefined) return next(request);
    const schema = method.input;
    if (!request.stream) return next({ ...request, method, service: method.parent, message: decodeCarrier(codec, schema, request.message) } as typeof request);
    const carriers = request.message;
    const messages = (async function* () {
      for await (const carrier of carriers) yield decodeCarrier(codec, schema, carrier);
    })();
    return next({ ...request, method, service: method.parent, message: messages } as typeof request);
  };
}

type UnknownField = { no: number; wireType: WireType; data: Uint8Array };

// The carrier holds the request's fields as (field number, wire type, payload after the tag), in
// wire order; writing each tag back in front of its payload gives the request's bytes again.
function decodeCarrier(codec: Codec, schema: DescMessage, carrier: Message): Message {
  const fields = (carrier as Message & { $unknown?: UnknownField[] }).$unknown ?? [];
  let length = 0;
  for (const field of fields) length += varintLength(tagOf(field)) + field.data.length;
  const bytes = new Uint8Array(length);
  let offset = 0;
  for (const field of fields) {
    offset = writeVarint(bytes, offset, tagOf(field));
    bytes.set(field.data, offset);
    offset += field.data.length;
  }
  try {
    return codec.decode(schema, bytes);
  } catch (error) {
    // The decoder's own limits (repeated elements, stream events) are answered as they are.
    if (error instanceof ConnectError) throw error;
    // What connect's binary serialization reports when fromBinary fails, so clients see no change.
    throw new ConnectError(`parse binary: ${error instanceof Error ? error.message : String(error)}`, Code.Internal);
  }
}

// Field numbers go up to 2^29 - 1, so a tag can exceed 2^31: arithmetic, not bit shifts.
function tagOf(field: UnknownField): number {
  return field.no * 8 + field.wireType;
}

