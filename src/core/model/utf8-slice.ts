/**
 * A slice of `text` by UTF-8 byte offsets, both ends moved back to the start of the character they
 * fall in, so a slice never splits a character and slices read in turn (`end` as the next
 * `start`) put the text back together exactly. Linear in the text.
 *
 * A slice always moves forward: when `maxBytes` is smaller than the character at `start` (1 byte
 * asked, a 2- to 4-byte character there), the slice is that one whole character, up to 3 bytes
 * over `maxBytes`. Cutting back to the character's start would give an empty slice ending where it
 * began, and a reader paging by `end` would never move (issue 29 #13).
 */
export function utf8Slice(text: string, start: number, maxBytes: number): { text: string; start: number; end: number; totalBytes: number } {
  return utf8SliceOf(Buffer.from(text, "utf8"), start, maxBytes);
}

/** `utf8Slice` of text already encoded: costs the slice, not the text (a reader of a 12 MB result pays 64 KB per read). */
export function utf8SliceOf(bytes: Buffer, start: number, maxBytes: number): { text: string; start: number; end: number; totalBytes: number } {
  const totalBytes = bytes.length;
  let from = Math.min(start, totalBytes);
  while (from > 0 && from < totalBytes && isContinuation(bytes[from]!)) from--;
  let to = Math.min(totalBytes, from + maxBytes);
  while (to > from && to < totalBytes && isContinuation(bytes[to]!)) to--;
  if (to === from && from < totalBytes && maxBytes > 0) {
    // The character at `from` is longer than `maxBytes`: take it whole.
    to = from + 1;
    while (to < totalBytes && isContinuation(bytes[to]!)) to++;
  }
  return { text: bytes.toString("utf8", from, to), start: from, end: to, totalBytes };
}

function isContinuation(byte: number): boolean {
  return (byte & 0xc0) === 0x80;
}

/**
 * `utf8Slice(text, 0, maxBytes)` without encoding the whole text: the head of `maxBytes` UTF-8
 * bytes lies within the first `maxBytes` UTF-16 units, so only those are encoded (a preview of a
 * 40 KB result costs its 1 KB head, not 40 KB). A surrogate pair cut in two at the end encodes as
 * three bytes more than the units before it, so the cut back to a character start removes it.
 */
export function utf8Head(text: string, maxBytes: number): { text: string; bytes: number; totalBytes: number } {
  const totalBytes = Buffer.byteLength(text, "utf8");
  if (totalBytes <= maxBytes) return { text, bytes: totalBytes, totalBytes };
  const head = utf8Slice(text.slice(0, maxBytes), 0, maxBytes);
  // A head is never over `maxBytes`: the one whole character a slice would take is not a head.
  if (head.end > maxBytes) return { text: "", bytes: 0, totalBytes };
  return { text: head.text, bytes: head.end, totalBytes };
}
