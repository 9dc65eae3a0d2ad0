import { Code, ConnectError } from "@connectrpc/connect";
import { EstimatorKind } from "#gen/contextd/v1/compile_pb";
import type { ReportUsageRequest, ReportUsageResponse } from "#gen/contextd/v1/context_service_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { maxBudgetTokens } from "../core/compile/max-budget-tokens.js";
import { uncorrected, type CalibrationKey, type TokenCorrection } from "../core/compile/token-calibration.js";
import type { CalibrationBounds, CalibrationRecordKey, CalibrationStore } from "../store/calibration-store.js";
import { isStorableText, requireStorableText } from "../store/store-errors.js";
import { stringLimits } from "../core/model/string-limits.js";

/** The longest model name a report may carry, in UTF-8 bytes. */
export const maxCalibrationModelBytes = stringLimits.model;

/** What the store keeps of calibration, and how long a copy read from it is used. */
export interface CalibrationStorage {
  /** What the store keeps (`--calibration-keys-per-tenant`, `--calibration-ttl-days`). */
  bounds: CalibrationBounds;
  /** How long a correction read from the store is used before it is read again (`--calibration-refresh-ms`). */
  refreshMs: number;
}

/** The flags' defaults (docs/operations.md). */
export const defaultCalibrationStorage: CalibrationStorage = { bounds: { maxKeysPerTenant: 256, ttlMs: 30 * 86_400_000 }, refreshMs: 10_000 };

/**
 * How long a compile waits for a store read of its correction before it goes on with the last one
 * known (the read goes on and updates the cache when it answers). A Redis read takes ~30 µs and a
 * Postgres one ~40 µs (`npm run bench:calibration`), so only a store in trouble takes this long;
 * without the bound, a compile would wait for the store's own timeouts (2 s to connect, 30 s for
 * a Postgres statement) and could miss its deadline for a correction.
 */
export const defaultCalibrationReadWaitMs = 250;

export interface UsageCalibrationOptions extends CalibrationStorage {
  /** Where the corrections are kept and learnt (the conversation store). */
  store: CalibrationStore;
  /** Keys cached in this process (`--calibration-keys`), the least recently used forgotten first. */
  maxKeys: number;
  /** See `defaultCalibrationReadWaitMs`. */
  readWaitMs?: number;
  now?: () => number;
}

/** One cached key: its correction, when it was read (or learnt), and the read in flight. */
interface CachedCorrection {
  /** Whose key it is: the cache's bound is shared by tenants (see `remember`). */
  tenant: string;
  correction: TokenCorrection;
  readAtMs: number;
  /** Bumped by every update, so a read that finishes after a newer report does not undo it. */
  generation: number;
  reading?: Promise<TokenCorrection>;
}

/**
 * The calibration corrections as compiles see them (`ContextService.ReportUsage`, compile.proto
 * `TokenCalibration`), one per (tenant, provider, model, estimator). Why it exists: the budget's
 * estimates are off by a repeatable ratio per provider and model, which only provider usage
 * reports reveal. The corrections live in the store (`CalibrationStore`: a restart, a second
 * sidecar and every `--workers` process share them); this is a bounded read cache in front of it,
 * so a compile does not pay a store round trip: a correction read from the store (or learnt by a
 * report here) is used for `refreshMs`, then the next compile of the key reads it again (one read
 * per key however many compiles wait for it). Another sidecar's reports therefore reach this
 * sidecar's compiles within `refreshMs`. A read that fails leaves the last known correction (or
 * 1) in force, marked with the error (`TokenCalibration.store_read_error`), until it is read again
 * `refreshMs` later: a compile never fails for calibration. A report is learnt by the store, and
 * its store errors are the call's (UNAVAILABLE when the store cannot be reached).
 *
 * Bounded by the number of keys (`--calibration-keys`), the least recently used key of the tenant
 * with the most keys forgotten first;
 * a cached key takes ~300 bytes (299 measured for 100,000 keys with 20-character model names,
 * `npm run bench:calibration`), so the default 1,024 keys is ~300 KB. A tenant's reports only
 * correct that tenant's compiles.
 */
export class UsageCalibration {
  private readonly cached = new Map<string, CachedCorrection>();
  /** Each tenant's cached keys, least recently used first. */
  private readonly tenantKeys = new Map<string, Set<string>>();
  private readonly now: () => number;
  private generations = 0;

  constructor(private readonly options: UsageCalibrationOptions) {
    if (!(options.maxKeys >= 1)) throw new Error(`calibration keys must be at least 1, got ${options.maxKeys}`);
    this.now = options.now ?? Date.now;
  }

  /**
   * The correction in force for `tenant`'s `key`: at once when a copy read within `refreshMs` is
   * cached, else once the store answered; `uncorrected` before any report.
   */
  correction(tenant: string, key: CalibrationKey): TokenCorrection | Promise<TokenCorrection> {
    // A model with a lone surrogate has no stored record (a report of it is refused).
    if (!isStorableText(key.model) || !isStorableText(tenant)) return uncorrected;
    const id = keyOf(tenant, key);
    const entry = this.cached.get(id);
    if (entry) this.touch(id, entry);
    const nowMs = this.now();
    if (entry && nowMs - entry.readAtMs < this.options.refreshMs) return entry.correction;
    if (entry?.reading) return this.waitBounded(entry.reading, entry.correction);
    const held = entry ?? { tenant, correction: uncorrected, readAtMs: -Infinity, generation: 0 };
    const generation = held.generation;
    const record: CalibrationRecordKey = { tenant, ...key };
    const reading = this.options.store.readCalibration(record, nowMs, this.options.bounds).then(
      (found) => this.update(tenant, id, generation, found ?? uncorrected),
      (error: unknown) => {
        const { storeReadError: _previous, ...last } = this.cached.get(id)?.correction ?? held.correction;
        return this.update(tenant, id, generation, { ...last, storeReadError: `reading the correction from the store failed: ${ConnectError.from(error).rawMessage}` });
      },
    );
    held.reading = reading;
    if (!entry) this.remember(id, held);
    return this.waitBounded(reading, held.correction);
  }

  /** `reading`'s answer, or after `readWaitMs` the last correction known marked as not read. */
  private waitBounded(reading: Promise<TokenCorrection>, last: TokenCorrection): Promise<TokenCorrection> {
    const waitMs = this.options.readWaitMs ?? defaultCalibrationReadWaitMs;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<TokenCorrection>((resolve) => {
      timer = setTimeout(() => {
        const { storeReadError: _previous, ...known } = last;
        resolve({ ...known, storeReadError: `the store did not answer the read of the correction within ${waitMs} ms; the last one known is used meanwhile` });
      }, waitMs);
    });
    return Promise.race([reading, late]).finally(() => clearTimeout(timer));
  }

  /** Learns from one report in the store; INVALID_ARGUMENT naming the field when one is out of range, nothing learnt. */
  async report(tenant: string, request: ReportUsageRequest): Promise<ReportUsageResponse> {
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
    requireStorableText("report_usage.model", request.model);
    const tokens = (value: bigint, name: string): number => {
      if (value < 1n || value > BigInt(maxBudgetTokens)) {
        throw new ConnectError(`report_usage.${name} must be from 1 to ${maxBudgetTokens}, got ${value}`, Code.InvalidArgument);
      }
      return Number(value);
    };
    const estimated = tokens(request.estimatedTokens, "estimated_tokens");
    const actual = tokens(request.actualInputTokens, "actual_input_tokens");
    const key: CalibrationKey = { provider: request.provider, model: request.model, estimator: request.estimator };
    const learnt = await this.options.store.reportCalibration({ tenant, ...key }, estimated, actual, this.now(), this.options.bounds);
    const id = keyOf(tenant, key);
    const entry = this.cached.get(id);
    this.update(tenant, id, entry?.generation ?? 0, learnt.correction);
    return {
      $typeName: "contextd.v1.ReportUsageResponse",
      correction: learnt.correction.factor,
      reports: BigInt(learnt.correction.reports),
      meanAbsoluteRelativeError: learnt.correction.meanAbsoluteRelativeError,
      relativeError: learnt.relativeError,
      duplicate: false,
    };
  }

  /** How many keys are cached now. */
  get size(): number {
    return this.cached.size;
  }

  /**
   * Caches `correction` as read (or learnt) now, unless the entry changed since `generation` (a
   * report here answered while a read was in flight: the read is older). Answers what is in force.
   */
  private update(tenant: string, id: string, generation: number, correction: TokenCorrection): TokenCorrection {
    const entry = this.cached.get(id);
    if (entry && entry.generation !== generation) return entry.correction;
    this.remember(id, { tenant, correction, readAtMs: this.now(), generation: ++this.generations });
    return correction;
  }

  /**
   * Caches `entry`; past `maxKeys`, the least recently used key of the tenant with the most keys
   * cached is forgotten. So a tenant compiling or reporting many models only pushes out its own
   * keys while another holds fewer (which would then wait for a store read at every compile). The
   * tenants are the auth tokens' (a few), so finding the largest is a short scan.
   */
  private remember(id: string, entry: CachedCorrection): void {
    this.cached.delete(id);
    this.cached.set(id, entry);
    this.touch(id, entry);
    while (this.cached.size > this.options.maxKeys) {
      let largest: Set<string> | undefined;
      for (const keys of this.tenantKeys.values()) if (largest === undefined || keys.size > largest.size) largest = keys;
      const oldest: string = largest!.values().next().value!;
      const forgotten = this.cached.get(oldest)!;
      this.cached.delete(oldest);
      largest!.delete(oldest);
      if (largest!.size === 0) this.tenantKeys.delete(forgotten.tenant);
    }
  }

  /** Most recently used last, within its tenant: a Set iterates in insertion order. */
  private touch(id: string, entry: CachedCorrection): void {
    let keys = this.tenantKeys.get(entry.tenant);
    if (keys === undefined) {
      keys = new Set();
      this.tenantKeys.set(entry.tenant, keys);
    }
    keys.delete(id);
    keys.add(id);
  }
}

/** One string per key; the model goes last, so no separator inside it can make two keys equal. */
function keyOf(tenant: string, key: CalibrationKey): string {
  return `${key.provider}\u0000${key.estimator}\u0000${tenant.length}\u0000${tenant}\u0000${key.model}`;
}
