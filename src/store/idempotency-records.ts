/**
 * The embedded store's idempotency records: per (conversation, key) the batch's fingerprint and
 * the version it produced, which is the commit's response without its state. Bounded per store by
 * count and by bytes, shared fairly between tenants.
 *
 * Why it exists: each keyed commit used to keep its whole new state object as the record for 24 h,
 * and every state of a growing conversation has its own lists, so 4,000 keyed commits to one
 * conversation took +98 MB of heap (+4 MB unkeyed; `npm run bench:idempotency`), quadratic in the
 * commits per conversation and bounded by nothing but the TTL; now +5.5 MB. Keeping the response
 * encoded instead was no better: bytes per record grow with the state, and the encodings cost
 * +164 MB RSS in allocator churn for the same run. A replay's state is the conversation's current state when
 * it is still at the recorded version (then they are the same state), else absent.
 *
 * Tenants: a record belongs to the tenant of its conversation, the id's part before the first "/"
 * (what `--auth-tokens-file` scopes a token to; "" without one). Past `maxRecords` or `maxBytes`
 * the oldest record of the tenant using the largest share of the bounds is forgotten, so one
 * tenant writing many (or large) records only ever forgets its own while others use less than it:
 * tenant a's 200 commits with 100 KB keys used to push tenant b's record out, and b's retry was
 * applied a second time. A forgotten record's retry commits again, or is ABORTED when it carries an
 * expected version, as after the TTL.
 *
 * Records expire in the order they were written (one TTL): expired ones go as soon as a newer
 * record is written. The newest record is kept even when it alone is over `maxBytes` (a key is
 * bounded: core/model/string-limits.ts).
 */

import { tenantOf } from "../core/model/conversation-tenant.js";

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
  /** Every record, oldest first (the expiry order). */
  private readonly records = new Map<string, KeptRecord>();
  private readonly tenants = new Map<string, TenantRecords>();
  /** Per conversation id the names of its records, so a deleted conversation's go with it (`forgetConversation`). */
  private readonly byConversation = new Map<string, Set<string>>();
  /** Tenants by share, largest first; entries whose share has changed since are skipped (lazy). */
  private readonly byShare = new ShareHeap();
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
    const tenantName = tenantOf(conversationId);
    let tenant = this.tenants.get(tenantName);
    if (tenant === undefined) {
      tenant = { name: tenantName, records: new Set(), bytes: 0 };
      this.tenants.set(tenantName, tenant);
    }
    const record: KeptRecord = {
      fingerprint,
      version,
      expiresAt: now + this.bounds.ttlMs,
      // Strings count two bytes a character: V8 stores a string with any non-Latin-1 character so.
      bytes: recordOverheadBytes + 2 * (name.length + fingerprint.length),
      tenant,
      conversationId,
    };
    this.records.set(name, record);
    let names = this.byConversation.get(conversationId);
    if (names === undefined) this.byConversation.set(conversationId, (names = new Set()));
    names.add(name);
    tenant.records.add(name);
    tenant.bytes += record.bytes;
    this.totalBytes += record.bytes;
    this.byShare.push(tenant, this.shareOf(tenant));
    this.trim(now);
  }

  /**
   * Forgets every record of `conversationId`: the conversation was deleted or expired, and a new
   * conversation under its id must never be answered with the old one's commits. Costs the
   * conversation's records.
   */
  forgetConversation(conversationId: string): void {
    const names = this.byConversation.get(conversationId);
    if (names === undefined) return;
    for (const name of [...names]) this.forget(name, this.records.get(name)!);
  }

  get size(): number {
    return this.records.size;
  }

  /** Bytes counted against `maxBytes`. */
  get bytes(): number {
    return this.totalBytes;
  }

  /** Records kept for `tenant` (the conversation id's part before the first "/"); for tests and gauges. */
  sizeOf(tenant: string): number {
    return this.tenants.get(tenant)?.records.size ?? 0;
  }

  private trim(now: number): void {
    for (const [name, record] of this.records) {
      if (record.expiresAt > now) break;
      this.forget(name, record);
    }
    while (this.records.size > this.bounds.maxRecords || (this.totalBytes > this.bounds.maxBytes && this.records.size > 1)) {
      const tenant = this.byShare.largest((candidate, share) => this.tenants.get(candidate.name) === candidate && share === this.shareOf(candidate));
      // The heap holds every tenant with records at its current share, so this is never undefined.
      const oldest: string = tenant!.records.values().next().value!;
      this.forget(oldest, this.records.get(oldest)!);
    }
    if (this.byShare.size > 2 * this.tenants.size + 64) this.byShare.rebuild([...this.tenants.values()].map((tenant) => [tenant, this.shareOf(tenant)]));
  }

  /** The part of the bounds `tenant` uses: the larger of its share of the records and of the bytes. */
  private shareOf(tenant: TenantRecords): number {
    return Math.max(tenant.records.size / this.bounds.maxRecords, tenant.bytes / this.bounds.maxBytes);
  }

  private forget(name: string, record: KeptRecord): void {
    this.records.delete(name);
    const names = this.byConversation.get(record.conversationId)!;
    names.delete(name);
    if (names.size === 0) this.byConversation.delete(record.conversationId);
    this.totalBytes -= record.bytes;
    const { tenant } = record;
    tenant.records.delete(name);
    tenant.bytes -= record.bytes;
    if (tenant.records.size === 0) this.tenants.delete(tenant.name);
    else this.byShare.push(tenant, this.shareOf(tenant));
  }
}

interface KeptRecord extends IdempotencyRecord {
  tenant: TenantRecords;
  conversationId: string;
}

/** One tenant's records (names, oldest first) and their bytes. */
interface TenantRecords {
  name: string;
  records: Set<string>;
  bytes: number;
}

/**
 * A max-heap of (tenant, share) entries. A tenant's share changes with every record it gains or
 * loses; instead of moving its entry, a new one is pushed and outdated ones are dropped when they
 * reach the top (`largest` is told which are current), so each change costs O(log n).
 */
class ShareHeap {
  private entries: [TenantRecords, number][] = [];

  get size(): number {
    return this.entries.length;
  }

  push(tenant: TenantRecords, share: number): void {
    const entries = this.entries;
    entries.push([tenant, share]);
    let index = entries.length - 1;
    while (index > 0) {
      const parent = (index - 1) >> 1;
      if (entries[parent]![1] >= entries[index]![1]) break;
      [entries[parent], entries[index]] = [entries[index]!, entries[parent]!];
      index = parent;
    }
  }

  /** The tenant of the largest current entry, outdated entries above it dropped. */
  largest(isCurrent: (tenant: TenantRecords, share: number) => boolean): TenantRecords | undefined {
    while (this.entries.length > 0) {
      const [tenant, share] = this.entries[0]!;
      if (isCurrent(tenant, share)) return tenant;
      this.popTop();
    }
    return undefined;
  }

  /** Replaces every entry by `current` (one per tenant), so outdated entries do not pile up. */
  rebuild(current: [TenantRecords, number][]): void {
    this.entries = [];
    for (const [tenant, share] of current) this.push(tenant, share);
  }

  private popTop(): void {
    const entries = this.entries;
    const last = entries.pop()!;
    if (entries.length === 0) return;
    entries[0] = last;
    let index = 0;
    for (;;) {
      const left = 2 * index + 1;
      const right = left + 1;
      let largest = index;
      if (left < entries.length && entries[left]![1] > entries[largest]![1]) largest = left;
      if (right < entries.length && entries[right]![1] > entries[largest]![1]) largest = right;
      if (largest === index) return;
      [entries[largest], entries[index]] = [entries[index]!, entries[largest]!];
      index = largest;
    }
  }
}

/** One string per (conversation, key); the length prefix keeps `("a:", "b")` apart from `("a", ":b")`. */
function recordName(conversationId: string, key: string): string {
  return `${conversationId.length}:${conversationId}${key}`;
}
