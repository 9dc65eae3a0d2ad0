import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ObserverEventSchema, type ObserverEvent } from "#gen/contextd/v1/telemetry_pb";
import { TelemetryHub, type DeliveredEvent } from "../../src/application/telemetry-hub.js";

const event = (conversationId: string): ObserverEvent =>
  create(ObserverEventSchema, { conversationId, event: { case: "pipelineCompiled", value: { totalCost: 1n } } });

describe("TelemetryHub", () => {
  it("hands published events to listeners, the forwarder and subscribers, and delivered ones (another process's) to subscribers only", async () => {
    const hub = new TelemetryHub(8);
    const listened: string[] = [];
    const forwarded: string[] = [];
    const counts: number[] = [];
    hub.listen((published) => listened.push(published.conversationId));
    hub.onSubscribers((filters) => counts.push(filters.length));
    const abort = new AbortController();
    const subscription = hub.subscribe({ conversationId: "", conversationPrefix: "" }, abort.signal);
    const first = subscription.next();
    hub.publish(event("before-forwarding"));
    hub.forwardTo((published) => forwarded.push(published.conversationId));
    hub.publish(event("local"));
    hub.deliver(event("remote"), 3n);
    hub.forwardTo(undefined);
    hub.publish(event("after-forwarding"));
    const received: DeliveredEvent[] = [(await first).value as DeliveredEvent];
    for (let index = 0; index < 3; index++) received.push((await subscription.next()).value as DeliveredEvent);
    expect(received.map(({ event: delivered, dropped }) => [delivered.conversationId, dropped])).toEqual([
      ["before-forwarding", 0n],
      ["local", 0n],
      ["remote", 3n],
      ["after-forwarding", 0n],
    ]);
    // Metrics (listeners) count only this process's compiles; only published events travel on.
    expect(listened).toEqual(["before-forwarding", "local", "after-forwarding"]);
    expect(forwarded).toEqual(["local"]);
    abort.abort();
    await subscription.return(undefined);
    expect(counts).toEqual([1, 0]);
  });

  it("bounds each queue in bytes: an event past a subscriber's bytes is dropped and counted, and queued bytes go back as they are read", async () => {
    const hub = new TelemetryHub(1_000, { queueBytes: 10_000, tenantBytes: 1_000_000 });
    const abort = new AbortController();
    const subscription = hub.subscribe({ conversationId: "", conversationPrefix: "" }, abort.signal);
    const first = subscription.next();
    await new Promise((resolve) => setImmediate(resolve));
    // Held by the pending read: the first event goes to it at once.
    hub.publish(event("a".repeat(100)));
    expect((await first).value?.event.conversationId).toBe("a".repeat(100));
    expect(hub.queuedBytes).toBe(0);
    // 4 MB ids never queue; 4,000-character ones fit twice into 10,000 bytes.
    hub.publish(event("x".repeat(4_000_000)));
    for (let index = 0; index < 5; index++) hub.publish(event(`${index}`.repeat(4_000)));
    expect(hub.queuedBytes).toBe(2 * (160 + 4_000));
    const next = (await subscription.next()).value as DeliveredEvent;
    expect([next.event.conversationId.length, next.dropped]).toEqual([4_000, 1n]);
    const then = (await subscription.next()).value as DeliveredEvent;
    expect([then.event.conversationId[0], then.dropped]).toEqual(["1", 0n]);
    expect(hub.queuedBytes).toBe(0);
    hub.publish(event("late"));
    // The three 4,000-character events that did not fit are counted before the next one.
    expect(((await subscription.next()).value as DeliveredEvent).dropped).toBe(3n);
    abort.abort();
    await subscription.return(undefined);
  });

  it("bounds each tenant's queues together, so one tenant's stalled readers do not make another's lose events; leaving gives the bytes back", async () => {
    const hub = new TelemetryHub(1_000, { queueBytes: 100_000, tenantBytes: 25_000 });
    const abort = new AbortController();
    const stalled = [0, 1, 2].map(() => hub.subscribe({ conversationId: "", conversationPrefix: "a/" }, abort.signal));
    const other = hub.subscribe({ conversationId: "", conversationPrefix: "b/" }, abort.signal);
    // Subscribed (a generator runs once it is first read), with nothing read after.
    const firsts = [...stalled, other].map((reader) => reader.next());
    hub.publish(event("a/first"));
    hub.publish(event("b/first"));
    await Promise.all(firsts);
    for (let index = 0; index < 10; index++) {
      hub.publish(event(`a/${index}`.padEnd(4_000, "x")));
      hub.publish(event(`b/${index}`.padEnd(4_000, "y")));
    }
    // Tenant a: three queues of 4,160-byte events within 25,000 bytes, two events each; the events
    // are held once. Tenant b's one subscriber got six of its own.
    expect(hub.queuedBytes).toBe(2 * 4_160 + 6 * 4_160);
    for (let index = 0; index < 6; index++) expect(((await other.next()).value as DeliveredEvent).event.conversationId.slice(0, 3)).toBe(`b/${index}`);
    abort.abort();
    for (const reader of [...stalled, other]) await reader.return(undefined);
    expect(hub.queuedBytes).toBe(0);
  });

});
