import type { CalibrationKey, LearntCorrection, TokenCorrection } from "../core/compile/token-calibration.js";

/**
 * The token calibration records a store keeps (compile.proto `TokenCalibration`,
 * `ContextService.ReportUsage`): per (tenant, provider, model, estimator) the correction learnt
 * from provider usage reports. Why it is in the store: kept in each sidecar's memory, a restart,
 * a second sidecar or another `--workers` process started again from 1, so the budgets of one
 * deployment disagreed. Part of every `ConversationStore` (the record lives where a deployment's
 * conversations live, and one store per deployment means one place to back up and to bound);
 * the application reads it through a short-lived cache (`UsageCalibration`), never per compile.
 *
 * A report is applied atomically by the store: the stored correction is read, `learnCorrection`'s
 * arithmetic applied and the result written in one step (one Lua script on Redis, one statement
 * on Postgres, between two awaits in memory), so concurrent reports from several sidecars are all
 * counted. The Redis and Postgres stores compute it in their own language with the same IEEE
 * double operations in the same order; the contract suite checks they give bit-identical results.
 *
 * Bounded two ways (`CalibrationBounds`): a key not reported for `ttlMs` is forgotten, and a
 * tenant keeps at most `maxKeysPerTenant` keys, the least recently reported forgotten first when
 * a report adds one more. Both are passed with each call, so the store holds no calibration
 * configuration of its own.
 */
export interface CalibrationStore {
  /** The stored correction of `key`, or undefined when none was reported in the last `bounds.ttlMs`. */
  readCalibration(key: CalibrationRecordKey, nowMs: number, bounds: CalibrationBounds): Promise<TokenCorrection | undefined>;
  /**
   * Learns from one report (`learnCorrection`) atomically, and answers the correction after it.
   * The tokens are validated by the caller: integers from 1 to 2^53 - 1.
   */
  reportCalibration(key: CalibrationRecordKey, estimatedTokens: number, actualTokens: number, nowMs: number, bounds: CalibrationBounds): Promise<LearntCorrection>;
}

/** A calibration key with the tenant it belongs to ("" = unscoped). */
export interface CalibrationRecordKey extends CalibrationKey {
  tenant: string;
}

/** How much calibration a store keeps (`--calibration-keys-per-tenant`, `--calibration-ttl-days`). */
export interface CalibrationBounds {
  maxKeysPerTenant: number;
  /** A key not reported for this long is forgotten. */
  ttlMs: number;
}

/** One Redis field name / Postgres key part per (provider, estimator, model); the model last, so no model can make two keys equal. */
export function calibrationField(key: CalibrationKey): string {
  return `${key.provider}:${key.estimator}:${key.model}`;
}
