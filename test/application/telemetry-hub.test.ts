import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ObserverEventSchema, type ObserverEvent } from "../../gen/ts/contextd/v1/telemetry_pb.js";
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
    hub.onSubscriberCount((count) => counts.push(count));
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
});
