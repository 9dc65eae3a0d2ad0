import { learnCorrection, uncorrected, type LearntCorrection, type TokenCorrection } from "../core/compile/token-calibration.js";
import { calibrationField, type CalibrationBounds, type CalibrationRecordKey } from "./calibration-store.js";

interface StoredCorrection {
  correction: TokenCorrection;
  reportedAtMs: number;
}

interface TenantRecords {
  /** In report order, the least recently reported first. */
  records: Map<string, StoredCorrection>;
  lastReportMs: number;
}

/**
 * The embedded store's calibration records (`CalibrationStore`). Tenants and each tenant's keys
 * are kept in report order (a Map iterates in insertion order; a report moves its entry last), so
 * the per-tenant bound and the expiry both take from the front: a report costs O(1) amortized. A
 * report runs between two awaits, which makes it atomic in the process. Nothing survives the
 * process, like the conversations beside it.
 */
export class MemoryCalibrationRecords {
  private readonly tenants = new Map<string, TenantRecords>();

  read(key: CalibrationRecordKey, nowMs: number, bounds: CalibrationBounds): TokenCorrection | undefined {
    const stored = this.tenants.get(key.tenant)?.records.get(calibrationField(key));
    return stored && stored.reportedAtMs > nowMs - bounds.ttlMs ? stored.correction : undefined;
  }

  report(key: CalibrationRecordKey, estimatedTokens: number, actualTokens: number, nowMs: number, bounds: CalibrationBounds): LearntCorrection {
    const field = calibrationField(key);
    const learnt = learnCorrection(this.read(key, nowMs, bounds) ?? uncorrected, estimatedTokens, actualTokens);
    const tenant = this.tenants.get(key.tenant) ?? { records: new Map<string, StoredCorrection>(), lastReportMs: nowMs };
    this.tenants.delete(key.tenant);
    this.tenants.set(key.tenant, tenant);
    tenant.lastReportMs = nowMs;
    const { records } = tenant;
    records.delete(field);
    records.set(field, { correction: learnt.correction, reportedAtMs: nowMs });
    const expiredBefore = nowMs - bounds.ttlMs;
    for (const [oldest, stored] of records) {
      if (records.size <= bounds.maxKeysPerTenant && stored.reportedAtMs > expiredBefore) break;
      records.delete(oldest);
    }
    // Tenants whose last report expired, from the front: silent tenants do not stay.
    for (const [name, other] of this.tenants) {
      if (other.lastReportMs > expiredBefore) break;
      this.tenants.delete(name);
    }
    return learnt;
  }
}
