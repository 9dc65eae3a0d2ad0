import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";

/** Counts the streaming calls in flight (for the limit and the metrics gauge). */
export class StreamCounter {
  active = 0;
}

/**
 * Bounds streaming calls and ends them on shutdown. A call beyond `maxStreams` open streams is
 * RESOURCE_EXHAUSTED. When `shutdownSignal` aborts, every open response stream ends with
 * UNAVAILABLE, whatever the service is waiting for; connect then aborts the call's own signal so
 * the service's generator is released.
 */
export function guardStreams(maxStreams: number, counter: StreamCounter, shutdownSignal: AbortSignal): Interceptor {
  return (next) => async (request) => {
    if (request.method.methodKind === "unary") return next(request);
    const name = `${request.method.parent.typeName}/${request.method.name}`;
    if (shutdownSignal.aborted) throw shuttingDown(name);
    if (counter.active >= maxStreams) {
      throw new ConnectError(
        `${name}: ${counter.active} streams are open, the limit is ${maxStreams} (--max-streams / CONTEXTD_MAX_STREAMS)`,
        Code.ResourceExhausted,
      );
    }
    counter.active++;
    let released = false;
    const release = () => {
      if (!released) counter.active--;
      released = true;
    };
    try {
      const response = await next(request);
      if (!response.stream) {
        release();
        return response;
      }
      return { ...response, message: untilShutdown(response.message, shutdownSignal, name, release) };
    } catch (error) {
      release();
      throw error;
    }
  };
}

async function* untilShutdown<T>(messages: AsyncIterable<T>, signal: AbortSignal, name: string, release: () => void): AsyncGenerator<T> {
  const iterator = messages[Symbol.asyncIterator]();
  let onAbort: (() => void) | undefined;
  const stopped = new Promise<never>((_, reject) => {
    onAbort = () => reject(shuttingDown(name));
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
  });
  stopped.catch(() => undefined);
  try {
    for (;;) {
      const result = await Promise.race([iterator.next(), stopped]);
      if (result.done) return;
      yield result.value;
    }
  } finally {
    signal.removeEventListener("abort", onAbort!);
    release();
    // Do not wait: a generator blocked on a pending promise finishes only once connect aborts its signal.
    void iterator.return?.()?.catch(() => undefined);
  }
}

function shuttingDown(name: string): ConnectError {
  return new ConnectError(`${name}: contextd is shutting down`, Code.Unavailable);
}
