import { Code, ConnectError } from "@connectrpc/connect";
import { EstimatorKind } from "../../gen/ts/contextd/v1/compile_pb.js";
import type { ReportUsageRequest, ReportUsageResponse } from "../../gen/ts/contextd/v1/context_service_pb.js";
import { Provider } from "../../gen/ts/contextd/v1/message_pb.js";
import { maxBudgetTokens } from "../core/compile/budget.js";
import { learnCorrection, uncorrected, type CalibrationKey, type TokenCorrection } from "../core/compile/token-calibration.js";

/** The longest model name a report may carry, in UTF-8 bytes. */
export const maxCalibrationModelBytes = 256;

/**
 * The calibration corrections of one sidecar (`ContextService.ReportUsage`, compile.proto
 * `TokenCalibration`), one per (tenant, provider, model, estimator). Why it exists: the budget's
 * estimates are off by a repeatable ratio per provider and model, which only provider usage
 * reports reveal. Bounded by the number of keys (`--calibration-keys`), the least recently used
 * forgotten first; a key costs ~150 bytes (149 measured for 100,000 keys with 20-character model
 * names, more for names up to the 256-byte limit), so the default 1,024 keys is ~150 KB. Kept in
 * memory only: a restart or another sidecar starts again from 1 (docs/context-editing.md says
 * why). A tenant's reports only correct that tenant's compiles.
 */
export class UsageCalibration {
  private readonly corrections = new Map<string, TokenCorrection>();

  constructor(private readonly maxKeys: number) {}

  /** The correction in force for `tenant`'s `key`; `uncorrected` before any report. */
  correction(tenant: string, key: CalibrationKey): TokenCorrection {
    const id = keyOf(tenant, key);
    const found = this.corrections.get(id);
    if (!found) return uncorrected;
    // Most recently used last: a Map iterates in insertion order.
    this.corrections.delete(id);
    this.corrections.set(id, found);
    return found;
  }

  /** Learns from one report; INVALID_ARGUMENT naming the field when one is out of range, nothing learnt. */
  report(tenant: string, request: ReportUsageRequest): ReportUsageResponse {
    if (request.provider === Provider.UNSPECIFIED || Provider[request.provider] === undefined) {
      throw new ConnectError(`report_usage.provider: a known provider is required, got ${request.provider}`, Code.InvalidArgument);
    }
    if (request.estimator === EstimatorKind.UNSPECIFIED || EstimatorKind[request.estimator] === undefined) {
      throw new ConnectError(`report_usage.estimator: a known estimator is required (TokenCalibration.estimator), got ${request.estimator}`, Code.InvalidArgument);
    }
    const modelBytes = Buffer.byteLength(request.model, "utf8");
    if (modelBytes > maxCalibrationModelBytes) {
      throw new ConnectError(`report_usage.model has ${modelBytes} bytes, at most ${maxCalibrationModelBytes} are allowed`, Code.InvalidArgument);
    }
    const tokens = (value: bigint, name: string): number => {
      if (value < 1n || value > BigInt(maxBudgetTokens)) {
        throw new ConnectError(`report_usage.${name} must be from 1 to ${maxBudgetTokens}, got ${value}`, Code.InvalidArgument);
      }
      return Number(value);
    };
    const estimated = tokens(request.estimatedTokens, "estimated_tokens");
    const actual = tokens(request.actualInputTokens, "actual_input_tokens");
    const key: CalibrationKey = { provider: request.provider, model: request.model, estimator: request.estimator };
    const learnt = learnCorrection(this.correction(tenant, key), estimated, actual);
    const id = keyOf(tenant, key);
    this.corrections.delete(id);
    this.corrections.set(id, learnt.correction);
    for (const [oldest] of this.corrections) {
      if (this.corrections.size <= this.maxKeys) break;
      this.corrections.delete(oldest);
    }
    return {
      $typeName: "contextd.v1.ReportUsageResponse",
      correction: learnt.correction.factor,
      reports: BigInt(learnt.correction.reports),
      meanAbsoluteRelativeError: learnt.correction.meanAbsoluteRelativeError,
      relativeError: learnt.relativeError,
    };
  }

  /** How many keys have a correction now. */
  get size(): number {
    return this.corrections.size;
  }
}

/** One string per key; the model goes last, so no separator inside it can make two keys equal. */
function keyOf(tenant: string, key: CalibrationKey): string {
  return `${key.provider}\u0000${key.estimator}\u0000${tenant.length}\u0000${tenant}\u0000${key.model}`;
}
