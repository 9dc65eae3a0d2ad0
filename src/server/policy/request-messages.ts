import type { DescMessage, MessageShape } from "@bufbuild/protobuf";
import type { StreamRequest, UnaryRequest } from "@connectrpc/connect";

/**
 * `request` with `inspect` applied to what it carries before the handler sees it: a unary call's
 * one message at once, a client or bidi stream's messages one by one as they arrive (a throw ends
 * the call with that error). The one way interceptors look at request messages: message counts,
 * string limits, tenant scope and the JSON path's freezing all go through it.
 */
export function inspectRequestMessages<I extends DescMessage, O extends DescMessage>(
  request: UnaryRequest<I, O> | StreamRequest<I, O>,
  inspect: (message: MessageShape<I>) => void,
): UnaryRequest<I, O> | StreamRequest<I, O> {
  if (!request.stream) {
    inspect(request.message);
    return request;
  }
  const messages = request.message;
  return {
    ...request,
    message: (async function* () {
      for await (const message of messages) {
        inspect(message);
        yield message;
      }
    })(),
  };
}
