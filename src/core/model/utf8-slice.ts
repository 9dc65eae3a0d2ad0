/**
 * A slice of `text` by UTF-8 byte offsets, both ends moved back to the start of the character they
 * fall in, so a slice never splits a character and slices read in turn (`end` as the next
 * `start`) put the text back together exactly. Linear in the text.
 */
export function utf8Slice(text: string, start: number, maxBytes: number): { text: string; start: number; end: number; totalBytes: number } {
  const bytes = Buffer.from(text, "utf8");
  const totalBytes = bytes.length;
  let from = Math.min(start, totalBytes);
  while (from > 0 && from < totalBytes && (bytes[from]! & 0xc0) === 0x80) from--;
  let to = Math.min(totalBytes, from + maxBytes);
  while (to > from && to < totalBytes && (bytes[to]! & 0xc0) === 0x80) to--;
  return { text: bytes.toString("utf8", from, to), start: from, end: to, totalBytes };
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
  return { text: head.text, bytes: head.end, totalBytes };
}
