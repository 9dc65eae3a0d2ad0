import { ByteBoundedLru } from "../core/byte-bounded-lru.js";

/** `--listed-id-bytes`: what the Redis store's memo of conversations it put in the listing index may weigh. */
export const defaultListedIdBytes = 16 * 1024 * 1024;

/**
 * Heap bytes one remembered id costs beyond its characters: the Map entry, the string's header and
 * the number beside it. An estimate (V8 keeps a one-byte string in 1 byte a character and a
 * two-byte one in 2; ids are counted at 2 so the bound holds for both).
 */
export const rememberedIdOverheadBytes = 80;

/**
 * Ids with a value each, the least recently set leaving first, bounded by what they weigh in the
 * heap (`rememberedIdOverheadBytes` + 2 bytes a UTF-16 unit, of a string value too). Why it exists: the Redis store's memo
 * of the conversations whose listing entry it wrote was bounded by count (100,000 ids), and ids may
 * be 1,024 bytes long, so its heap was bounded only by ~200 MB (issue 30: caches bounded by bytes).
 * An id alone over the bound is not kept.
 */
export class RecentIds<V> {
  private readonly ids: ByteBoundedLru<string, V>;

  constructor(maxBytes: number) {
    this.ids = new ByteBoundedLru({ maxBytes });
  }

  get(id: string): V | undefined {
    return this.ids.get(id);
  }

  /** Sets `id`'s value, as the most recently set. */
  set(id: string, value: V): void {
    this.ids.set(id, value, weightOf(id) + (typeof value === "string" ? 2 * value.length : 0));
  }

  delete(id: string): void {
    this.ids.delete(id);
  }

  /** The ids and values, the least recently set first. */
  oldestFirst(): IterableIterator<[string, V]> {
    return this.ids.oldestFirst();
  }

  get size(): number {
    return this.ids.size;
  }

  /** What the kept ids weigh together (at most the bound). */
  get keptBytes(): number {
    return this.ids.bytes;
  }
}

function weightOf(id: string): number {
  return rememberedIdOverheadBytes + 2 * id.length;
}
