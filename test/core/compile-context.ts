import type { CompileContext } from "../../src/core/compile/compile-context.js";
import type { ObserverEvent } from "#gen/contextd/v1/telemetry_pb";
import { TokenCountCache } from "../../src/core/tokens/token-count-cache.js";

/** A deterministic compile context: counter ids, a fixed clock, events collected in `events`. */
export function testContext(overrides: Partial<CompileContext> = {}): CompileContext & { events: ObserverEvent[] } {
  let counter = 0;
  let ns = 0n;
  const events: ObserverEvent[] = [];
  return {
    randomId: () => `00000000-0000-4000-8000-${(++counter).toString(16).padStart(12, "0")}`,
    now: () => 1_700_000_000_000,
    monotonicNs: () => (ns += 1000n),
    tokenCounts: new TokenCountCache(),
    observer: (event) => events.push(event),
    events,
    ...overrides,
  };
}
