import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { tenantKey } from "./call-context.js";
import { raceAbort } from "../../application/abort-race.js";

/** Counts the streaming calls in flight, in all and per tenant (for the limits and the metrics gauge). */
export class StreamCounter {
  active = 0;
  readonly byTenant = new Map<string, number>();
}

export interface StreamLimits {
  /** Open streams over the whole server (`--max-streams`). */
  maxStreams: number;
  /** Open streams of one tenant (`--max-streams-per-tenant`, resolved by `streamsPerTenant`). */
  maxStreamsPerTenant: number;
}

/**
 * `--max-streams-per-tenant`, or when 0 `--max-streams` divided among the tenants the tokens name
 * (tokens without a tenant count as one more; no tokens: one pool of `--max-streams`), so that by
 * default each tenant is sure of its share.
 */
export function streamsPerTenant(maxStreams: number, perTenant: number, tokenTenants: readonly string[]): number {
  if (perTenant > 0) return Math.min(perTenant, maxStreams);
  const tenants = new Set(tokenTenants).size;
  return tenants === 0 ? maxStreams : Math.max(1, Math.floor(maxStreams / tenants));
}

/**
 * Bounds streaming calls and ends them on shutdown. A call beyond `maxStreams` open streams, or
 * beyond `maxStreamsPerTenant` of its tenant's (the token's tenant; "" for tokens without one and
 * without auth), is RESOURCE_EXHAUSTED. Why per tenant: streams are held for as long as the caller
 * wants (WatchEvents, CompileSession), so one tenant could hold every slot and starve the others.
 * When `shutdownSignal` aborts, every open response stream ends with UNAVAILABLE, whatever the
 * service is waiting for; connect then aborts the call's own signal so the service's generator is
 * released.
 */
export function guardStreams(limits: StreamLimits, counter: StreamCounter, shutdownSignal: AbortSignal): Interceptor {
  const { maxStreams, maxStreamsPerTenant } = limits;
  return (next) => async (request) => {
    if (request.method.methodKind === "unary") return next(request);
    const name = `${request.method.parent.typeName}/${request.method.name}`;
    if (shutdownSignal.aborted) throw shuttingDown(name);
    const tenant = request.contextValues.get(tenantKey);
    const tenantActive = counter.byTenant.get(tenant) ?? 0;
    if (tenantActive >= maxStreamsPerTenant && maxStreamsPerTenant < maxStreams) {
      throw new ConnectError(
        `${name}: ${tenant === "" ? "callers without a tenant have" : `tenant "${tenant}" has`} ${tenantActive} streams open, the limit per tenant is ${maxStreamsPerTenant} (--max-streams-per-tenant / CONTEXTD_MAX_STREAMS_PER_TENANT)`,
        Code.ResourceExhausted,
      );
    }
    if (counter.active >= maxStreams) {
      throw new ConnectError(
        `${name}: ${counter.active} streams are open, the limit is ${maxStreams} (--max-streams / CONTEXTD_MAX_STREAMS)`,
        Code.ResourceExhausted,
      );
    }
    counter.active++;
    counter.byTenant.set(tenant, tenantActive + 1);
    let released = false;
    const release = () => {
      if (!released) {
        counter.active--;
        const left = (counter.byTenant.get(tenant) ?? 1) - 1;
        if (left === 0) counter.byTenant.delete(tenant);
        else counter.byTenant.set(tenant, left);
      }
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
  try {
    for (;;) {
      // Not a race with one promise for the whole stream: that kept every message sent alive (raceAbort).
      const result = await raceAbort(iterator.next(), signal, () => {
        throw shuttingDown(name);
      });
      if (result.done) return;
      yield result.value;
    }
  } finally {
    release();
    // Do not wait: a generator blocked on a pending promise finishes only once connect aborts its signal.
    void iterator.return?.()?.catch(() => undefined);
  }
}

function shuttingDown(name: string): ConnectError {
  return new ConnectError(`${name}: contextd is shutting down`, Code.Unavailable);
}
