/** One remembered text, chained with the others of its bucket. */
interface Entry {
  text: string;
  tokens: number;
  next?: Entry;
}

/** Longest chain kept in a bucket; texts beyond it go to the exact-key overflow map. */
const maxChain = 8;

/**
 * Token counts of texts, keyed by the exact text. A `Map<string, number>` would hash every freshly
 * decoded text in full (V8 hashes strings one character at a time, ~2 ns each, and a decoded
 * string has no cached hash), which costs more than the rest of a warm compile. Here a text is
 * hashed from a fixed sample (length, first and last 32 characters, 32 spread over the middle) and
 * confirmed by full equality, which V8 checks as a block compare. Texts that differ only between
 * sampled characters share a bucket; a bucket holds at most `maxChain` of them, the rest go to an
 * exact-key Map, so no input pattern makes lookups slower than plain hashing.
 */
export class TextCountTable {
  private readonly buckets = new Map<number, Entry>();
  private readonly overflow = new Map<string, number>();
  private count = 0;
  private keptBytes = 0;

  get size(): number {
    return this.count;
  }

  /** Roughly what the entries hold: their texts (2 bytes a UTF-16 unit) and ~64 bytes each. */
  get bytes(): number {
    return this.keptBytes;
  }

  get(text: string): number | undefined {
    for (let entry = this.buckets.get(sampleHash(text)); entry; entry = entry.next) {
      if (entry.text === text) return entry.tokens;
    }
    // A miss is followed by a BPE count, which dwarfs one full hash.
    return this.overflow.size > 0 ? this.overflow.get(text) : undefined;
  }

  /** Remembers `text` (which `get` did not find). */
  set(text: string, tokens: number): void {
    const hash = sampleHash(text);
    const head = this.buckets.get(hash);
    let length = 0;
    for (let entry = head; entry; entry = entry.next) length++;
    if (length >= maxChain) this.overflow.set(text, tokens);
    else this.buckets.set(hash, { text, tokens, next: head });
    this.count++;
    this.keptBytes += entryBytes(text);
  }

  /**
   * Forgets about `target` entries, oldest buckets first (Map order is insertion order); returns
   * how many were forgotten.
   */
  evict(target: number): number {
    let evicted = 0;
    for (const [hash, head] of this.buckets) {
      if (evicted >= target) break;
      for (let entry: Entry | undefined = head; entry; entry = entry.next) {
        evicted++;
        this.keptBytes -= entryBytes(entry.text);
      }
      this.buckets.delete(hash);
    }
    for (const text of this.overflow.keys()) {
      if (evicted >= target) break;
      this.overflow.delete(text);
      this.keptBytes -= entryBytes(text);
      evicted++;
    }
    this.count -= evicted;
    return evicted;
  }

  clear(): void {
    this.buckets.clear();
    this.overflow.clear();
    this.count = 0;
    this.keptBytes = 0;
  }
}

/**
 * A 30-bit hash of the length and a fixed sample of characters (the whole text up to 64 of them).
 * 30 bits keep it a small integer for V8, so a Map keyed by it boxes nothing.
 */
function entryBytes(text: string): number {
  return 2 * text.length + 64;
}

export function sampleHash(text: string): number {
  const length = text.length;
  let hash = length;
  const head = Math.min(32, length);
  for (let index = 0; index < head; index++) hash = Math.imul(hash ^ text.charCodeAt(index), 0x9e3779b1);
  const tailStart = Math.max(head, length - 32);
  for (let index = tailStart; index < length; index++) hash = Math.imul(hash ^ text.charCodeAt(index), 0x85ebca6b);
  const middle = tailStart - head;
  if (middle > 0) {
    const step = Math.max(1, Math.floor(middle / 32));
    for (let index = head; index < tailStart; index += step) hash = Math.imul(hash ^ text.charCodeAt(index), 0xc2b2ae35);
  }
  return (hash ^ (hash >>> 15)) & 0x3fffffff;
}
