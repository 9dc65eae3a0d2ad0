/**
 * Unsigned varints written front to back, for the codec's forward writers (state encoding, the
 * request carriers of the binary connect path). Arithmetic instead of bit shifts, so values up to
 * 2^53 — field tags reach 2^32 — are written exactly. The back-to-front encoder has its own
 * writer, since it writes the bytes in the other order.
 */
export function varintLength(value: number): number {
  let length = 1;
  while (value >= 0x80) {
    value = Math.floor(value / 128);
    length++;
  }
  return length;
}

/** Writes `value` at `offset` and returns the offset after it. */
export function writeVarint(bytes: Uint8Array, offset: number, value: number): number {
  while (value >= 0x80) {
    bytes[offset++] = (value % 128) | 0x80;
    value = Math.floor(value / 128);
  }
  bytes[offset++] = value;
  return offset;
}
