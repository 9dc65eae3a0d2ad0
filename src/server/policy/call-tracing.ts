import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import type { Tracing } from "../operations/tracing.js";
import { codeName } from "./instrumentation.js";

/**
 * A span per RPC (see `Tracing`), installed only when tracing is on, as the outermost interceptor:
 * the span covers the whole call, the call's work runs with it as the current span (so compile
 * stages and store operations become its children), and a stream's span ends after its last message.
 */
export function traceCalls(tracing: Tracing): Interceptor {
  return (next) => (request) => {
    const method = `${request.method.parent.typeName}/${request.method.name}`;
    return tracing.runCall(method, request.header, async (span) => {
      const finish = (error: unknown) => {
        if (error === undefined) return tracing.endCall(span, 0, "ok");
        const failure = ConnectError.from(error);
        tracing.endCall(span, failure.code, codeName(failure.code), failure.rawMessage);
      };
      let response;
      try {
        response = await next(request);
      } catch (error) {
        finish(error);
        throw error;
      }
      if (!response.stream) {
        finish(undefined);
        return response;
      }
      const messages = response.message[Symbol.asyncIterator]();
      let done = false;
      const settle = (error: unknown) => {
        if (done) return;
        done = true;
        finish(error);
      };
      // Each step of the stream runs with the call's span current: a streaming handler does its
      // work as it is iterated, outside the context `runCall` set up.
      const stream: AsyncIterableIterator<typeof response.message extends AsyncIterable<infer M> ? M : never> = {
        [Symbol.asyncIterator]() {
          return this;
        },
        next: () =>
          tracing.within(span, () => messages.next()).then(
                (step) => {
                  if (step.done) settle(undefined);
                  return step;
                },
                (error: unknown) => {
                  settle(error);
                  throw error;
                },
              ),
        return: async (value?: unknown) => {
          settle(new ConnectError("stream ended by the caller", Code.Canceled));
          return (await messages.return?.(value)) ?? { done: true, value: undefined };
        },
        throw: async (error?: unknown) => {
          settle(error);
          if (messages.throw) return messages.throw(error);
          throw error;
        },
      };
      return { ...response, message: stream };
    });
  };
}
