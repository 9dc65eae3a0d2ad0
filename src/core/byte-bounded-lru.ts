/**
 * A map bounded by what its entries weigh (bytes the caller counts per entry), and optionally by
 * their number, the least recently used entry leaving first. Why it exists: the same Map, running
 * byte total and eviction loop was written by hand in the first nine caches below, with small
 * variations; one class makes the policies visible and lets each cache say only which one it has.
 * It is in core, the lowest layer, because it is a plain data structure: core, store and
 * application all use it.
 *
 * The byte-bounded caches, and how their policies differ (the options cover the first nine):
 *
 * | cache | bounds | entry alone over the bytes | `get` marks used |
 * |---|---|---|---|
 * | store/kept-tails.ts `KeptTails` | bytes | refused | no |
 * | store/decoded-state-cache.ts `DecodedStateCache` | bytes and count, messages shared by states weighed once (`evicted`, `reweigh`) | kept (the newest always is) | no: `touch` is a separate call |
 * | store/recent-ids.ts `RecentIds` | bytes (weighed from the key) | refused | no |
 * | application/history-facts-cache.ts `HistoryFactsCache` | bytes and count | refused | taken out, not read in place |
 * | application/recent-compiles.ts `RecentCompiles` | bytes | refused | no |
 * | core/tokens/token-count-cache.ts the recent lists | bytes and count (64) | refused | no |
 * | application/recall-term-index.ts `RecallTermIndex` | bytes | refused (used for its request only) | yes |
 * | application/tool-result-texts.ts `ToolResultTexts` | bytes | refused (used for its read only) | yes |
 * | application/message-windows.ts `PinnedWindows` | bytes, count and age | refused | no (a page re-keeps its window) |
 * | store/idempotency-records.ts `IdempotencyRecords` | bytes, count, TTL, fair per tenant | kept | no |
 * | application/telemetry-hub.ts queues | events and bytes per subscriber and tenant | dropped | (a queue, not a map) |
 *
 * None had an eviction callback; `DecodedStateCache` now has one (`evicted`): a fork's state and its
 * source's share their messages, weighed to one of them, and when that one leaves the other must
 * weigh them instead (`reweigh`). Every one that replaces a key forgets the old value first, even
 * when the new one is then refused, so `set` does too. The last two do not fit and keep their own
 * code: idempotency records evict the oldest record of the tenant using the largest share of the
 * bounds, not the oldest overall, and expire by TTL; the telemetry hub's queues are FIFO queues
 * that refuse the newest event when full. `PinnedWindows` keeps its age bound on top of this class
 * (its entries' deadlines are in use order, so the expired ones are the oldest: `oldestFirst`).
 *
 * Costs: `get`, `use`, `delete` O(1); `set` and `reweigh` O(1) plus one step per entry they evict.
 */
export interface ByteBoundedLruBounds<K = unknown, V = unknown> {
  /** What the entries may weigh together, in the caller's bytes. */
  maxBytes: number;
  /** How many entries may be kept; unbounded when absent. */
  maxEntries?: number;
  /**
   * Keep the newest entry even when it alone is over a bound (the others go first). Without it an
   * entry over `maxBytes` alone is refused, and nothing is kept at `maxEntries` 0.
   */
  keepNewest?: boolean;
  /**
   * Called for each entry a bound pushed out (not for one `delete`d or replaced by `set`), after it
   * left. It may `reweigh` other entries; what that pushes out is reported too.
   */
  evicted?: (key: K, value: V) => void;
}

export class ByteBoundedLru<K, V> {
  /** Map order is use order: the first entry is the least recently used. */
  private readonly entries = new Map<K, { value: V; bytes: number }>();
  private keptBytes = 0;
  private readonly maxEntries: number;

  constructor(private readonly bounds: ByteBoundedLruBounds<K, V>) {
    this.maxEntries = bounds.maxEntries ?? Infinity;
  }

  /** The value of `key`, its place in the use order unchanged. */
  get(key: K): V | undefined {
    return this.entries.get(key)?.value;
  }

  has(key: K): boolean {
    return this.entries.has(key);
  }

  /** The value of `key`, marked as the most recently used. */
  use(key: K): V | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    this.entries.delete(key);
    this.entries.set(key, entry);
    return entry.value;
  }

  /** What `key`'s entry was counted at, if it is kept. */
  bytesOf(key: K): number | undefined {
    return this.entries.get(key)?.bytes;
  }

  /**
   * Keeps `value` as `key`'s, weighing `bytes`, as the most recently used; the least recently used
   * leave while over a bound. A previous value of `key` is forgotten even when this one is refused.
   * Returns whether `value` is kept.
   */
  set(key: K, value: V, bytes: number): boolean {
    this.delete(key);
    const keepNewest = this.bounds.keepNewest === true;
    if (!keepNewest && (bytes > this.bounds.maxBytes || this.maxEntries < 1)) return false;
    this.entries.set(key, { value, bytes });
    this.keptBytes += bytes;
    this.evictOverBounds();
    return true;
  }

  /**
   * Counts `key`'s entry at `bytes` from now on, its place in the use order unchanged; the least
   * recently used leave while over a bound (`key`'s own entry too, unless it is the newest under
   * `keepNewest`). Returns whether it is still kept; false also when it was not.
   */
  reweigh(key: K, bytes: number): boolean {
    const entry = this.entries.get(key);
    if (entry === undefined) return false;
    this.keptBytes += bytes - entry.bytes;
    entry.bytes = bytes;
    this.evictOverBounds();
    return this.entries.has(key);
  }

  private evictOverBounds(): void {
    const floor = this.bounds.keepNewest === true ? 1 : 0;
    // One iterator for all the evictions: a Map's iterator survives deleting the entry at hand, and
    // an `evicted` that reweighs (and so evicts in a nested call) only deletes entries too.
    for (const [oldest, entry] of this.entries) {
      if (this.entries.size <= floor || (this.entries.size <= this.maxEntries && this.keptBytes <= this.bounds.maxBytes)) break;
      this.entries.delete(oldest);
      this.keptBytes -= entry.bytes;
      this.bounds.evicted?.(oldest, entry.value);
    }
  }

  /** Forgets `key`; returns the value it had. */
  delete(key: K): V | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    this.entries.delete(key);
    this.keptBytes -= entry.bytes;
    return entry.value;
  }

  clear(): void {
    this.entries.clear();
    this.keptBytes = 0;
  }

  /** The kept entries, least recently used first (deleting the one at hand while iterating is safe). */
  *oldestFirst(): IterableIterator<[K, V]> {
    for (const [key, entry] of this.entries) yield [key, entry.value];
  }

  get size(): number {
    return this.entries.size;
  }

  /** What the kept entries weigh together, as counted against `maxBytes`. */
  get bytes(): number {
    return this.keptBytes;
  }
}
