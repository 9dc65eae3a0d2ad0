import { addReport, noUsage, type ConversationUsageRecord, type RecordedUsage, type TenantUsagePage, type UsageLedgerBounds, type UsageReport, type UsageSums } from "./usage-ledger.js";
import { SortedIds } from "./sorted-ids.js";

interface ConversationLedger {
  totals: UsageSums;
  /** Kept entries by report id, in record order (a Map iterates in insertion order): the oldest is the first. */
  entries: Map<string, UsageReport>;
}

interface TenantLedger {
  totals: UsageSums;
  conversations: Map<string, ConversationLedger>;
  /** The conversation ids in order, for pages that cost O(log n + page). */
  ids: SortedIds;
}

/**
 * The embedded store's usage ledger (`UsageLedgerStore`). A report runs between two awaits, which
 * makes it atomic in the process; dropping the oldest entry past the bound is O(1). Nothing
 * survives the process, like the conversations beside it.
 */
export class MemoryUsageLedger {
  private readonly tenants = new Map<string, TenantLedger>();

  record(tenant: string, conversationId: string, report: UsageReport, bounds: UsageLedgerBounds): RecordedUsage {
    let ledger = this.tenants.get(tenant);
    if (!ledger) {
      ledger = { totals: noUsage, conversations: new Map(), ids: new SortedIds() };
      this.tenants.set(tenant, ledger);
    }
    let conversation = ledger.conversations.get(conversationId);
    if (!conversation) {
      conversation = { totals: noUsage, entries: new Map() };
      ledger.conversations.set(conversationId, conversation);
      ledger.ids.add(conversationId);
    }
    const kept = conversation.entries.get(report.reportId);
    if (kept) return { duplicate: true, entry: kept, totals: conversation.totals };
    conversation.entries.set(report.reportId, report);
    for (const oldest of conversation.entries.keys()) {
      if (conversation.entries.size <= bounds.maxEntriesPerConversation) break;
      conversation.entries.delete(oldest);
    }
    conversation.totals = addReport(conversation.totals, report);
    ledger.totals = addReport(ledger.totals, report);
    return { duplicate: false, entry: report, totals: conversation.totals };
  }

  /**
   * Removes the conversation's entries and totals (its conversation was deleted or expired). The
   * tenant's totals keep its reports: they are what the tenant used, as a bill does.
   */
  forget(tenant: string, conversationId: string): void {
    const ledger = this.tenants.get(tenant);
    if (ledger?.conversations.delete(conversationId)) ledger.ids.delete(conversationId);
  }

  read(tenant: string, conversationId: string): ConversationUsageRecord {
    const conversation = this.tenants.get(tenant)?.conversations.get(conversationId);
    return conversation ? { totals: conversation.totals, entries: [...conversation.entries.values()] } : { totals: noUsage, entries: [] };
  }

  list(tenant: string, after: string, limit: number): TenantUsagePage {
    const ledger = this.tenants.get(tenant);
    if (!ledger) return { totals: noUsage, conversations: [], more: false };
    const ids = ledger.ids.page("", after, limit + 1);
    return {
      totals: ledger.totals,
      conversations: ids.slice(0, limit).map((conversationId) => ({ conversationId, totals: ledger.conversations.get(conversationId)!.totals })),
      more: ids.length > limit,
    };
  }
}
