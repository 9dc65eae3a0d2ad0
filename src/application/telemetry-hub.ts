import type { ObserverEvent } from "#gen/contextd/v1/telemetry_pb";
import type { Observer } from "../core/observer.js";

/** Which events a subscriber wants. */
export interface EventFilter {
  /** Only this conversation; empty = every conversation the subscriber may see. */
  conversationId: string;
  /** Only conversations whose id starts with this (tenant scoping); empty = no restriction. */
  conversationPrefix: string;
}

/** One delivered event and how many were dropped for this subscriber just before it. */
export interface DeliveredEvent {
  event: ObserverEvent;
  dropped: bigint;
}

/** What the hub's queues may hold, besides `queueSize` events per subscriber. */
export interface TelemetryQueueBounds {
  /** Bytes of events one subscriber may have queued. */
  queueBytes: number;
  /**
   * Bytes of events the subscribers of one tenant (their `conversationPrefix`; "" = unscoped) may
   * have queued together, counted in every queue that holds them: so no tenant's stalled readers
   * make another tenant's subscribers lose events.
   */
  tenantBytes: number;
}

export const defaultTelemetryQueueBounds: TelemetryQueueBounds = { queueBytes: 1024 * 1024, tenantBytes: 32 * 1024 * 1024 };

/** One published event as queues hold it: its size once, and how many queues hold it. */
interface Held {
  readonly event: ObserverEvent;
  readonly bytes: number;
  refs: number;
}

interface Queued {
  held: Held;
  dropped: bigint;
}

interface Subscriber {
  filter: EventFilter;
  /** Each event with the number dropped right before it, so a gap is reported where it happened. */
  queue: Queued[];
  /** Bytes of the events in `queue`. */
  bytes: number;
  /** Dropped since the last queued event. */
  dropped: bigint;
  wake: (() => void) | undefined;
}

/**
 * Fans the observer events of every compile out to `WatchEvents` subscribers. `publish` never
 * blocks and never throws: each subscriber has a bounded queue, and when it is full the newest
 * events are dropped and counted, so one slow reader cannot stall compiles or other readers.
 *
 * Queues are bounded in events and in bytes (`observerEventBytes`), per subscriber and for each
 * tenant's subscribers together (so memory is at most the tenants of the tokens, plus one, times
 * `tenantBytes`). Why: each event carries its conversation id, so a count alone bounded nothing: two
 * subscribers that stopped reading and 140 compiles with 2 MB ids held +298 MB, three with 4 MB ids
 * ran a 512 MB heap out of memory. An event queues only if it fits all three bounds; an event larger
 * than a subscriber's whole byte bound never queues.
 */
export class TelemetryHub {
  private readonly subscribers = new Set<Subscriber>();
  private readonly listeners = new Set<Observer>();
  private readonly subscriberListeners = new Set<(filters: readonly EventFilter[]) => void>();
  /** Where this process's events also go, for subscribers elsewhere (other `--workers`); none by default. */
  private forwarding: Observer | undefined;
  /** Bytes of the distinct events the queues hold. */
  private held = 0;
  /** Bytes queued for each tenant's subscribers, summed over their queues. */
  private readonly byTenant = new Map<string, number>();

  constructor(
    private readonly queueSize: number,
    private readonly bounds: TelemetryQueueBounds = defaultTelemetryQueueBounds,
  ) {}

  /** Bytes of events queued for subscribers, each event counted once. */
  get queuedBytes(): number {
    return this.held;
  }

  /** The compile pipeline's observer: hand this to the services as their `publish` dependency. */
  readonly publish: Observer = (event) => {
    for (const listener of this.listeners) {
      try {
        listener(event);
      } catch {
        // Telemetry never fails a compile.
      }
    }
    if (this.forwarding) {
      try {
        this.forwarding(event);
      } catch {
        // Telemetry never fails a compile.
      }
    }
    this.deliver(event);
  };

  /**
   * Queues `event` for this hub's subscribers only: an event of a compile another process ran
   * (its listeners, such as metrics, counted it there). `dropped` events of that stream were lost
   * before it on the way; each matching subscriber is told.
   */
  deliver(event: ObserverEvent, dropped = 0n): void {
    let held: Held | undefined;
    for (const subscriber of this.subscribers) {
      if (!matchesFilter(subscriber.filter, event)) continue;
      held ??= { event, bytes: observerEventBytes(event), refs: 0 };
      subscriber.dropped += dropped;
      const tenant = subscriber.filter.conversationPrefix;
      const tenantHeld = this.byTenant.get(tenant) ?? 0;
      const fits =
        subscriber.queue.length < this.queueSize &&
        subscriber.bytes + held.bytes <= this.bounds.queueBytes &&
        tenantHeld + held.bytes <= this.bounds.tenantBytes;
      if (!fits) {
        subscriber.dropped++;
        continue;
      }
      if (held.refs++ === 0) this.held += held.bytes;
      subscriber.queue.push({ held, dropped: subscriber.dropped });
      subscriber.bytes += held.bytes;
      this.byTenant.set(tenant, tenantHeld + held.bytes);
      subscriber.dropped = 0n;
      subscriber.wake?.();
    }
  }

  // A queued event leaves one queue (read, or its subscriber gone).
  private release(subscriber: Subscriber, queued: Queued): void {
    subscriber.bytes -= queued.held.bytes;
    const tenant = subscriber.filter.conversationPrefix;
    const left = (this.byTenant.get(tenant) ?? 0) - queued.held.bytes;
    if (left === 0) this.byTenant.delete(tenant);
    else this.byTenant.set(tenant, left);
    if (--queued.held.refs === 0) this.held -= queued.held.bytes;
  }

  /** Synchronous listeners (metrics) that see every event; they must be cheap. */
  listen(listener: Observer): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  get subscriberCount(): number {
    return this.subscribers.size;
  }

  /**
   * Calls `listener` with the subscribers' filters (one per subscriber, in no order) whenever a
   * subscriber comes or goes.
   */
  onSubscribers(listener: (filters: readonly EventFilter[]) => void): () => void {
    this.subscriberListeners.add(listener);
    return () => this.subscriberListeners.delete(listener);
  }

  /** Sends every event `publish` gets to `forward` too, or stops (undefined). */
  forwardTo(forward: Observer | undefined): void {
    this.forwarding = forward;
  }

  private subscribersChanged(): void {
    if (this.subscriberListeners.size === 0) return;
    const filters = [...this.subscribers].map((subscriber) => subscriber.filter);
    for (const listener of this.subscriberListeners) listener(filters);
  }

  /** Events matching `filter` from now until `signal` aborts. */
  async *subscribe(filter: EventFilter, signal: AbortSignal): AsyncGenerator<DeliveredEvent> {
    const subscriber: Subscriber = { filter, queue: [], bytes: 0, dropped: 0n, wake: undefined };
    this.subscribers.add(subscriber);
    this.subscribersChanged();
    const aborted = new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
    try {
      while (!signal.aborted) {
        if (subscriber.queue.length === 0) {
          await Promise.race([new Promise<void>((resolve) => (subscriber.wake = resolve)), aborted]);
          subscriber.wake = undefined;
          continue;
        }
        const queued = subscriber.queue.shift()!;
        this.release(subscriber, queued);
        yield { event: queued.held.event, dropped: queued.dropped };
      }
    } finally {
      for (const queued of subscriber.queue) this.release(subscriber, queued);
      subscriber.queue.length = 0;
      this.subscribers.delete(subscriber);
      this.subscribersChanged();
    }
  }
}

/**
 * About what an event costs while queued: its strings (which carry the caller's ids; one byte per
 * character, as V8 keeps ASCII) plus the objects around them. What the byte bounds count.
 */
export function observerEventBytes(event: ObserverEvent): number {
  let bytes = 160 + event.conversationId.length + event.compileId.length;
  const body = event.event;
  if (body.case === "tokensEstimated") bytes += body.value.block.length;
  else if (body.case === "messageDropped" || body.case === "messageCleared") bytes += body.value.messageId.length;
  else if (body.case === "historyHeadDropped") bytes += body.value.firstMessageId.length + body.value.lastMessageId.length;
  return bytes;
}

/** Whether a subscriber with `filter` gets `event`. */
export function matchesFilter(filter: EventFilter, event: ObserverEvent): boolean {
  if (filter.conversationId !== "" && event.conversationId !== filter.conversationId) return false;
  return filter.conversationPrefix === "" || event.conversationId.startsWith(filter.conversationPrefix);
}
