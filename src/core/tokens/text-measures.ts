/** Unicode code points ("runes") of a string: UTF-16 length minus the low halves of surrogate pairs. */
export function runeCount(text: string): number {
  let count = text.length;
  for (let index = 0; index < text.length; index++) {
    const unit = text.charCodeAt(index);
    if (unit >= 0xdc00 && unit <= 0xdfff && index > 0) {
      const previous = text.charCodeAt(index - 1);
      if (previous >= 0xd800 && previous <= 0xdbff) count--;
    }
  }
  return count;
}

/** UTF-8 byte length, without allocating. */
export function utf8ByteCount(text: string): number {
  return Buffer.byteLength(text, "utf8");
}
