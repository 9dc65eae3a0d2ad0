import * as grpc from "@grpc/grpc-js";
import { expect } from "vitest";
import { create, fromBinary, toBinary, type DescMessage, type DescMethod, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";

/**
 * A foreign gRPC client: grpc-js with protobuf-es only for (de)serialisation, so the request goes
 * through grpc-js's own HTTP/2 framing, not connect's.
 */
export function grpcJsClient(address: string, credentials = grpc.credentials.createInsecure(), options: grpc.ChannelOptions = {}) {
  const client = new grpc.Client(address, credentials, options);
  const path = (method: DescMethod) => `/${method.parent.typeName}/${method.name}`;
  return {
    raw: client,
    unary<I extends DescMessage, O extends DescMessage>(
      method: DescMethod & { input: I; output: O },
      input: MessageInitShape<I>,
      metadata = new grpc.Metadata(),
      options: grpc.CallOptions = {},
    ): Promise<MessageShape<O>> {
      return new Promise((resolve, reject) => {
        client.makeUnaryRequest(
          path(method),
          (message: MessageShape<I>) => Buffer.from(toBinary(method.input, message)),
          (bytes: Buffer) => fromBinary(method.output, bytes) as MessageShape<O>,
          create(method.input, input) as MessageShape<I>,
          metadata,
          options,
          (error, response) => (error ? reject(error) : resolve(response!)),
        );
      });
    },
    serverStream<I extends DescMessage, O extends DescMessage>(
      method: DescMethod & { input: I; output: O },
      input: MessageInitShape<I>,
      metadata = new grpc.Metadata(),
      options: grpc.CallOptions = {},
    ): grpc.ClientReadableStream<MessageShape<O>> {
      return client.makeServerStreamRequest(
        path(method),
        (message: MessageShape<I>) => Buffer.from(toBinary(method.input, message)),
        (bytes: Buffer) => fromBinary(method.output, bytes) as MessageShape<O>,
        create(method.input, input) as MessageShape<I>,
        metadata,
        options,
      );
    },
    bidiStream<I extends DescMessage, O extends DescMessage>(
      method: DescMethod & { input: I; output: O },
      metadata = new grpc.Metadata(),
      options: grpc.CallOptions = {},
    ): grpc.ClientDuplexStream<MessageShape<I>, MessageShape<O>> {
      return client.makeBidiStreamRequest(
        path(method),
        (message: MessageShape<I>) => Buffer.from(toBinary(method.input, create(method.input, message as MessageInitShape<I>))),
        (bytes: Buffer) => fromBinary(method.output, bytes) as MessageShape<O>,
        metadata,
        options,
      );
    },
    close: () => client.close(),
  };
}

/** The gRPC error `call` ends with; fails the test when it succeeds. */
export async function rpcFailure(call: Promise<unknown>): Promise<grpc.ServiceError> {
  const error = await call.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error, "expected the RPC to fail").toBeDefined();
  return error as grpc.ServiceError;
}
