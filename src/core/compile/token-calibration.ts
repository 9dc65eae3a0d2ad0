import { create } from "@bufbuild/protobuf";
import { TokenCalibrationSchema, type EstimatorKind, type TokenCalibration } from "#gen/contextd/v1/compile_pb";
import type { Provider } from "#gen/contextd/v1/message_pb";

/**
 * Calibrated token counts (compile.proto `TokenCalibration`). Why it exists: estimates are off in
 * ways that repeat for a provider and model (tool schemas, images at 85 tokens, framing), and only
 * the provider's own `usage` says by how much. The caller reports it; the learnt ratio
 * actual / estimated scales the budget's limit. This file is the arithmetic, pure; the application
 * keeps the corrections (`UsageCalibration`) and hands the one for a compile to the core through
 * `CompileContext.calibration`.
 */

/** The smallest and largest ratio one report may contribute; a correction stays within them. */
export const minCorrection = 0.25;
export const maxCorrection = 4;
/** A plain mean over the first reports, then each new report weighs 1/this (an exponential mean). */
export const calibrationWindow = 10;
/**
 * The most one report moves a correction: to at most this times, and at least 1/this of, the one
 * before. Without it the first report of a key weighed 1, so one report of 4000:1 (any client's,
 * with auth off) moved every caller's correction for that model straight to `maxCorrection`, for
 * the TTL. Estimators are off by less than this (0.7 to 1.5 on the providers' own counts), so an
 * honest first report still sets the ratio it saw.
 */
export const maxCorrectionStep = 2;

/** What a compile's budget is corrected by, and how well that has predicted so far. */
export interface TokenCorrection {
  /** actual / estimated, within [minCorrection, maxCorrection]; 1 without reports. */
  factor: number;
  /** Reports learnt from. */
  reports: number;
  /** Weighted mean of |estimate × correction before the report − actual| / actual; 0 without reports. */
  meanAbsoluteRelativeError: number;
  /**
   * Set when the correction may be out of date because the store could not be read: what failed.
   * The correction is then the last one this sidecar knew, or 1.
   */
  storeReadError?: string;
}

/** The key corrections are learnt for (the tenant is the application's part of it). */
export interface CalibrationKey {
  provider: Provider;
  model: string;
  estimator: EstimatorKind;
}

/**
 * The correction in force for a key (`uncorrected` when no report arrived for it). A promise when
 * the application has to read it first (its cache of the stored corrections has no fresh copy).
 */
export type CalibrationLookup = (key: CalibrationKey) => TokenCorrection | Promise<TokenCorrection>;

/** A correction after one more report, and that report's relative error against the one before. */
export interface LearntCorrection {
  correction: TokenCorrection;
  relativeError: number;
}

export const uncorrected: TokenCorrection = { factor: 1, reports: 0, meanAbsoluteRelativeError: 0 };

/**
 * The limit the budget compares its estimates with: floor(limit / factor), 0 (no limit) kept. A
 * request fits when its estimate E ≤ floor(limit / factor), i.e. when E × factor ≤ limit; the same
 * factor and limit always give the same figure. At least 1, so a limit never turns into "none".
 */
export function calibratedLimit(limit: number, factor: number): number {
  if (limit === 0 || factor === 1) return limit;
  return Math.max(1, Math.floor(limit / factor));
}

/** What the provider is predicted to count for an estimate: ceil(estimate × factor). */
export function correctedTokens(estimated: number, factor: number): number {
  return factor === 1 ? estimated : Math.ceil(estimated * factor);
}

/** The correction after one more report, and that report's relative error against `previous`. */
export function learnCorrection(previous: TokenCorrection, estimatedTokens: number, actualTokens: number): LearntCorrection {
  const ratio = Math.min(maxCorrection, Math.max(minCorrection, actualTokens / estimatedTokens));
  const relativeError = Math.abs(estimatedTokens * previous.factor - actualTokens) / actualTokens;
  const reports = previous.reports + 1;
  const weight = 1 / Math.min(reports, calibrationWindow);
  const mean = previous.factor + weight * (ratio - previous.factor);
  const meanAbsoluteRelativeError = previous.meanAbsoluteRelativeError + weight * (relativeError - previous.meanAbsoluteRelativeError);
  // The stores repeat these operations in this order (redis-scripts.ts, postgres-schema.ts).
  const stepped = Math.min(previous.factor * maxCorrectionStep, Math.max(previous.factor / maxCorrectionStep, mean));
  return { correction: { factor: Math.min(maxCorrection, Math.max(minCorrection, stepped)), reports, meanAbsoluteRelativeError }, relativeError };
}

/**
 * What a result (or a target's projection) says about its calibration: the key, the budget's
 * estimate of the whole request and its own limit, and the correction applied.
 */
export function calibrationReport(key: CalibrationKey, correction: TokenCorrection, estimatedTokens: number, requestedLimit: number): TokenCalibration {
  return create(TokenCalibrationSchema, {
    provider: key.provider,
    model: key.model,
    estimator: key.estimator,
    estimatedTokens: BigInt(estimatedTokens),
    correction: correction.factor,
    correctedTokens: BigInt(correctedTokens(estimatedTokens, correction.factor)),
    requestedLimit: BigInt(requestedLimit),
    reports: BigInt(correction.reports),
    meanAbsoluteRelativeError: correction.meanAbsoluteRelativeError,
    storeReadError: correction.storeReadError ?? "",
  });
}
