import type { ConnectRouter } from "@connectrpc/connect";
import type { DescFile, Registry } from "@bufbuild/protobuf";
import { toBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import * as v1 from "#gen/grpc/reflection/v1/reflection_pb";
import * as v1alpha from "#gen/grpc/reflection/v1alpha/reflection_pb";

type Request = v1.ServerReflectionRequest | v1alpha.ServerReflectionRequest;

/**
 * gRPC server reflection (v1 and v1alpha), so `buf curl` and grpcurl-style tools can call the
 * sidecar without the .proto files. Answers from the descriptors compiled into the server.
 */
export function registerReflection(router: ConnectRouter, registry: Registry, services: string[]): void {
  router.service(v1.ServerReflection, {
    async *serverReflectionInfo(requests) {
      for await (const request of requests) {
        yield { originalRequest: request, messageResponse: reflect(request, registry, services) };
      }
    },
  });
  router.service(v1alpha.ServerReflection, {
    async *serverReflectionInfo(requests) {
      for await (const request of requests) {
        yield { originalRequest: request, messageResponse: reflect(request, registry, services) };
      }
    },
  });
}

// The v1 and v1alpha messages are field-for-field identical, so one plain-object answer serves both.
function reflect(request: Request, registry: Registry, services: string[]) {
  const files = (file: DescFile | undefined, what: string) =>
    file
      ? {
          case: "fileDescriptorResponse" as const,
          value: { fileDescriptorProto: withDependencies(file).map(serializeFile) },
        }
      : notFound(what);
  const message = request.messageRequest;
  switch (message.case) {
    case "listServices":
      return {
        case: "listServicesResponse" as const,
        value: { service: services.map((name) => ({ name })) },
      };
    case "fileByFilename":
      return files(fileByName(registry, message.value), `file "${message.value}"`);
    case "fileContainingSymbol":
      return files(fileOfSymbol(registry, message.value), `symbol "${message.value}"`);
    case "fileContainingExtension":
      return notFound(`extension ${message.value.extensionNumber} of "${message.value.containingType}"`);
    case "allExtensionNumbersOfType":
      return {
        case: "allExtensionNumbersResponse" as const,
        value: { baseTypeName: message.value, extensionNumber: [] },
      };
    default:
      return { case: "errorResponse" as const, value: { errorCode: 3, errorMessage: "empty reflection request" } };
  }
}

// Reflection errors carry gRPC status codes; 5 is NOT_FOUND.
function notFound(what: string) {
  return { case: "errorResponse" as const, value: { errorCode: 5, errorMessage: `${what} not found` } };
}

function fileByName(registry: Registry, name: string): DescFile | undefined {
  for (const type of registry) {
    const file = fileOf(type);
    if (file.proto.name === name) return file;
    for (const dependency of withDependencies(file)) if (dependency.proto.name === name) return dependency;
  }
  return undefined;
}

function fileOfSymbol(registry: Registry, symbol: string): DescFile | undefined {
  const direct = registry.get(symbol);
  if (direct) return fileOf(direct);
  // A method name: "package.Service.Method".
  const service = registry.getService(symbol.slice(0, symbol.lastIndexOf(".")));
  return service?.methods.some((method) => `${service.typeName}.${method.name}` === symbol) ? service.file : undefined;
}

function fileOf(type: { kind: string; file?: DescFile; parent?: unknown }): DescFile {
  return (type as { file: DescFile }).file;
}

function withDependencies(file: DescFile): DescFile[] {
  const seen = new Map<string, DescFile>();
  const visit = (current: DescFile) => {
    if (seen.has(current.proto.name)) return;
    seen.set(current.proto.name, current);
    current.dependencies.forEach(visit);
  };
  visit(file);
  return [...seen.values()];
}

const serializedFiles = new WeakMap<DescFile, Uint8Array>();

function serializeFile(file: DescFile): Uint8Array {
  let bytes = serializedFiles.get(file);
  if (!bytes) {
    bytes = toBinary(FileDescriptorProtoSchema, file.proto);
    serializedFiles.set(file, bytes);
  }
  return bytes;
}
