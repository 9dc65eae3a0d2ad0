import { describe, expect, it } from "vitest";
import { RecentIds, rememberedIdOverheadBytes } from "../../src/store/recent-ids.js";

describe("RecentIds", () => {
  it("stays within its byte bound as it fills past it: the least recently set go, an id over the bound alone is not kept", () => {
    const bound = 10_000;
    const ids = new RecentIds<number>(bound);
    const id = (index: number) => `tenant/conversation-${String(index).padStart(6, "0")}`;
    const weight = rememberedIdOverheadBytes + 2 * id(0).length;
    for (let index = 0; index < 1_000; index++) {
      ids.set(id(index), index);
      expect(ids.keptBytes).toBeLessThanOrEqual(bound);
    }
    // Exactly as many as fit, the newest.
    const fit = Math.floor(bound / weight);
    expect([ids.size, ids.keptBytes]).toEqual([fit, fit * weight]);
    expect(ids.get(id(999))).toBe(999);
    expect(ids.get(id(999 - fit))).toBeUndefined();
    // Set again, an id is the most recent: the next one pushes out another.
    const oldest = id(1_000 - fit);
    ids.set(oldest, -1);
    ids.set(id(1_000), 1_000);
    expect([ids.get(oldest), ids.get(id(1_001 - fit))]).toEqual([-1, undefined]);
    // An id longer than the bound is not kept, and pushes nothing out.
    const before = ids.keptBytes;
    ids.set("x".repeat(bound), 0);
    expect([ids.get("x".repeat(bound)), ids.keptBytes]).toEqual([undefined, before]);
    ids.delete(oldest);
    expect(ids.keptBytes).toBe(before - weight);
  });

  it("weighs a string value with its id (the homes of forks a Redis Cluster store remembers), so long homes fit fewer", () => {
    const ids = new RecentIds<string>(1_000);
    const home = "h".repeat(100);
    ids.set("fork", home);
    expect(ids.keptBytes).toBe(rememberedIdOverheadBytes + 2 * "fork".length + 2 * home.length);
    for (let index = 0; index < 10; index++) ids.set(`fork-${index}`, home);
    expect(ids.keptBytes).toBeLessThanOrEqual(1_000);
    expect(ids.size).toBe(Math.floor(1_000 / (rememberedIdOverheadBytes + 2 * "fork-0".length + 2 * home.length)));
  });
});
