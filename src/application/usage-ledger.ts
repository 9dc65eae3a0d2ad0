import { Code, ConnectError } from "@connectrpc/connect";
import { EstimatorKind } from "#gen/contextd/v1/compile_pb";
import type { ReportUsageRequest } from "#gen/contextd/v1/context_service_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import type { GetUsageResponse, ListTenantUsageRequest, ListTenantUsageResponse, UsageEntry, UsageTotals } from "#gen/contextd/v1/usage_ledger_pb";
import { maxBudgetTokens } from "../core/compile/max-budget-tokens.js";
import { tenantOf } from "../core/model/conversation-tenant.js";
import { stringLimits } from "../core/model/string-limits.js";
import type { ConversationStore } from "../store/conversation-store.js";
import { decodePageToken, encodePageToken } from "../store/page-token.js";
import { requireStorableText } from "../store/store-errors.js";
import { sameReport, type RecordedUsage, type UsageLedgerBounds, type UsageReport, type UsageSums } from "../store/usage-ledger.js";

/** ListTenantUsage's page size when the request gives none, and its largest. */
export const defaultTenantUsagePage = 100;
export const maxTenantUsagePage = 1_000;

/**
 * The usage ledger as the RPCs use it (`ReportUsage` with a conversation, `GetUsage`,
 * `ListTenantUsage`): a report checked whole before anything is stored, the tenant a
 * conversation's ledger belongs to, the store's sums as API messages. The store records
 * (`UsageLedgerStore`); this holds nothing between calls.
 *
 * A conversation's ledger belongs to the tenant its id names: the text before its first "/"
 * ("" without one). Tenant names hold no "/" (config.ts), and a tenant's token may only name ids
 * starting with "<tenant>/", so a tenant's token and an unscoped one reach the same ledger.
 */
export class UsageLedger {
  constructor(private readonly options: { store: ConversationStore; bounds: UsageLedgerBounds; now?: () => number }) {}

  /** Records one report; INVALID_ARGUMENT naming the field before anything is stored, and for a report id reused with other values. */
  async record(request: ReportUsageRequest): Promise<RecordedUsage> {
    const report = this.reportOf(request);
    const recorded = await this.options.store.recordUsage(tenantOf(request.conversationId), request.conversationId, report, this.options.bounds);
    if (recorded.duplicate && !sameReport(recorded.entry, report)) {
      throw new ConnectError(
        `report_usage.report_id "${report.reportId}" of conversation "${request.conversationId}" was already recorded with other values (a retry must repeat the report it retries)`,
        Code.InvalidArgument,
      );
    }
    return recorded;
  }

  async read(conversationId: string): Promise<GetUsageResponse> {
    if (conversationId === "") throw new ConnectError("get_usage.conversation_id is required", Code.InvalidArgument);
    requireStorableText("get_usage.conversation_id", conversationId);
    const { totals, entries } = await this.options.store.readUsage(tenantOf(conversationId), conversationId);
    return {
      $typeName: "contextd.v1.GetUsageResponse",
      conversationId,
      totals: totalsMessage(totals),
      entries: entries.map(entryMessage),
      entriesRolledUp: totals.reports - BigInt(entries.length),
    };
  }

  /** `callerTenant`: the token's tenant ("" = unscoped or no auth), which alone may name another. */
  async listTenant(callerTenant: string, request: ListTenantUsageRequest): Promise<ListTenantUsageResponse> {
    const tenant = request.tenant === "" ? callerTenant : request.tenant;
    if (callerTenant !== "" && tenant !== callerTenant) {
      throw new ConnectError(`list_tenant_usage.tenant "${request.tenant}" is outside tenant "${callerTenant}": a tenant's token reads its own usage only`, Code.PermissionDenied);
    }
    requireStorableText("list_tenant_usage.tenant", tenant);
    if (request.pageSize < 0 || request.pageSize > maxTenantUsagePage) {
      throw new ConnectError(`list_tenant_usage.page_size must be from 0 to ${maxTenantUsagePage}, got ${request.pageSize}`, Code.InvalidArgument);
    }
    const limit = request.pageSize === 0 ? defaultTenantUsagePage : request.pageSize;
    const after = decodePageToken(request.pageToken);
    const page = await this.options.store.listTenantUsage(tenant, after, limit);
    const last = page.conversations.at(-1);
    return {
      $typeName: "contextd.v1.ListTenantUsageResponse",
      tenant,
      totals: totalsMessage(page.totals),
      conversations: page.conversations.map(({ conversationId, totals }) => ({ $typeName: "contextd.v1.ConversationUsage", conversationId, totals: totalsMessage(totals) })),
      nextPageToken: page.more && last ? encodePageToken(last.conversationId) : "",
    };
  }

  private reportOf(request: ReportUsageRequest): UsageReport {
    // Every field the calibration reads is checked here too: a report is recorded only when the
    // calibration will take it, so nothing is half-applied.
    if (request.provider === Provider.UNSPECIFIED || Provider[request.provider] === undefined) {
      throw new ConnectError(`report_usage.provider: a known provider is required, got ${request.provider}`, Code.InvalidArgument);
    }
    if (request.estimator === EstimatorKind.UNSPECIFIED || EstimatorKind[request.estimator] === undefined) {
      throw new ConnectError(`report_usage.estimator: a known estimator is required (TokenCalibration.estimator), got ${request.estimator}`, Code.InvalidArgument);
    }
    if (request.reportId === "") {
      throw new ConnectError("report_usage.report_id is required with conversation_id: it identifies the report, so a retry counts once", Code.InvalidArgument);
    }
    for (const [field, text, limit] of [["model", request.model, stringLimits.model], ["conversation_id", request.conversationId, stringLimits.id], ["turn_id", request.turnId, stringLimits.id], ["report_id", request.reportId, stringLimits.idempotencyKey]] as const) {
      const bytes = Buffer.byteLength(text, "utf8");
      if (bytes > limit) throw new ConnectError(`report_usage.${field} has ${bytes} bytes, at most ${limit} are allowed`, Code.InvalidArgument);
      requireStorableText(`report_usage.${field}`, text);
    }
    const tokens = (value: bigint, name: string, least: bigint): number => {
      if (value < least || value > BigInt(maxBudgetTokens)) {
        throw new ConnectError(`report_usage.${name} must be from ${least} to ${maxBudgetTokens}, got ${value}`, Code.InvalidArgument);
      }
      return Number(value);
    };
    const inputTokens = tokens(request.actualInputTokens, "actual_input_tokens", 1n);
    const cachedInputTokens = tokens(request.cachedInputTokens, "cached_input_tokens", 0n);
    if (cachedInputTokens > inputTokens) {
      throw new ConnectError(`report_usage.cached_input_tokens (${cachedInputTokens}) must be at most actual_input_tokens (${inputTokens}), which counts them`, Code.InvalidArgument);
    }
    return {
      reportId: request.reportId,
      turnId: request.turnId,
      provider: request.provider,
      model: request.model,
      inputTokens,
      outputTokens: tokens(request.outputTokens, "output_tokens", 0n),
      cachedInputTokens,
      compiledTokens: tokens(request.estimatedTokens, "estimated_tokens", 1n),
      reportedAtMs: (this.options.now ?? Date.now)(),
    };
  }
}

export function totalsMessage(sums: UsageSums): UsageTotals {
  return {
    $typeName: "contextd.v1.UsageTotals",
    reports: sums.reports,
    inputTokens: sums.inputTokens,
    outputTokens: sums.outputTokens,
    cachedInputTokens: sums.cachedInputTokens,
    compiledTokens: sums.compiledTokens,
    firstReportedAtUnixMs: sums.firstReportedAtMs,
    lastReportedAtUnixMs: sums.lastReportedAtMs,
  };
}

function entryMessage(report: UsageReport): UsageEntry {
  return {
    $typeName: "contextd.v1.UsageEntry",
    reportId: report.reportId,
    turnId: report.turnId,
    provider: report.provider,
    model: report.model,
    inputTokens: BigInt(report.inputTokens),
    outputTokens: BigInt(report.outputTokens),
    cachedInputTokens: BigInt(report.cachedInputTokens),
    compiledTokens: BigInt(report.compiledTokens),
    reportedAtUnixMs: BigInt(report.reportedAtMs),
  };
}
