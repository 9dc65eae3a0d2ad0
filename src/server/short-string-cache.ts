/**
 * Strings recently decoded from short ASCII byte runs, handed out again for the same bytes.
 *
 * Why it exists: a compile keys its transformation records by message id, and V8 internalizes
 * every freshly decoded string used as a property key (hashes it, finds or adds it in the string
 * table, and turns the fresh string into a reference to the table's copy). For a 1,000-message
 * request that was most of a warm compile's normalisation. A client resends the same history with
 * every request, so returning the string object decoded last time (internalized by the previous
 * compile already) avoids that, and the decode itself.
 *
 * Only ASCII is cached: its bytes are its UTF-8 and its UTF-16 code units at once, so a hit is
 * confirmed by comparing the string's characters with the bytes, and it is valid UTF-8 for any
 * strictness. Bounded: a fixed table of 2-way sets, the least recently used way replaced.
 */
export class ShortStringCache {
  /** Longer strings are decoded as usual: ids are shorter, and long text rarely repeats as a key. */
  static readonly maxBytes = 64;

  private readonly setMask: number;
  // Way 0 of set s at 2s, way 1 at 2s + 1; way 0 is the most recently used.
  private readonly strings: (string | undefined)[];
  private readonly hashes: Int32Array;

  constructor(sets = 4096) {
    if (sets <= 0 || (sets & (sets - 1)) !== 0) throw new Error(`ShortStringCache: sets must be a power of two, got ${sets}`);
    this.setMask = sets - 1;
    this.strings = new Array<string | undefined>(sets * 2).fill(undefined);
    this.hashes = new Int32Array(sets * 2);
  }

  /**
   * The string for `bytes[start, end)` if it was decoded recently; undefined when it was not, or
   * is not cacheable (longer than `maxBytes`, or not ASCII): the caller then decodes it itself and
   * offers the result to `store`.
   */
  lookup(bytes: Uint8Array, start: number, end: number): string | undefined {
    const hash = asciiHash(bytes, start, end);
    if (hash === undefined) return undefined;
    const slot = (hash & this.setMask) << 1;
    const strings = this.strings;
    const hashes = this.hashes;
    const first = strings[slot];
    if (first !== undefined && hashes[slot] === hash && sameAscii(first, bytes, start, end)) return first;
    const second = strings[slot + 1];
    if (second !== undefined && hashes[slot + 1] === hash && sameAscii(second, bytes, start, end)) {
      // The hit becomes the most recently used way.
      strings[slot + 1] = first;
      hashes[slot + 1] = hashes[slot]!;
      strings[slot] = second;
      hashes[slot] = hash;
      return second;
    }
    return undefined;
  }

  /** Remembers `text` as the decoding of `bytes[start, end)`, if that run is cacheable. */
  store(bytes: Uint8Array, start: number, end: number, text: string): void {
    const hash = asciiHash(bytes, start, end);
    if (hash === undefined) return;
    const slot = (hash & this.setMask) << 1;
    this.strings[slot + 1] = this.strings[slot];
    this.hashes[slot + 1] = this.hashes[slot]!;
    this.strings[slot] = text;
    this.hashes[slot] = hash;
  }
}

/** FNV-1a of a run of at most `maxBytes` ASCII bytes; undefined for any other run. */
function asciiHash(bytes: Uint8Array, start: number, end: number): number | undefined {
  if (end - start > ShortStringCache.maxBytes) return undefined;
  let hash = 0x811c9dc5 | 0;
  // Every byte's high bit, to tell ASCII from the rest in the same pass.
  let highBits = 0;
  for (let index = start; index < end; index++) {
    const byte = bytes[index]!;
    highBits |= byte;
    hash = Math.imul(hash ^ byte, 0x01000193);
  }
  return highBits < 0x80 ? hash : undefined;
}

function sameAscii(text: string, bytes: Uint8Array, start: number, end: number): boolean {
  if (text.length !== end - start) return false;
  for (let index = start; index < end; index++) if (text.charCodeAt(index - start) !== bytes[index]) return false;
  return true;
}
