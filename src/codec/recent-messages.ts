import { randomBytes } from "node:crypto";
import { deepFreeze } from "./immutability.js";

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
 *
 * Cost per lookup is linear in the message whatever a caller sends: the hash covers every byte
 * and is seeded per instance, so a caller cannot aim messages at one bucket, and a bucket holds at
 * most `bucketEntries` entries anyway (a hash sampling 33 bytes let 6,000 crafted messages of one
 * 6 MB request cost ~19 s of compares before any validation).
 */
export class RecentMessages<T extends object> {
  private entries = new Map<number, Entry<T>[]>();
  private bytes = 0;
  private readonly seed: number;
  /** Lookups and the hits among them since this instance was made (for metrics). */
  lookups = 0;
  hits = 0;

  constructor(
    readonly maxBytes: number,
    seed = randomBytes(4).readUInt32LE(0),
  ) {
    this.seed = seed | 0;
  }

  /** The message decoded earlier from exactly `bytes[start, end)`, if it is still kept. */
  lookup(bytes: Uint8Array, start: number, end: number): T | undefined {
    this.lookups++;
    const bucket = this.entries.get(contentHash(this.seed, this.viewOf(bytes), start, end));
    if (bucket === undefined) return undefined;
    for (const entry of bucket) {
      if (sameBytes(entry, this.viewOf(bytes), start, end)) {
        this.hits++;
        return entry.message;
      }
    }
    return undefined;
  }

  /** Keeps `message` as the decoding of `bytes[start, end)` and freezes it; returns it. */
  store(bytes: Uint8Array, start: number, end: number, message: T): T {
    const length = end - start;
    const cost = length + entryOverheadBytes;
    // Frozen whether kept or not: whoever gets it must not see it change (codec/immutability.ts).
    deepFreeze(message);
    if (cost > this.maxBytes) return message;
    if (this.bytes + cost > this.maxBytes) {
      this.entries = new Map();
      this.bytes = 0;
    }
    const hash = contentHash(this.seed, this.viewOf(bytes), start, end);
    // A copy: a Buffer's slice() would share (and keep alive) the whole request.
    const kept = Uint8Array.prototype.slice.call(bytes, start, end);
    const entry = { bytes: kept, view: new DataView(kept.buffer, kept.byteOffset, kept.byteLength), message };
    const bucket = this.entries.get(hash);
    if (bucket === undefined) this.entries.set(hash, [entry]);
    else if (bucket.length < bucketEntries) bucket.push(entry);
    else return message;
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

/** Entries sharing one hash value; a full bucket takes no more (the message is decoded, not kept). */
export const bucketEntries = 4;

// Every byte, four at a time, mixed as in MurmurHash3's body and finalizer, from a per-instance
// seed: messages of one conversation share prefixes (ids "m1", "m2"…) and differ anywhere.
function contentHash(seed: number, view: DataView, start: number, end: number): number {
  let hash = seed ^ (end - start);
  let index = start;
  for (; index + 4 <= end; index += 4) hash = mix(hash, view.getUint32(index, true));
  let tail = 0;
  for (let shift = 0; index < end; index++, shift += 8) tail |= view.getUint8(index) << shift;
  hash = mix(hash, tail);
  hash ^= hash >>> 16;
  hash = Math.imul(hash, 0x85ebca6b);
  hash ^= hash >>> 13;
  hash = Math.imul(hash, 0xc2b2ae35);
  hash ^= hash >>> 16;
  // 30 bits: a small integer to V8, so the Map key is neither boxed nor hashed as a double.
  return hash & 0x3fffffff;
}

function mix(hash: number, word: number): number {
  let k = Math.imul(word, 0xcc9e2d51);
  k = (k << 15) | (k >>> 17);
  hash ^= Math.imul(k, 0x1b873593);
  hash = (hash << 13) | (hash >>> 19);
  return (Math.imul(hash, 5) + 0xe6546b64) | 0;
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
