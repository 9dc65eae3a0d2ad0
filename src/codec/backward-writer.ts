import { WireType } from "@bufbuild/protobuf/wire";
import type { RetainedEncodings } from "./retained-encodings.js";

/**
 * The byte buffer `protobuf-encoder.ts` writes into, back to front: a nested message is written
 * before its length, so the length is known without a second pass or a copy. It also remembers
 * what it wrote (message objects, lists as repeated fields) so a second occurrence is a copy of
 * those bytes, and, chunked, references long kept encodings instead of copying them.
 */

/** Bytes of the prefix gRPC, gRPC-Web and Connect streaming put before each message: flags, then the length. */
export const envelopeHeaderBytes = 5;

/**
 * Where a message's encoding (without tag and length) already sits in the buffer, as distances
 * from the buffer's end: those stay valid when the buffer grows, because growing keeps the tail.
 */
interface Encoded {
  start: number;
  end: number;
}

/**
 * Where a list's encoding as one repeated field sits. Its bytes depend on the field number only
 * (payload, snapshot and persistence all send history as field 2), and a list may be sent as several.
 */
interface EncodedList extends Encoded {
  fieldNumber: number;
  next: EncodedList | undefined;
}

/** Up to this many bytes, copies are made by hand rather than by a native call. */
const shortCopy = 32;

/** In a chunked writer, kept encodings and copies of at least this many bytes become chunks of their own. */
const chunkMinimum = 16 * 1024;

/** Bytes of the output that are not in the writer's buffer: a kept encoding, or a finished stretch of a buffer. */
interface Piece {
  bytes: Uint8Array;
  /** Distance of its last byte's end from the output's end. */
  end: number;
}

/**
 * Writes from the end of a buffer towards its start; grows by doubling, copying the tail once.
 *
 * A chunked writer produces the output as a list of chunks: long runs of bytes it already holds
 * (kept encodings of stored lists, repeats of them) are referenced, not copied, so a response made
 * mostly of a stored conversation needs no fresh buffer of its size. Everything written after such
 * a piece goes into the buffer in front of it (the "segment").
 */
export class BackwardWriter {
  private buffer: Buffer;
  private position: number;
  /** The end of the bytes in `buffer` that are still the output's front (the rest became pieces). */
  private segmentEnd: number;
  /** `length + position`: the output's length from `position` without adding up pieces on every call. */
  private base: number;
  /** Pieces, back to front (the output's last bytes first). */
  private readonly pieces: Piece[] = [];
  /** Bytes of the pieces that were referenced rather than written here. */
  private referenced = 0;
  /**
   * Message objects encoded by this writer. A message's bytes depend only on the object (its type
   * is fixed), so a second occurrence is a copy; objects are not mutated while being encoded.
   */
  readonly encoded = new Map<object, Encoded>();
  /** Message lists encoded by this writer, as whole repeated fields (tags and lengths included). */
  private readonly encodedLists = new Map<object, EncodedList>();

  constructor(
    initialSize: number,
    readonly retained: RetainedEncodings | undefined,
    private readonly chunked = false,
  ) {
    this.buffer = Buffer.allocUnsafe(initialSize);
    this.position = this.segmentEnd = this.base = initialSize;
  }

  /** Bytes written so far. */
  get length(): number {
    return this.base - this.position;
  }

  /** Bytes written into buffers rather than referenced (what the next writer of this type should allocate). */
  get bufferedLength(): number {
    return this.length - this.referenced;
  }

  /** The output as one array (a copy when the writer is chunked and made pieces). */
  finish(): Uint8Array {
    if (this.pieces.length === 0) return this.buffer.subarray(this.position, this.segmentEnd);
    return Buffer.concat(this.chunks());
  }

  /** The output as chunks in order; pieces may be kept encodings, shared and never to be modified. */
  chunks(): Uint8Array[] {
    const chunks: Uint8Array[] = [];
    if (this.segmentEnd > this.position) chunks.push(this.buffer.subarray(this.position, this.segmentEnd));
    for (let i = this.pieces.length - 1; i >= 0; i--) chunks.push(this.pieces[i]!.bytes);
    return chunks;
  }

  tag(fieldNumber: number, wireType: WireType): void {
    this.uint32(((fieldNumber << 3) | wireType) >>> 0);
  }

  uint32(value: number): void {
    const size = value < 0x80 ? 1 : value < 0x4000 ? 2 : value < 0x200000 ? 3 : value < 0x10000000 ? 4 : 5;
    this.reserve(size);
    let offset = (this.position -= size);
    while (value > 0x7f) {
      this.buffer[offset++] = (value & 0x7f) | 0x80;
      value >>>= 7;
    }
    this.buffer[offset] = value;
  }

  varint64({ lo, hi }: { lo: number; hi: number }): void {
    const bytes: number[] = [];
    let low = lo >>> 0;
    let high = hi >>> 0;
    while (high !== 0 || low > 0x7f) {
      bytes.push((low & 0x7f) | 0x80);
      low = ((low >>> 7) | (high << 25)) >>> 0;
      high >>>= 7;
    }
    bytes.push(low);
    this.reserve(bytes.length);
    this.position -= bytes.length;
    for (let i = 0; i < bytes.length; i++) this.buffer[this.position + i] = bytes[i]!;
  }

  /** Writes the envelope prefix of an uncompressed message of `length` bytes. */
  envelopeHeader(length: number): void {
    this.reserve(envelopeHeaderBytes);
    this.position -= envelopeHeaderBytes;
    this.buffer[this.position] = 0;
    this.buffer.writeUInt32BE(length, this.position + 1);
  }

  fixed32(value: number): void {
    this.reserve(4);
    this.position -= 4;
    this.buffer.writeUInt32LE(value >>> 0, this.position);
  }

  fixed64({ lo, hi }: { lo: number; hi: number }): void {
    this.reserve(8);
    this.position -= 8;
    this.buffer.writeUInt32LE(lo >>> 0, this.position);
    this.buffer.writeUInt32LE(hi >>> 0, this.position + 4);
  }

  double(value: number): void {
    this.reserve(8);
    this.position -= 8;
    this.buffer.writeDoubleLE(value, this.position);
  }

  float(value: number): void {
    this.reserve(4);
    this.position -= 4;
    this.buffer.writeFloatLE(value, this.position);
  }

  bytes(bytes: Uint8Array): void {
    this.reserve(bytes.byteLength);
    this.position -= bytes.byteLength;
    this.buffer.set(bytes, this.position);
  }

  /** Writes bytes that never change (a kept encoding): a chunked writer references long ones. */
  immutableBytes(bytes: Uint8Array): void {
    if (!this.chunked || bytes.byteLength < chunkMinimum) return this.bytes(bytes);
    this.endSegment();
    this.addPiece(bytes);
  }

  /** Turns the segment into a piece, so what follows can be a referenced piece. */
  private endSegment(): void {
    if (this.segmentEnd === this.position) return;
    this.pieces.push({ bytes: this.buffer.subarray(this.position, this.segmentEnd), end: this.base - this.segmentEnd });
    this.segmentEnd = this.position;
  }

  private addPiece(bytes: Uint8Array): void {
    this.pieces.push({ bytes, end: this.length });
    this.base += bytes.byteLength;
    this.referenced += bytes.byteLength;
  }

  /** Writes again the bytes of a message encoded earlier by this writer; false if it was not. */
  copyEncoded(message: object): boolean {
    const earlier = this.encoded.get(message);
    if (earlier === undefined) return false;
    this.copyRange(earlier.start, earlier.end);
    return true;
  }

  /** Writes again the bytes of a list encoded earlier by this writer as the same field number; false if it was not. */
  copyEncodedList(list: object, fieldNumber: number): boolean {
    for (let earlier = this.encodedLists.get(list); earlier !== undefined; earlier = earlier.next) {
      if (earlier.fieldNumber !== fieldNumber) continue;
      this.copyRange(earlier.start, earlier.end);
      return true;
    }
    return false;
  }

  /** Records that everything written since `end` is `list` encoded as repeated field `fieldNumber`. */
  rememberList(list: object, fieldNumber: number, end: number): void {
    this.encodedLists.set(list, { start: this.length, end, fieldNumber, next: this.encodedLists.get(list) });
  }

  /** The bytes written since the length was `end`; a view valid until the next write unless pieces intervene. */
  writtenSince(end: number): Uint8Array {
    if (end >= this.base - this.segmentEnd) return this.buffer.subarray(this.position, this.base - end);
    const bytes = Buffer.allocUnsafe(this.length - end);
    this.gather(this.length, end, bytes, 0);
    return bytes;
  }

  /** Writes again the bytes written between distances `start` and `end` from the output's end. */
  copyRange(start: number, end: number): void {
    const size = start - end;
    if (end < this.base - this.segmentEnd) {
      // Reaches into pieces: reference them when long, else copy them into the segment.
      if (this.chunked && size >= chunkMinimum) return this.referenceRange(start, end);
      this.reserve(size);
      this.position -= size;
      this.gather(start, end, this.buffer, this.position);
      return;
    }
    this.reserve(size);
    const target = this.position - size;
    if (size <= shortCopy) {
      // Small messages (a map's shared value, a short part) repeat by the thousand: a loop is
      // cheaper than the native call.
      const source = this.base - start;
      for (let i = 0; i < size; i++) this.buffer[target + i] = this.buffer[source + i]!;
    } else {
      this.buffer.copyWithin(target, this.base - start, this.base - end);
    }
    this.position = target;
  }

  /** Adds the bytes between distances `start` and `end` as pieces, back to front. */
  private referenceRange(start: number, end: number): void {
    this.endSegment();
    // Collected first: the pieces list grows while they are added.
    const parts: Uint8Array[] = [];
    for (const piece of this.pieces) {
      const pieceStart = piece.end + piece.bytes.byteLength;
      if (pieceStart <= end || piece.end >= start) continue;
      const from = Math.max(0, pieceStart - start);
      const to = piece.bytes.byteLength - Math.max(0, end - piece.end);
      parts.push(piece.bytes.subarray(from, to));
    }
    for (const part of parts) this.addPiece(part);
  }

  /** Copies the bytes between distances `start` and `end` into `target` at `offset`, wherever they are. */
  private gather(start: number, end: number, target: Uint8Array, offset: number): void {
    const segmentFrom = this.base - this.segmentEnd;
    // Front to back: the segment's part first (it is the output's front), then pieces by falling distance.
    if (start > segmentFrom) {
      const from = Math.max(end, segmentFrom);
      target.set(this.buffer.subarray(this.base - start, this.base - from), offset);
      offset += start - from;
    }
    for (let i = this.pieces.length - 1; i >= 0; i--) {
      const piece = this.pieces[i]!;
      const pieceStart = piece.end + piece.bytes.byteLength;
      if (pieceStart <= end || piece.end >= start) continue;
      const part = piece.bytes.subarray(Math.max(0, pieceStart - start), piece.bytes.byteLength - Math.max(0, end - piece.end));
      target.set(part, offset);
      offset += part.byteLength;
    }
  }

  /** Writes the UTF-8 bytes of `text`, then its length before them. */
  string(text: string): void {
    // Short ASCII strings (ids, names, enums as text) are copied by hand: cheaper than a native call.
    if (text.length < 64) {
      this.reserve(text.length);
      const start = this.position - text.length;
      let i = 0;
      for (; i < text.length; i++) {
        const code = text.charCodeAt(i);
        if (code > 0x7f) break;
        this.buffer[start + i] = code;
      }
      if (i === text.length) {
        this.position = start;
        this.uint32(text.length);
        return;
      }
    }
    const size = Buffer.byteLength(text, "utf8");
    this.reserve(size);
    this.position -= size;
    this.buffer.write(text, this.position, size, "utf8");
    this.uint32(size);
  }

  private reserve(size: number): void {
    if (this.position >= size) return;
    // Only the segment moves; pieces cut from the old buffer stay valid views of it.
    const used = this.segmentEnd - this.position;
    const next = Buffer.allocUnsafe(Math.max(this.buffer.length * 2, used + size + 1024));
    this.buffer.copy(next, next.length - used, this.position, this.segmentEnd);
    this.base += next.length - this.segmentEnd;
    this.buffer = next;
    this.segmentEnd = next.length;
    this.position = next.length - used;
  }
}
