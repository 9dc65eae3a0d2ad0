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

  it("forgets every record of one conversation at once (it was deleted or expired), and only its own, counting their bytes back", () => {
    const records = new IdempotencyRecords({ maxRecords: 100, maxBytes: 1 << 20, ttlMs: 1_000 });
    for (let index = 0; index < 5; index++) records.add("t/gone", `k${index}`, "f", BigInt(index + 1), 0);
    records.add("t/gone-too", "k0", "f", 1n, 0);
    records.add("t/stays", "k0", "f", 1n, 0);
    const kept = records.bytes - 5 * (160 + 2 * ("6:t/gonek0".length + "f".length));
    records.forgetConversation("t/gone");
    expect([records.size, records.sizeOf("t"), records.bytes]).toEqual([2, 2, kept]);
    expect(records.get("t/gone", "k0", 0)).toBeUndefined();
    expect(records.get("t/gone-too", "k0", 0)?.version).toBe(1n);
    expect(records.get("t/stays", "k0", 0)?.version).toBe(1n);
    records.forgetConversation("t/never");
    records.add("t/gone", "k0", "new", 1n, 0);
    expect(records.get("t/gone", "k0", 0)?.fingerprint).toBe("new");
  });

  it("keeps (conversation, key) pairs apart that concatenate alike", () => {
    const records = new IdempotencyRecords({ maxRecords: 100, maxBytes: 1 << 20, ttlMs: 10 });
    records.add("a:", "b", "first", 1n, 0);
    records.add("a", ":b", "second", 1n, 0);
    expect(records.get("a:", "b", 0)?.fingerprint).toBe("first");
    expect(records.get("a", ":b", 0)?.fingerprint).toBe("second");
  });

  it("forgets the oldest record of the tenant using the largest share, so one tenant never pushes out another's", () => {
    const records = new IdempotencyRecords({ maxRecords: 1_000, maxBytes: 100_000, ttlMs: 1_000 });
    records.add("b/conversation", "charge-once", "fb", 1n, 0);
    records.add("c/conversation", "c-1", "fc", 1n, 0);
    // Tenant a writes 40 times the byte bound, in keys of 2 KB each.
    for (let index = 0; index < 1_000; index++) records.add(`a/conversation-${index}`, `${index}-${"k".repeat(2_000)}`, "fa", 1n, 1);
    expect(records.get("b/conversation", "charge-once", 2)).toMatchObject({ fingerprint: "fb", version: 1n });
    expect(records.get("c/conversation", "c-1", 2)).toMatchObject({ fingerprint: "fc" });
    expect(records.bytes).toBeLessThanOrEqual(100_000);
    // a keeps its newest records, the oldest gone first.
    expect(records.get("a/conversation-999", `999-${"k".repeat(2_000)}`, 2)).toBeDefined();
    expect(records.get("a/conversation-0", `0-${"k".repeat(2_000)}`, 2)).toBeUndefined();
    expect(records.sizeOf("a")).toBe(records.size - 2);
    // By count too: b writes past a's share, and then b's oldest go.
    const counted = new IdempotencyRecords({ maxRecords: 10, maxBytes: 1 << 20, ttlMs: 1_000 });
    for (let index = 0; index < 4; index++) counted.add("a/x", `a${index}`, "f", 1n, 0);
    for (let index = 0; index < 20; index++) counted.add("b/x", `b${index}`, "f", 1n, 0);
    expect(counted.sizeOf("a")).toBe(4);
    expect(counted.sizeOf("b")).toBe(6);
    expect(counted.get("b/x", "b19", 0)).toBeDefined();
    expect(counted.get("b/x", "b13", 0)).toBeUndefined();
  });

  it("takes conversations without a tenant prefix as one tenant, the oldest first as before", () => {
    const records = new IdempotencyRecords({ maxRecords: 3, maxBytes: 1 << 20, ttlMs: 1_000 });
    for (const key of ["k1", "k2", "k3", "k4"]) records.add(`plain-${key}`, key, "f", 1n, 0);
    expect(records.get("plain-k1", "k1", 0)).toBeUndefined();
    expect(["k2", "k3", "k4"].map((key) => records.get(`plain-${key}`, key, 0)?.fingerprint)).toEqual(["f", "f", "f"]);
    expect(records.sizeOf("")).toBe(3);
  });

  it("keeps its share index small however often shares change (outdated entries dropped)", () => {
    const records = new IdempotencyRecords({ maxRecords: 50, maxBytes: 1 << 20, ttlMs: 1_000 });
    for (let index = 0; index < 10_000; index++) records.add(`t${index % 7}/c`, `k${index}`, "f", 1n, 0);
    expect(records.size).toBe(50);
    for (let tenant = 0; tenant < 7; tenant++) expect(records.sizeOf(`t${tenant}`)).toBeGreaterThanOrEqual(7);
    expect((records as unknown as { byShare: { size: number } }).byShare.size).toBeLessThanOrEqual(2 * 7 + 64 + 1);
  });
});
