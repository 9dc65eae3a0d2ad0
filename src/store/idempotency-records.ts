/**
 * The embedded store's idempotency records: per (conversation, key) the batch's fingerprint and
 * the version it produced, which is the commit's response without its state. Bounded per store by
 * count and by bytes.
 *
 * Why it exists: each keyed commit used to keep its whole new state object as the record for 24 h,
 * and every state of a growing conversation has its own lists, so 4,000 keyed commits to one
 * conversation took +98 MB of heap (+4 MB unkeyed; `npm run bench:idempotency`), quadratic in the
 * commits per conversation and bounded by nothing but the TTL; now +5.5 MB. Keeping the response
 * encoded instead was no better: bytes per record grow with the state, and the encodings cost
 * +164 MB RSS in allocator churn for the same run. A replay's state is the conversation's current state when
 * it is still at the recorded version (then they are the same state), else absent.
 *
 * Records leave in the order they were written, which with one TTL is the order they expire:
 * expired ones as soon as a newer record is written, and past `maxRecords` or `maxBytes` the
 * oldest is forgotten (a retry of it then commits again, or is ABORTED when it carries an expected
 * version, as after the TTL). The newest record is kept even when it alone is over `maxBytes` (a
 * key is bounded by the request size).
 */

/** Records kept per store, at most (all conversations together). */
export const defaultMaxIdempotencyRecords = 100_000;
/** Bytes of records kept per store, at most: their ids, keys and fingerprints plus a fixed overhead each. */
export const defaultMaxIdempotencyBytes = 32 * 1024 * 1024;

/** What one record costs besides its strings (Map entry, record object, bigint), measured roughly. */
const recordOverheadBytes = 160;

export interface IdempotencyRecord {
  fingerprint: string;
  /** The version the commit produced. */
  version: bigint;
  expiresAt: number;
  /** What this record counts against the byte bound. */
  bytes: number;
}

export interface IdempotencyBounds {
  maxRecords: number;
  maxBytes: number;
  ttlMs: number;
}

export class IdempotencyRecords {
  /** Every record, oldest first. */
  private readonly records = new Map<string, IdempotencyRecord>();
  private totalBytes = 0;

  constructor(private readonly bounds: IdempotencyBounds) {
    if (!(bounds.maxRecords >= 1) || !(bounds.maxBytes >= 1) || !(bounds.ttlMs >= 1)) {
      throw new Error(`idempotency bounds must be positive: ${JSON.stringify(bounds)}`);
    }
  }

  /** The unexpired record of `key` in `conversationId`, if one is kept. */
  get(conversationId: string, key: string, now: number): IdempotencyRecord | undefined {
    const name = recordName(conversationId, key);
    const record = this.records.get(name);
    if (record && record.expiresAt <= now) {
      this.forget(name, record);
      return undefined;
    }
    return record;
  }

  add(conversationId: string, key: string, fingerprint: string, version: bigint, now: number): void {
    const name = recordName(conversationId, key);
    const previous = this.records.get(name);
    if (previous) this.forget(name, previous);
    const record: IdempotencyRecord = {
      fingerprint,
      version,
      expiresAt: now + this.bounds.ttlMs,
      // Strings count two bytes a character: V8 stores a string with any non-Latin-1 character so.
      bytes: recordOverheadBytes + 2 * (name.length + fingerprint.length),
    };
    this.records.set(name, record);
    this.totalBytes += record.bytes;
    this.trim(now);
  }

  get size(): number {
    return this.records.size;
  }

  /** Bytes counted against `maxBytes`. */
  get bytes(): number {
    return this.totalBytes;
  }

  private trim(now: number): void {
    for (const [name, record] of this.records) {
      if (record.expiresAt > now) break;
      this.forget(name, record);
    }
    while (this.records.size > this.bounds.maxRecords || (this.totalBytes > this.bounds.maxBytes && this.records.size > 1)) {
      const [name, record] = this.records.entries().next().value!;
      this.forget(name, record);
    }
  }

  private forget(name: string, record: IdempotencyRecord): void {
    this.records.delete(name);
    this.totalBytes -= record.bytes;
  }
}

/** One string per (conversation, key); the length prefix keeps `("a:", "b")` apart from `("a", ":b")`. */
function recordName(conversationId: string, key: string): string {
  return `${conversationId.length}:${conversationId}${key}`;
}
