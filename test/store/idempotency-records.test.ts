import { describe, expect, it } from "vitest";
import { IdempotencyRecords } from "../../src/store/idempotency-records.js";

describe("IdempotencyRecords", () => {
  it("lets expired records go as soon as a newer one is written, and counts their bytes back", () => {
    const records = new IdempotencyRecords({ maxRecords: 100, maxBytes: 1 << 20, ttlMs: 10 });
    for (let index = 0; index < 50; index++) records.add("c", `k${index}`, "f", 1n, 0);
    expect(records.size).toBe(50);
    records.add("c", "late", "f", 2n, 10);
    expect(records.size).toBe(1);
    expect(records.bytes).toBe(160 + 2 * ("1:c".length + "late".length + "f".length));
    expect(records.get("c", "late", 19)).toMatchObject({ fingerprint: "f", version: 2n });
    expect(records.get("c", "late", 20)).toBeUndefined();
    expect(records.bytes).toBe(0);
  });

  it("keeps (conversation, key) pairs apart that concatenate alike", () => {
    const records = new IdempotencyRecords({ maxRecords: 100, maxBytes: 1 << 20, ttlMs: 10 });
    records.add("a:", "b", "first", 1n, 0);
    records.add("a", ":b", "second", 1n, 0);
    expect(records.get("a:", "b", 0)?.fingerprint).toBe("first");
    expect(records.get("a", ":b", 0)?.fingerprint).toBe("second");
  });
});
