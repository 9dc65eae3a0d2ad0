import { expect, it } from "vitest";
import type { ConversationStore } from "../../src/store/conversation-store.js";
import { noUsage, type UsageReport, type UsageSums } from "../../src/store/usage-ledger.js";

// The usage ledger's part of the store contract (conversation-store.contract.test.ts runs it on
// every store): exact totals, one count per report id, the entry bound, tenant pages, and exact
// sums under concurrent reports from several store instances (several connections).

let reportCounter = 0;
function report(overrides: Partial<UsageReport> = {}): UsageReport {
  const n = ++reportCounter;
  return { reportId: `r-${n}`, turnId: `t-${n}`, provider: 1, model: "gpt-4o", inputTokens: 100 + n, outputTokens: 10 + n, cachedInputTokens: n % 50, compiledTokens: 90 + n, reportedAtMs: 1_700_000_000_000 + n, ...overrides };
}

function sumOf(reports: UsageReport[]): Omit<UsageSums, "firstReportedAtMs" | "lastReportedAtMs"> {
  const total = (pick: (report: UsageReport) => number) => reports.reduce((sum, entry) => sum + BigInt(pick(entry)), 0n);
  return {
    reports: BigInt(reports.length),
    inputTokens: total((entry) => entry.inputTokens),
    outputTokens: total((entry) => entry.outputTokens),
    cachedInputTokens: total((entry) => entry.cachedInputTokens),
    compiledTokens: total((entry) => entry.compiledTokens),
  };
}

const sums = ({ firstReportedAtMs: _first, lastReportedAtMs: _last, ...rest }: UsageSums) => rest;

/**
 * `store()`: the suite's store; `another()`: a second instance on the same backing store (a new
 * connection), or the same store for the memory one, which nothing else can reach.
 */
export function usageLedgerContract(store: () => ConversationStore, another: () => Promise<ConversationStore>, freshId: (label: string) => string): void {
  const bounds = { maxEntriesPerConversation: 1_000 };

  it("usage ledger: records reports, reads totals and entries oldest first, zero for a conversation without any", async () => {
    const tenant = freshId("usage-tenant");
    const id = `${tenant}/chat`;
    expect(await store().readUsage(tenant, id)).toEqual({ totals: noUsage, entries: [] });
    const reports = [report(), report({ turnId: "", model: "claude-opus-4" }), report({ outputTokens: 0, cachedInputTokens: 0 })];
    for (const entry of reports) {
      const recorded = await store().recordUsage(tenant, id, entry, bounds);
      expect(recorded.duplicate).toBe(false);
      expect(recorded.entry).toEqual(entry);
    }
    const read = await store().readUsage(tenant, id);
    expect(read.entries).toEqual(reports);
    expect(sums(read.totals)).toEqual(sumOf(reports));
    expect(read.totals.firstReportedAtMs).toBe(BigInt(reports[0]!.reportedAtMs));
    expect(read.totals.lastReportedAtMs).toBe(BigInt(reports[2]!.reportedAtMs));
    // Another tenant's ledger of the same id is its own.
    expect(await store().readUsage(`${tenant}-other`, id)).toEqual({ totals: noUsage, entries: [] });
  });

  it("usage ledger: a report id already kept counts once and answers the entry kept", async () => {
    const tenant = freshId("usage-retry");
    const id = `${tenant}/chat`;
    const first = report();
    await store().recordUsage(tenant, id, first, bounds);
    const retry = await store().recordUsage(tenant, id, { ...first, reportedAtMs: first.reportedAtMs + 5_000 }, bounds);
    expect(retry.duplicate).toBe(true);
    expect(retry.entry).toEqual(first);
    expect(sums(retry.totals)).toEqual(sumOf([first]));
    // The same report id in another conversation is another report.
    expect((await store().recordUsage(tenant, `${tenant}/other`, first, bounds)).duplicate).toBe(false);
    expect(sums((await store().readUsage(tenant, id)).totals)).toEqual(sumOf([first]));
  });

  it("usage ledger: keeps the newest entries up to the bound, the older ones counted in the totals", async () => {
    const tenant = freshId("usage-bound");
    const id = `${tenant}/chat`;
    const reports = Array.from({ length: 7 }, () => report());
    for (const entry of reports) await store().recordUsage(tenant, id, entry, { maxEntriesPerConversation: 3 });
    const read = await store().readUsage(tenant, id);
    expect(read.entries).toEqual(reports.slice(4));
    expect(sums(read.totals)).toEqual(sumOf(reports));
    expect(read.totals.firstReportedAtMs).toBe(BigInt(reports[0]!.reportedAtMs));
    // A kept report is still recognised; one dropped past the bound is a new report (documented).
    expect((await store().recordUsage(tenant, id, reports[6]!, { maxEntriesPerConversation: 3 })).duplicate).toBe(true);
    expect((await store().recordUsage(tenant, id, reports[0]!, { maxEntriesPerConversation: 3 })).duplicate).toBe(false);
  });

  it("usage ledger: a tenant's totals cover every conversation, its conversations paged by id", async () => {
    const tenant = freshId("usage-pages");
    const ids = ["c", "a", "e", "b", "d"].map((suffix) => `${tenant}/${suffix}`);
    const all: UsageReport[] = [];
    for (const [index, id] of ids.entries()) {
      for (let n = 0; n <= index; n++) {
        const entry = report();
        all.push(entry);
        await store().recordUsage(tenant, id, entry, bounds);
      }
    }
    await store().recordUsage(`${tenant}-neighbour`, `${tenant}-neighbour/x`, report(), bounds);
    const seen: string[] = [];
    let after = "";
    for (;;) {
      const page = await store().listTenantUsage(tenant, after, 2);
      expect(sums(page.totals)).toEqual(sumOf(all));
      seen.push(...page.conversations.map((entry) => entry.conversationId));
      for (const entry of page.conversations) {
        expect(sums(entry.totals)).toEqual(sums((await store().readUsage(tenant, entry.conversationId)).totals));
      }
      if (!page.more) break;
      expect(page.conversations).toHaveLength(2);
      after = page.conversations.at(-1)!.conversationId;
    }
    expect(seen).toEqual([...ids].sort());
    expect(await store().listTenantUsage(freshId("usage-none"), "", 10)).toEqual({ totals: noUsage, conversations: [], more: false });
  });

  it("usage ledger: totals equal the sum of the reports under 16 concurrent clients x 50 reports, each sent twice", { timeout: 60_000 }, async () => {
    const tenant = freshId("usage-concurrent");
    const conversations = [`${tenant}/a`, `${tenant}/b`, `${tenant}/c`];
    // Four store instances (four connections, or one memory store) carry 16 clients.
    const instances = [store(), await another(), await another(), await another()];
    try {
      const perConversation = new Map<string, UsageReport[]>(conversations.map((id) => [id, []]));
      const clients = Array.from({ length: 16 }, (_, client) => {
        const reports = Array.from({ length: 50 }, (_, n) => {
          const entry = report({ reportId: `client-${client}-report-${n}`, inputTokens: 1_000 + client * 50 + n, outputTokens: client + n, cachedInputTokens: n, compiledTokens: 900 + n });
          perConversation.get(conversations[(client + n) % 3]!)!.push(entry);
          return entry;
        });
        return (async () => {
          const instance = instances[client % instances.length]!;
          for (const [n, entry] of reports.entries()) {
            const id = conversations[(client + n) % 3]!;
            // The report and its retry race each other: exactly one of them counts.
            const outcomes = await Promise.all([instance.recordUsage(tenant, id, entry, bounds), instances[(client + 1) % instances.length]!.recordUsage(tenant, id, entry, bounds)]);
            expect(outcomes.filter((outcome) => outcome.duplicate)).toHaveLength(1);
          }
        })();
      });
      await Promise.all(clients);
      const everything = [...perConversation.values()].flat();
      expect(everything).toHaveLength(800);
      for (const [id, reports] of perConversation) {
        const read = await store().readUsage(tenant, id);
        expect(sums(read.totals)).toEqual(sumOf(reports));
        expect(read.entries).toHaveLength(reports.length);
      }
      const tenantPage = await store().listTenantUsage(tenant, "", 10);
      expect(sums(tenantPage.totals)).toEqual(sumOf(everything));
    } finally {
      await Promise.all(instances.slice(1).filter((instance) => instance !== store()).map((instance) => instance.close()));
    }
  });

  it("usage ledger: keeps any conversation id and tenant apart, braces, colons and percent signs included", async () => {
    const tenant = `${freshId("usage-keys")}}:{x%`;
    const ids = [`${tenant}/a}:{b`, `${tenant}/a`, `${tenant}/a:entries`];
    for (const id of ids) await store().recordUsage(tenant, id, report(), bounds);
    for (const id of ids) expect((await store().readUsage(tenant, id)).entries).toHaveLength(1);
    expect((await store().listTenantUsage(tenant, "", 10)).conversations.map((entry) => entry.conversationId)).toEqual([...ids].sort());
  });
}
