import { Code, ConnectError } from "@connectrpc/connect";

/**
 * The usage ledger a store keeps (usage_ledger.proto, `ContextService.ReportUsage` with a
 * conversation): per conversation the reports of what each turn cost, per tenant their sums. Why
 * it is in the store: the ledger must be the same for every sidecar of a deployment and survive
 * restarts, like the conversations it belongs to; and one store per deployment is one place to
 * back up and to bound.
 *
 * A report is identified by (tenant, conversation id, report id). Recording one is atomic in
 * every store (one Lua script on Redis, one statement on Postgres, between two awaits in memory):
 * the duplicate check, the entry, the conversation's totals and the tenant's totals move together,
 * so the totals equal the sum of the recorded reports under any concurrency.
 *
 * Bounded: a conversation keeps its newest `maxEntriesPerConversation` entries; recording one
 * more drops the oldest, whose tokens stay in the totals (which are sums, never recomputed from
 * the entries). An entry is at most ~3.3 KB (its ids and model are length-limited, see
 * string-limits.ts), so a conversation's ledger is at most that times the bound. A retry is
 * recognised while its entry is kept: a retry after `maxEntriesPerConversation` newer reports of
 * the same conversation counts again.
 *
 * A conversation's ledger (entries and totals) goes when the conversation is deleted or expires,
 * removed by each store with it (`ConversationStore.delete`); its tenant's totals keep its reports,
 * as usage the tenant had.
 */
export interface UsageLedgerStore {
  /** Records `report` once per `report.reportId`; a report id already kept answers `duplicate` with the kept entry and counts nothing. */
  recordUsage(tenant: string, conversationId: string, report: UsageReport, bounds: UsageLedgerBounds): Promise<RecordedUsage>;
  /** The conversation's totals and kept entries, oldest first, from one snapshot; zero totals when it has none. */
  readUsage(tenant: string, conversationId: string): Promise<ConversationUsageRecord>;
  /** The tenant's totals and up to `limit` of its conversations' totals with ids greater than `after`, by id, from one snapshot. */
  listTenantUsage(tenant: string, after: string, limit: number): Promise<TenantUsagePage>;
}

/**
 * What each store's own ledger I/O does (memory-, redis-, postgres-usage-ledger.ts; the memory
 * one answers at once); the stores hand `UsageLedgerStore`'s calls to it.
 */
export interface UsageLedgerRecords {
  record(tenant: string, conversationId: string, report: UsageReport, bounds: UsageLedgerBounds): RecordedUsage | Promise<RecordedUsage>;
  read(tenant: string, conversationId: string): ConversationUsageRecord | Promise<ConversationUsageRecord>;
  list(tenant: string, after: string, limit: number): TenantUsagePage | Promise<TenantUsagePage>;
}

/** One report as the ledger keeps it. Token counts are integers from 0 to 2^53 - 1, validated by the caller. */
export interface UsageReport {
  reportId: string;
  turnId: string;
  /** The `Provider` enum's number. */
  provider: number;
  model: string;
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  compiledTokens: number;
  reportedAtMs: number;
}

/** Sums over reports; bigint because a sum of many 2^53 counts is past a double's integers (the stores keep 64-bit integers). */
export interface UsageSums {
  reports: bigint;
  inputTokens: bigint;
  outputTokens: bigint;
  cachedInputTokens: bigint;
  compiledTokens: bigint;
  firstReportedAtMs: bigint;
  lastReportedAtMs: bigint;
}

export interface RecordedUsage {
  duplicate: boolean;
  /** The kept entry: this report, or on a duplicate the one recorded first. */
  entry: UsageReport;
  /** The conversation's totals after the call. */
  totals: UsageSums;
}

export interface ConversationUsageRecord {
  totals: UsageSums;
  /** Oldest first. */
  entries: UsageReport[];
}

export interface TenantUsagePage {
  totals: UsageSums;
  conversations: { conversationId: string; totals: UsageSums }[];
  /** Whether conversations after the last one listed may exist. */
  more: boolean;
}

/** How much of the ledger a store keeps (`--usage-entries-per-conversation`), passed with each call like `CalibrationBounds`. */
export interface UsageLedgerBounds {
  maxEntriesPerConversation: number;
}

export const noUsage: UsageSums = {
  reports: 0n,
  inputTokens: 0n,
  outputTokens: 0n,
  cachedInputTokens: 0n,
  compiledTokens: 0n,
  firstReportedAtMs: 0n,
  lastReportedAtMs: 0n,
};

/** `sums` with `report` added: what every store does in its own language. */
export function addReport(sums: UsageSums, report: UsageReport): UsageSums {
  const at = BigInt(report.reportedAtMs);
  return {
    reports: sums.reports + 1n,
    inputTokens: sums.inputTokens + BigInt(report.inputTokens),
    outputTokens: sums.outputTokens + BigInt(report.outputTokens),
    cachedInputTokens: sums.cachedInputTokens + BigInt(report.cachedInputTokens),
    compiledTokens: sums.compiledTokens + BigInt(report.compiledTokens),
    firstReportedAtMs: sums.reports === 0n ? at : sums.firstReportedAtMs,
    lastReportedAtMs: at,
  };
}

/** Whether two reports say the same thing (a retry), whenever they arrived. */
export function sameReport(a: UsageReport, b: UsageReport): boolean {
  return (
    a.reportId === b.reportId &&
    a.turnId === b.turnId &&
    a.provider === b.provider &&
    a.model === b.model &&
    a.inputTokens === b.inputTokens &&
    a.outputTokens === b.outputTokens &&
    a.cachedInputTokens === b.cachedInputTokens &&
    a.compiledTokens === b.compiledTokens
  );
}

/** The text the Redis and Postgres stores keep per entry (JSON; every number below 2^53, so exact). */
export function encodeUsageEntry(report: UsageReport): string {
  return JSON.stringify([report.reportId, report.turnId, report.provider, report.model, report.inputTokens, report.outputTokens, report.cachedInputTokens, report.compiledTokens, report.reportedAtMs]);
}

/** An entry's stored text back; DATA_LOSS naming `where` when it is not one. */
export function decodeUsageEntry(text: string, where: string): UsageReport {
  let fields: unknown;
  try {
    fields = JSON.parse(text);
  } catch {
    fields = undefined;
  }
  const valid =
    Array.isArray(fields) &&
    fields.length === 9 &&
    [0, 1, 3].every((index) => typeof fields[index] === "string") &&
    [2, 4, 5, 6, 7, 8].every((index) => Number.isSafeInteger(fields[index]) && (fields[index] as number) >= 0);
  if (!valid) throw corruptUsage(where, `an entry holds "${text.slice(0, 60)}", not a usage report`);
  const [reportId, turnId, provider, model, inputTokens, outputTokens, cachedInputTokens, compiledTokens, reportedAtMs] = fields as [string, string, number, string, number, number, number, number, number];
  return { reportId, turnId, provider, model, inputTokens, outputTokens, cachedInputTokens, compiledTokens, reportedAtMs };
}

/** Sums from the seven stored integers in `UsageSums` order (strings from Redis or Postgres); DATA_LOSS naming `where` when one is not an integer. */
export function usageSumsOf(values: readonly (string | null | undefined)[], where: string): UsageSums {
  const numbers = values.map((value) => {
    if (value === null || value === undefined) return 0n;
    if (!/^-?\d{1,19}$/.test(value)) throw corruptUsage(where, `a total holds "${String(value).slice(0, 40)}", not an integer`);
    return BigInt(value);
  });
  const [reports, inputTokens, outputTokens, cachedInputTokens, compiledTokens, firstReportedAtMs, lastReportedAtMs] = numbers as [bigint, bigint, bigint, bigint, bigint, bigint, bigint];
  return { reports, inputTokens, outputTokens, cachedInputTokens, compiledTokens, firstReportedAtMs, lastReportedAtMs };
}

/** The stored names of the seven sums, in `UsageSums` order (Redis hash fields, Postgres columns). */
export const usageSumFields = ["reports", "input_tokens", "output_tokens", "cached_input_tokens", "compiled_tokens", "first_ms", "last_ms"] as const;

export function corruptUsage(where: string, detail: string): ConnectError {
  return new ConnectError(`usage ledger ${where} is corrupt in the store: ${detail}`, Code.DataLoss);
}
