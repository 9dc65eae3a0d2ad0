import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";

/** One span as an OTLP collector receives it (opentelemetry-proto trace.v1.Span, the fields tests read). */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** "" for a root span. */
  parentSpanId: string;
  name: string;
  kind: number;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, string | number | boolean>;
  events: { name: string; attributes: Record<string, string | number | boolean> }[];
  /** Status code: 0 unset, 1 ok, 2 error. */
  statusCode: number;
  statusMessage: string;
  /** The resource's attributes (service.name, ...). */
  resource: Record<string, string | number | boolean>;
}

/**
 * A minimal OTLP/HTTP trace receiver: `POST /v1/traces` with an `application/x-protobuf`
 * ExportTraceServiceRequest, decoded field by field from the wire format (opentelemetry-proto's
 * collector/trace/v1 and trace/v1 field numbers), answered with an empty ExportTraceServiceResponse.
 */
export async function startOtlpReceiver(): Promise<{ url: string; spans: ReceivedSpan[]; requests: string[]; close(): Promise<void> }> {
  const spans: ReceivedSpan[] = [];
  const requests: string[] = [];
  const server = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      requests.push(`${request.method} ${request.url} ${request.headers["content-type"]}`);
      if (request.method !== "POST" || request.url !== "/v1/traces") {
        response.writeHead(404).end();
        return;
      }
      try {
        spans.push(...decodeExportRequest(Buffer.concat(chunks)));
      } catch (error) {
        response.writeHead(400, { "content-type": "text/plain" }).end(String(error));
        return;
      }
      response.writeHead(200, { "content-type": "application/x-protobuf" }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

type Attributes = Record<string, string | number | boolean>;

function fields(bytes: Uint8Array, each: (field: number, wireType: WireType, reader: BinaryReader) => void): void {
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    each(field, wireType, reader);
  }
}

/** The spans of one ExportTraceServiceRequest (protobuf wire bytes). */
export function decodeExportRequest(bytes: Uint8Array): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  // ExportTraceServiceRequest.resource_spans = 1
  fields(bytes, (field, wireType, reader) => {
    if (field !== 1) return void reader.skip(wireType);
    let resource: Attributes = {};
    const scopeSpans: Uint8Array[] = [];
    // ResourceSpans: resource = 1, scope_spans = 2
    fields(reader.bytes(), (field, wireType, reader) => {
      if (field === 1) fields(reader.bytes(), (field, wireType, reader) => (field === 1 ? keyValue(reader.bytes(), resource) : reader.skip(wireType)));
      else if (field === 2) scopeSpans.push(reader.bytes());
      else reader.skip(wireType);
    });
    resource = { ...resource };
    // ScopeSpans.spans = 2
    for (const scope of scopeSpans) fields(scope, (field, wireType, reader) => (field === 2 ? spans.push(decodeSpan(reader.bytes(), resource)) : reader.skip(wireType)));
  });
  return spans;
}

function decodeSpan(bytes: Uint8Array, resource: Attributes): ReceivedSpan {
  const span: ReceivedSpan = { traceId: "", spanId: "", parentSpanId: "", name: "", kind: 0, startNs: 0n, endNs: 0n, attributes: {}, events: [], statusCode: 0, statusMessage: "", resource };
  fields(bytes, (field, wireType, reader) => {
    switch (field) {
      case 1: span.traceId = Buffer.from(reader.bytes()).toString("hex"); return;
      case 2: span.spanId = Buffer.from(reader.bytes()).toString("hex"); return;
      case 4: span.parentSpanId = Buffer.from(reader.bytes()).toString("hex"); return;
      case 5: span.name = reader.string(); return;
      case 6: span.kind = reader.int32(); return;
      case 7: span.startNs = BigInt(reader.fixed64()); return;
      case 8: span.endNs = BigInt(reader.fixed64()); return;
      case 9: keyValue(reader.bytes(), span.attributes); return;
      case 11: {
        // Span.Event: name = 2, attributes = 3
        const event = { name: "", attributes: {} as Attributes };
        fields(reader.bytes(), (field, wireType, reader) => (field === 2 ? (event.name = reader.string()) : field === 3 ? keyValue(reader.bytes(), event.attributes) : reader.skip(wireType)));
        span.events.push(event);
        return;
      }
      case 15:
        // Status: message = 2, code = 3
        fields(reader.bytes(), (field, wireType, reader) => (field === 2 ? (span.statusMessage = reader.string()) : field === 3 ? (span.statusCode = reader.int32()) : reader.skip(wireType)));
        return;
      default:
        reader.skip(wireType);
    }
  });
  return span;
}

// KeyValue: key = 1, value = 2 (AnyValue: string_value = 1, bool_value = 2, int_value = 3, double_value = 4).
function keyValue(bytes: Uint8Array, into: Attributes): void {
  let key = "";
  let value: string | number | boolean = "";
  fields(bytes, (field, wireType, reader) => {
    if (field === 1) key = reader.string();
    else if (field === 2) {
      fields(reader.bytes(), (field, wireType, reader) => {
        if (field === 1) value = reader.string();
        else if (field === 2) value = reader.bool();
        else if (field === 3) value = Number(reader.int64());
        else if (field === 4) value = reader.double();
        else reader.skip(wireType);
      });
    } else reader.skip(wireType);
  });
  into[key] = value;
}

/**
 * The same receiver over OTLP/gRPC: a grpc-js server answering
 * `opentelemetry.proto.collector.trace.v1.TraceService/Export` with its request decoded as above.
 */
export async function startOtlpGrpcReceiver(): Promise<{ url: string; spans: ReceivedSpan[]; close(): Promise<void> }> {
  const grpc = await import("@grpc/grpc-js");
  const spans: ReceivedSpan[] = [];
  const server = new grpc.Server();
  const identity = (bytes: Buffer) => bytes;
  server.addService(
    {
      export: {
        path: "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        requestStream: false,
        responseStream: false,
        requestSerialize: identity,
        requestDeserialize: identity,
        responseSerialize: identity,
        responseDeserialize: identity,
      },
    },
    {
      export: (call: { request: Buffer }, callback: (error: null, response: Buffer) => void) => {
        spans.push(...decodeExportRequest(call.request));
        callback(null, Buffer.alloc(0));
      },
    },
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))),
  );
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    close: () => new Promise<void>((resolve) => server.tryShutdown(() => resolve())),
  };
}
