import { create, toBinary } from "@bufbuild/protobuf";
import { expect, it } from "vitest";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import type { Change } from "#gen/contextd/v1/conversation_service_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import type { ConversationStore } from "../../src/store/conversation-store.js";
import type { StoreRetention } from "../../src/store/create-conversation-store.js";
import { HistoryBound, type HistoryBoundLimits } from "../../src/store/history-bound.js";
import { noUsage, type UsageReport } from "../../src/store/usage-ledger.js";
import { appendHistory, delta, textMessage } from "./fixtures.js";

// Retention's part of the store contract that reaches past a conversation's own keys
// (conversation-store.contract.test.ts runs it on every store, plain and encrypted): what a
// deleted or expired conversation leaves (its idempotency records and usage ledger go with it, the
// tenant's totals stay), and the tenants' default prune the engine keeps at every commit.

type Open = (now?: () => number, retention?: StoreRetention) => Promise<ConversationStore>;

/** Resolves once `check` holds, polling; fails after 20 s (no speed is asserted: an expiry and a sweep are awaited, not timed). */
async function eventually(check: () => Promise<boolean>): Promise<void> {
  for (let attempt = 0; attempt < 400; attempt++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error("the condition did not hold within 20 s");
}

let reportCounter = 0;
function report(): UsageReport {
  const n = ++reportCounter;
  return { reportId: `removal-${n}`, turnId: "", provider: 1, model: "gpt-4o", inputTokens: 100 + n, outputTokens: 10, cachedInputTokens: 0, compiledTokens: 90, reportedAtMs: 1_700_000_000_000 + n };
}

const bounds = { maxEntriesPerConversation: 1_000 };
const ttl = (idleTtlMs: bigint) => delta({ case: "setMetadata", value: { idleTtlMs } });
const ids = (state: ConversationState | undefined) => state!.history.map((message) => message.id);
const covered = (message: Message | undefined) => (message?.provenance?.kind.case === "summary" ? message.provenance.kind.value.coveredMessageIds : undefined);

function toolRound(prefix: string) {
  return delta({
    case: "appendToolRound",
    value: {
      assistant: create(MessageSchema, { id: `${prefix}-a`, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: `${prefix}-c`, name: "f", arguments: { data: "{}" } } } }] }),
      results: [create(MessageSchema, { id: `${prefix}-r`, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: `${prefix}-c`, name: "f", payload: { text: "r" } } } }] })],
    },
  });
}

/** The first change Watch delivers after `fromVersion`. */
async function changeAfter(store: ConversationStore, id: string, fromVersion: bigint): Promise<Change> {
  const abort = new AbortController();
  for await (const change of store.watch(id, fromVersion, abort.signal)) {
    abort.abort();
    return change;
  }
  throw new Error("watch ended without a change");
}

/**
 * `store()`: the suite's store; `open`: a new instance on the same backing store (for memory a new,
 * empty one), with retention settings; `sameProcess`: whether `open`'s instances share nothing
 * with `store()` (memory) so a second-process read is the suite store's own.
 */
export function conversationRemovalContract(store: () => ConversationStore, open: Open, freshId: (label: string) => string, sameProcess: boolean): void {
  it("a delete takes the conversation's idempotency records and usage ledger with it: a retry then commits anew, the tenant's totals keep the reports", async () => {
    const tenant = freshId("removal");
    const [id, other] = [`${tenant}/gone`, `${tenant}/stays`];
    const first = appendHistory(textMessage("u1", Role.USER, "hi"));
    const second = appendHistory(textMessage("a1", Role.ASSISTANT, "hello"));
    await store().commit(id, 0n, [first], "k1");
    await store().commit(id, 1n, [second], "k2");
    await store().commit(other, 0n, [first], "k1");
    await store().recordUsage(tenant, id, report(), bounds);
    await store().recordUsage(tenant, id, report(), bounds);
    await store().recordUsage(tenant, other, report(), bounds);
    const before = await store().listTenantUsage(tenant, "", 10);
    expect(before.conversations.map((row) => row.conversationId)).toEqual([id, other]);

    expect(await store().delete(id, 2n)).toBe(2n);
    expect(await store().readUsage(tenant, id)).toEqual({ totals: noUsage, entries: [] });
    const after = await store().listTenantUsage(tenant, "", 10);
    expect(after.conversations).toEqual([before.conversations[1]]);
    // Kept as history: the tenant did use those tokens (a bill does not shrink when a chat is deleted).
    expect(after.totals).toEqual(before.totals);
    expect((await store().readUsage(tenant, other)).entries).toHaveLength(1);

    // The retries of the deleted conversation's keyed commits are new commits: never its version 2.
    const retried = await store().commit(id, undefined, [first], "k1");
    expect(retried).toMatchObject({ version: 1n, replayed: false });
    expect(ids(retried.state)).toEqual(["u1"]);
    expect(await store().commit(id, 1n, [second], "k2")).toMatchObject({ version: 2n, replayed: false });
    // The new conversation's own record answers its retry, as always; the other conversation's stayed.
    expect(await store().commit(id, undefined, [second], "k2")).toMatchObject({ version: 2n, replayed: true });
    expect(await store().commit(other, undefined, [first], "k1")).toMatchObject({ version: 1n, replayed: true });

    // A second process sees the same (the memory store has none: its own reads).
    const fresh = sameProcess ? store() : await open();
    try {
      expect(await fresh.delete(id, undefined)).toBe(2n);
      expect(await fresh.commit(id, undefined, [second], "k2")).toMatchObject({ version: 1n, replayed: false });
      expect(await store().commit(id, undefined, [second], "k2")).toMatchObject({ version: 1n, replayed: true });
    } finally {
      if (fresh !== store()) await fresh.close();
    }
    // A ledger kept for an id never committed goes with a delete of it too.
    const unstored = `${tenant}/reported-only`;
    await store().recordUsage(tenant, unstored, report(), bounds);
    expect(await store().delete(unstored, undefined)).toBe(0n);
    expect(await store().readUsage(tenant, unstored)).toEqual({ totals: noUsage, entries: [] });
    await store().delete(id, undefined);
    await store().delete(other, undefined);
  });

  it("an expired conversation's idempotency records and usage ledger go too, a record written before it had a TTL included", async () => {
    const tenant = freshId("removal-expiry");
    const id = `${tenant}/brief`;
    const early = appendHistory(textMessage("u1", Role.USER, "before the TTL"));
    await store().commit(id, 0n, [early], "early");
    // Long enough that the reads below find it on a loaded machine; the test then waits it out.
    const late = [appendHistory(textMessage("u2", Role.USER, "with the TTL")), ttl(1_500n)];
    await store().commit(id, 1n, late, "late");
    await store().recordUsage(tenant, id, report(), bounds);
    const tenantTotals = (await store().listTenantUsage(tenant, "", 10)).totals;
    expect(tenantTotals.reports).toBe(1n);
    expect(await store().commit(id, undefined, [early], "early")).toMatchObject({ version: 1n, replayed: true });

    await eventually(async () => (await store().currentVersion(id)) === 0n);
    // Gone with the expiry's sweep (memory and Postgres also as a read or commit meets it).
    await eventually(async () => (await store().readUsage(tenant, id)).totals.reports === 0n);
    const after = await store().listTenantUsage(tenant, "", 10);
    expect(after.conversations).toEqual([]);
    expect(after.totals).toEqual(tenantTotals);
    expect(await store().commit(id, undefined, [early], "early")).toMatchObject({ version: 1n, replayed: false });
    expect(await store().commit(id, undefined, late, "late")).toMatchObject({ version: 2n, replayed: false });
    await store().delete(id, undefined);
  });

  it("a fork into an id whose earlier conversation expired takes none of that conversation's idempotency records", async () => {
    // No sweep: what the fork itself does is what is tested.
    const unswept = await open(undefined, { expirySweepMs: 0 });
    try {
      const tenant = freshId("removal-fork");
      const [source, target] = [`${tenant}/source`, `${tenant}/target`];
      const keyed = appendHistory(textMessage("t1", Role.USER, "before the TTL"));
      await unswept.commit(target, 0n, [keyed], "k");
      await unswept.commit(target, 1n, [ttl(300n)], "");
      await unswept.commit(source, 0n, [appendHistory(textMessage("s1", Role.USER, "the source"))], "");
      await eventually(async () => (await unswept.currentVersion(target)) === 0n);
      expect((await unswept.fork(source, undefined, target)).version).toBe(1n);
      expect(await unswept.commit(target, undefined, [keyed], "k")).toMatchObject({ version: 2n, replayed: false });
      expect(ids(await unswept.load(target))).toEqual(["s1", "t1"]);
      await unswept.delete(source, undefined);
      await unswept.delete(target, undefined);
    } finally {
      await unswept.close();
    }
  });

  historyBoundContract(open, freshId, sameProcess);
}

/** The tenants' default prune (`HistoryBound`): stores opened with it, every commit kept within it. */
function historyBoundContract(open: Open, freshId: (label: string) => string, sameProcess: boolean): void {
  const boundedStore = async (perTenant: [string, HistoryBoundLimits][], defaultLimits: HistoryBoundLimits = { maxMessages: 0, maxBytes: 0 }) =>
    open(undefined, { historyBound: new HistoryBound({ defaultLimits, perTenant: new Map(perTenant) }) });

  it("a tenant's prune bound applies at every commit past it as prune_history does (down to 90% of it): whole rounds, one summary naming what went, in the change Watch and the history see", async () => {
    const tenant = freshId("bound");
    const bounded = await boundedStore([[tenant, { maxMessages: 2, maxBytes: 0 }]], { maxMessages: 1_000, maxBytes: 0 });
    try {
      const id = `${tenant}/chat`;
      // u0, a tool round, u1: keeping the round would make 3 messages, so it goes whole with u0.
      const first = await bounded.commit(id, 0n, [appendHistory(textMessage("u0", Role.USER, "weather?")), toolRound("t0"), appendHistory(textMessage("u1", Role.USER, "thanks"))], "");
      const [summary, ...kept] = first.state!.history;
      expect(kept.map((message) => message.id)).toEqual(["u1"]);
      expect(covered(summary)).toEqual(["u0", "t0-a", "t0-r"]);
      const change = await changeAfter(bounded, id, 0n);
      expect(change.deltas.map((entry) => entry.operation.case)).toEqual(["appendMessages", "appendToolRound", "appendMessages", "pruneHistory"]);
      // Down to 90% of the bound (at least one below it), so the next appends need no prune.
      expect(change.deltas.at(-1)!.operation.value).toMatchObject({ maxMessages: 1, maxBytes: 0n });

      // Each later commit keeps the conversation within the bound, the older summary's coverage carried over.
      let state = first.state!;
      for (let turn = 2; turn <= 6; turn++) {
        state = (await bounded.commit(id, state.version, [appendHistory(textMessage(`u${turn}`, Role.USER, `turn ${turn}`))], "")).state!;
        expect(state.history.length).toBeLessThanOrEqual(3);
      }
      expect(ids(state).slice(1)).toEqual(["u5", "u6"]);
      expect(covered(state.history[0])).toEqual(["u0", "t0-a", "t0-r", "u1", "u2", "u3", "u4"]);
      // A commit within the bound adds no prune.
      const titled = await bounded.commit(id, state.version, [delta({ case: "setMetadata", value: { title: "kept" } })], "");
      expect((await changeAfter(bounded, id, state.version)).deltas.map((entry) => entry.operation.case)).toEqual(["setMetadata"]);
      expect(ids(titled.state)).toEqual(ids(state));

      // The change log rebuilds a pruned version exactly (its summary's id included).
      const rebuilt = await bounded.loadAt(id, 1n);
      expect(ids(rebuilt)).toEqual(ids(first.state));
      expect(toBinary(MessageSchema, rebuilt.history[0]!)).toEqual(toBinary(MessageSchema, summary!));
      // Another process reads what was stored (the memory store: its own reads).
      const reader = sameProcess ? bounded : await open();
      try {
        expect(ids(await reader.load(id))).toEqual(ids(titled.state));
      } finally {
        if (reader !== bounded) await reader.close();
      }
      await bounded.delete(id, undefined);
    } finally {
      await bounded.close();
    }
  });

  it("a prune bound in bytes keeps the newest messages that fit; a tenant's 0:0 has none whatever the default; other tenants take the default; a commit without the state is bounded too", async () => {
    const [bytesTenant, unbounded, defaulted] = [freshId("bound-bytes"), freshId("bound-none"), freshId("bound-default")];
    const message = (id: string) => textMessage(id, Role.USER, "x".repeat(200));
    const size = toBinary(MessageSchema, message("m0")).byteLength;
    const bounded = await boundedStore(
      [
        [bytesTenant, { maxMessages: 0, maxBytes: 3 * size }],
        [unbounded, { maxMessages: 0, maxBytes: 0 }],
      ],
      { maxMessages: 4, maxBytes: 0 },
    );
    try {
      const six = Array.from({ length: 6 }, (_, index) => message(`m${index}`));
      // Past 3 messages' bytes: pruned to 90% of them, so two stay.
      const bytes = await bounded.commit(`${bytesTenant}/c`, 0n, [appendHistory(...six)], "");
      expect(ids(bytes.state).slice(1)).toEqual(["m4", "m5"]);
      expect(covered(bytes.state!.history[0])).toEqual(["m0", "m1", "m2", "m3"]);
      expect(ids((await bounded.commit(`${unbounded}/c`, 0n, [appendHistory(...six)], "")).state)).toEqual(["m0", "m1", "m2", "m3", "m4", "m5"]);
      const byDefault = await bounded.commit(`${defaulted}/c`, 0n, [appendHistory(...six)], "");
      expect(ids(byDefault.state).slice(1)).toEqual(["m3", "m4", "m5"]);
      // Committed by a process holding no copy and not asking for the state back (what the Commit
      // RPC without include_state does: a store may plan it on the stored tail): bounded all the same.
      const writer = sameProcess ? bounded : await boundedStore([], { maxMessages: 4, maxBytes: 0 });
      try {
        const outcome = await writer.commit(`${defaulted}/c`, undefined, [appendHistory(message("m6"))], "", undefined, undefined, { withState: false });
        expect(outcome.version).toBe(2n);
      } finally {
        if (writer !== bounded) await writer.close();
      }
      const stored = await bounded.load(`${defaulted}/c`);
      expect(ids(stored).slice(1)).toEqual(["m3", "m4", "m5", "m6"]);
      // One more passes the bound: pruned to 3 again.
      expect(ids((await bounded.commit(`${defaulted}/c`, undefined, [appendHistory(message("m7"))], "")).state).slice(1)).toEqual(["m5", "m6", "m7"]);
      for (const id of [`${bytesTenant}/c`, `${unbounded}/c`, `${defaulted}/c`]) await bounded.delete(id, undefined);
    } finally {
      await bounded.close();
    }
  });

}
