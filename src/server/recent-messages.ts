/**
 * Conversation messages (`contextd.v1.Message`) decoded recently, handed out again when a request
 * carries the very same bytes.
 *
 * Why it exists: an agent resends its whole history with every compile, so a 1,000-message request
 * differs from the previous one by a message or two. Decoding the rest again costs time and
 * garbage, and gives the engine fresh objects and fresh strings, on which nothing learnt in the
 * previous call can be found by identity (token counts, interned ids, encodings). Returning the
 * object decoded last time makes the unchanged part of a request nearly free downstream.
 *
 * Safety: the same object may now be seen by many calls, so every object handed out is frozen,
 * deeply: code that tried to change a request message would throw instead of changing a later
 * request. A hit is confirmed by comparing all bytes, so a hash collision can only cost a decode.
 * Memory is bounded by `maxBytes`, counting each entry as its encoding plus `entryOverheadBytes`
 * for the decoded object graph and the bookkeeping (a short message's objects weigh several times
 * its encoding: counting bytes alone let a soak of a million distinct messages reach ~1 GB RSS);
 * past it everything is forgotten at once, as in `RetainedEncodings`.
 */
export class RecentMessages<T extends object> {
  private entries = new Map<number, Entry<T>[]>();
  private bytes = 0;

  constructor(readonly maxBytes: number) {}

  /** The message decoded earlier from exactly `bytes[start, end)`, if it is still kept. */
  lookup(bytes: Uint8Array, start: number, end: number): T | undefined {
    const bucket = this.entries.get(sampleHash(bytes, start, end));
    if (bucket === undefined) return undefined;
    for (const entry of bucket) {
      if (sameBytes(entry, this.viewOf(bytes), start, end)) return entry.message;
    }
    return undefined;
  }

  /** Keeps `message` as the decoding of `bytes[start, end)` and freezes it; returns it. */
  store(bytes: Uint8Array, start: number, end: number, message: T): T {
    const length = end - start;
    const cost = length + entryOverheadBytes;
    if (cost > this.maxBytes) return message;
    if (this.bytes + cost > this.maxBytes) {
      this.entries = new Map();
      this.bytes = 0;
    }
    deepFreeze(message);
    const hash = sampleHash(bytes, start, end);
    // A copy: a Buffer's slice() would share (and keep alive) the whole request.
    const kept = Uint8Array.prototype.slice.call(bytes, start, end);
    const entry = { bytes: kept, view: new DataView(kept.buffer, kept.byteOffset, kept.byteLength), message };
    const bucket = this.entries.get(hash);
    if (bucket === undefined) this.entries.set(hash, [entry]);
    else bucket.push(entry);
    this.bytes += cost;
    return message;
  }

  // One request's messages are looked up in a row: its view is made once.
  private lastBuffer: Uint8Array | undefined;
  private lastView: DataView | undefined;

  private viewOf(bytes: Uint8Array): DataView {
    if (bytes !== this.lastBuffer) {
      this.lastBuffer = bytes;
      this.lastView = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    }
    return this.lastView!;
  }

  /** What the kept entries are counted as, in bytes (for metrics and tests). */
  get keptBytes(): number {
    return this.bytes;
  }
}

/**
 * Heap per entry beyond its encoding: the decoded message's objects (message, parts, oneof
 * wrappers, strings), the kept copy's ArrayBuffer and DataView, the entry and its bucket. Measured
 * for short text messages; long ones are dominated by their encoding anyway.
 */
export const entryOverheadBytes = 1024;

interface Entry<T> {
  bytes: Uint8Array;
  /** The same bytes, read four at a time when compared. */
  view: DataView;
  message: T;
}

// FNV-1a over the length and at most 32 bytes spread evenly over the run (plus the last byte):
// messages of one conversation share prefixes (ids "m1", "m2"…) and differ anywhere, so the
// samples cover it all; the full comparison in `lookup` decides.
function sampleHash(bytes: Uint8Array, start: number, end: number): number {
  const length = end - start;
  let hash = Math.imul(0x811c9dc5 ^ length, 0x01000193);
  const step = length <= 32 ? 1 : Math.floor(length / 32);
  for (let index = start; index < end; index += step) hash = Math.imul(hash ^ bytes[index]!, 0x01000193);
  if (length > 0) hash = Math.imul(hash ^ bytes[end - 1]!, 0x01000193);
  // 30 bits: a small integer to V8, so the Map key is neither boxed nor hashed as a double.
  return hash & 0x3fffffff;
}

// Four bytes per step: a byte loop cost ~4 ns a byte, and a native compare needs a view object
// per message plus the call, more than a message of a few hundred bytes takes to compare.
function sameBytes(entry: Entry<unknown>, view: DataView, start: number, end: number): boolean {
  const length = end - start;
  if (entry.bytes.length !== length) return false;
  const kept = entry.view;
  let index = 0;
  for (; index + 4 <= length; index += 4) if (kept.getUint32(index) !== view.getUint32(start + index)) return false;
  for (; index < length; index++) if (kept.getUint8(index) !== view.getUint8(start + index)) return false;
  return true;
}

// Typed arrays (bytes fields) cannot be frozen while they have elements; they are left as they are.
function deepFreeze(value: object): void {
  if (Object.isFrozen(value) || ArrayBuffer.isView(value)) return;
  Object.freeze(value);
  for (const key of Object.keys(value)) {
    const child = (value as Record<string, unknown>)[key];
    if (typeof child === "object" && child !== null) deepFreeze(child);
  }
}
