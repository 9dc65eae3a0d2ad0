import { describe, expect, it } from "vitest";
import { RecentCompiles } from "../../src/application/recent-compiles.js";

describe("RecentCompiles", () => {
  it("stays within its bytes, forgetting the least recently compiled conversations first", () => {
    const memory = new RecentCompiles(1_000);
    const prefix = (count: number) => ({ version: 1n, digests: Array.from({ length: count }, (_, index) => `d${index}`) });
    memory.remember("a", prefix(10));
    memory.remember("b", prefix(10));
    memory.remember("a", prefix(10));
    memory.remember("c", prefix(20));
    expect(memory.bytes).toBeLessThanOrEqual(1_000);
    expect(memory.previous("b")).toBeUndefined();
    expect(memory.previous("a")).toBeDefined();
    expect(memory.previous("c")).toBeDefined();
    // One prompt larger than the whole memory is not remembered at all.
    memory.remember("huge", prefix(100));
    expect(memory.previous("huge")).toBeUndefined();
  });
});
