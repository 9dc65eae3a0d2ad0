import type { ObserverEvent } from "../../gen/ts/contextd/v1/telemetry_pb.js";
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

interface Subscriber {
  filter: EventFilter;
  /** Each event with the number dropped right before it, so a gap is reported where it happened. */
  queue: DeliveredEvent[];
  /** Dropped since the last queued event. */
  dropped: bigint;
  wake: (() => void) | undefined;
}

/**
 * Fans the observer events of every compile out to `WatchEvents` subscribers. `publish` never
 * blocks and never throws: each subscriber has a bounded queue, and when it is full the newest
 * events are dropped and counted, so one slow reader cannot stall compiles or other readers.
 */
export class TelemetryHub {
  private readonly subscribers = new Set<Subscriber>();
  private readonly listeners = new Set<Observer>();
  private readonly subscriberCountListeners = new Set<(count: number) => void>();
  /** Where this process's events also go, for subscribers elsewhere (other `--workers`); none by default. */
  private forwarding: Observer | undefined;

  constructor(private readonly queueSize: number) {}

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
    for (const subscriber of this.subscribers) {
      if (!matches(subscriber.filter, event)) continue;
      subscriber.dropped += dropped;
      if (subscriber.queue.length >= this.queueSize) {
        subscriber.dropped++;
        continue;
      }
      subscriber.queue.push({ event, dropped: subscriber.dropped });
      subscriber.dropped = 0n;
      subscriber.wake?.();
    }
  };

  /** Synchronous listeners (metrics) that see every event; they must be cheap. */
  listen(listener: Observer): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  get subscriberCount(): number {
    return this.subscribers.size;
  }

  /** Calls `listener` with the new count whenever a subscriber comes or goes. */
  onSubscriberCount(listener: (count: number) => void): () => void {
    this.subscriberCountListeners.add(listener);
    return () => this.subscriberCountListeners.delete(listener);
  }

  /** Sends every event `publish` gets to `forward` too, or stops (undefined). */
  forwardTo(forward: Observer | undefined): void {
    this.forwarding = forward;
  }

  private subscribersChanged(): void {
    for (const listener of this.subscriberCountListeners) listener(this.subscribers.size);
  }

  /** Events matching `filter` from now until `signal` aborts. */
  async *subscribe(filter: EventFilter, signal: AbortSignal): AsyncGenerator<DeliveredEvent> {
    const subscriber: Subscriber = { filter, queue: [], dropped: 0n, wake: undefined };
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
        yield subscriber.queue.shift()!;
      }
    } finally {
      this.subscribers.delete(subscriber);
      this.subscribersChanged();
    }
  }
}

function matches(filter: EventFilter, event: ObserverEvent): boolean {
  if (filter.conversationId !== "" && event.conversationId !== filter.conversationId) return false;
  return filter.conversationPrefix === "" || event.conversationId.startsWith(filter.conversationPrefix);
}
