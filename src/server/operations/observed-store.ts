import { SpanStatusCode } from "@opentelemetry/api";
import type { DeltaContext } from "../../core/deltas/delta-context.js";
import type { MessageListLineage } from "../../core/model/message-list-lineage.js";
import { ConnectError } from "@connectrpc/connect";
import type { Change } from "#gen/contextd/v1/conversation_service_pb";
import type { ConversationState, Delta } from "#gen/contextd/v1/state_pb";
import type { LearntCorrection, TokenCorrection } from "../../core/compile/token-calibration.js";
import type { CalibrationBounds, CalibrationRecordKey } from "../../store/calibration-store.js";
import type { CommitOptions, CommitOutcome, ConversationPage, ConversationStore, ForkOutcome, HeldCopies } from "../../store/conversation-store.js";
import type { SegmentWindow, WindowQuery } from "../../store/segment-window.js";
import type { ListQuery } from "../../store/conversation-listing.js";
import type { ConversationUsageRecord, RecordedUsage, TenantUsagePage, UsageLedgerBounds, UsageReport } from "../../store/usage-ledger.js";
import type { Metrics } from "./metrics.js";
import type { Tracing } from "./tracing.js";

/**
 * The store as the server uses it: every operation timed into
 * `contextd_store_operation_duration_seconds` and, when tracing is on, a child span of the call
 * that made it. Results and errors pass through unchanged. `watch` is a stream that lives as long
 * as its RPC, so it is neither timed nor spanned (the Watch RPC's own span covers it).
 */
export class ObservedStore implements ConversationStore {
  constructor(
    private readonly store: ConversationStore,
    private readonly metrics: Metrics,
    private readonly tracing: Tracing | undefined,
  ) {}

  get lineage(): MessageListLineage | undefined {
    return this.store.lineage;
  }

  get heldCopies(): HeldCopies | undefined {
    return this.store.heldCopies;
  }

  get strictToolRounds(): boolean | undefined {
    return this.store.strictToolRounds;
  }

  idLookupsFor(conversationId: string, base: ConversationState): Pick<DeltaContext, "lineage" | "messageIds" | "toolCallIds"> {
    return this.store.idLookupsFor?.(conversationId, base) ?? {};
  }

  load(conversationId: string): Promise<ConversationState> {
    return this.observe("load", conversationId, () => this.store.load(conversationId));
  }

  readWindow(conversationId: string, query: WindowQuery): Promise<SegmentWindow> {
    return this.observe("read_window", conversationId, () => this.store.readWindow(conversationId, query));
  }

  commit(
    conversationId: string,
    expectedVersion: bigint | undefined,
    deltas: Delta[],
    idempotencyKey: string,
    requestFingerprint?: string,
    messageIds?: readonly string[],
    options?: CommitOptions,
  ): Promise<CommitOutcome> {
    return this.observe("commit", conversationId, () => this.store.commit(conversationId, expectedVersion, deltas, idempotencyKey, requestFingerprint, messageIds, options));
  }

  currentVersion(conversationId: string): Promise<bigint> {
    return this.observe("current_version", conversationId, () => this.store.currentVersion(conversationId));
  }

  clear(conversationId: string, expectedVersion: bigint | undefined): Promise<bigint> {
    return this.observe("clear", conversationId, () => this.store.clear(conversationId, expectedVersion));
  }

  delete(conversationId: string, expectedVersion: bigint | undefined): Promise<bigint> {
    return this.observe("delete", conversationId, () => this.store.delete(conversationId, expectedVersion));
  }

  loadAt(conversationId: string, version: bigint): Promise<ConversationState> {
    return this.observe("load_at", conversationId, () => this.store.loadAt(conversationId, version));
  }

  rewind(conversationId: string, expectedVersion: bigint | undefined, toVersion: bigint, idempotencyKey: string): Promise<CommitOutcome> {
    return this.observe("rewind", conversationId, () => this.store.rewind(conversationId, expectedVersion, toVersion, idempotencyKey));
  }

  fork(conversationId: string, atVersion: bigint | undefined, newConversationId: string): Promise<ForkOutcome> {
    return this.observe("fork", conversationId, () => this.store.fork(conversationId, atVersion, newConversationId));
  }

  list(query: ListQuery): Promise<ConversationPage> {
    return this.observe("list", undefined, () => this.store.list(query));
  }

  watch(conversationId: string, fromVersion: bigint, signal: AbortSignal): AsyncIterable<Change> {
    return this.store.watch(conversationId, fromVersion, signal);
  }

  readCalibration(key: CalibrationRecordKey, nowMs: number, bounds: CalibrationBounds): Promise<TokenCorrection | undefined> {
    return this.observe("read_calibration", undefined, () => this.store.readCalibration(key, nowMs, bounds));
  }

  reportCalibration(key: CalibrationRecordKey, estimatedTokens: number, actualTokens: number, nowMs: number, bounds: CalibrationBounds): Promise<LearntCorrection> {
    return this.observe("report_calibration", undefined, () => this.store.reportCalibration(key, estimatedTokens, actualTokens, nowMs, bounds));
  }

  recordUsage(tenant: string, conversationId: string, report: UsageReport, bounds: UsageLedgerBounds): Promise<RecordedUsage> {
    return this.observe("record_usage", conversationId, () => this.store.recordUsage(tenant, conversationId, report, bounds));
  }

  readUsage(tenant: string, conversationId: string): Promise<ConversationUsageRecord> {
    return this.observe("read_usage", conversationId, () => this.store.readUsage(tenant, conversationId));
  }

  listTenantUsage(tenant: string, after: string, limit: number): Promise<TenantUsagePage> {
    return this.observe("list_tenant_usage", undefined, () => this.store.listTenantUsage(tenant, after, limit));
  }

  ping(): Promise<void> {
    return this.observe("ping", undefined, () => this.store.ping());
  }

  close(): Promise<void> {
    return this.store.close();
  }

  private async observe<T>(operation: string, conversationId: string | undefined, work: () => Promise<T>): Promise<T> {
    const span = this.tracing?.startStoreSpan(operation, conversationId);
    const started = performance.now();
    try {
      const result = await work();
      this.metrics.recordStoreOperation(operation, true, (performance.now() - started) / 1000);
      span?.end();
      return result;
    } catch (error) {
      this.metrics.recordStoreOperation(operation, false, (performance.now() - started) / 1000);
      if (span) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: ConnectError.from(error).rawMessage });
        span.end();
      }
      throw error;
    }
  }
}
