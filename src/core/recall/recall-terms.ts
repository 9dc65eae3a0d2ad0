/**
 * Why it exists: an agent looks for what it dropped by the names it remembers — a file name, one
 * directory of a path, a command, an error's words — so a message must be findable by the parts of
 * what it holds as well as by the whole. Terms are found by one pass over the characters, no regular
 * expression, so the cost of a text is linear in its length whatever it holds.
 *
 * The terms of a text: every maximal run of letters and digits (ASCII letters and digits, and any
 * character from U+00C0 up but general and CJK punctuation, so words of other scripts stay whole),
 * lower-cased; and every "word"
 * (a run between whitespace, quotes, brackets, commas, semicolons, pipes and backslashes, without
 * trailing `.:!?` or leading `:`) that holds anything besides letters and digits, lower-cased whole:
 * `src/store/a.ts` gives `src`, `store`, `a`, `ts` and `src/store/a.ts`. Runs longer than
 * `maxTermCharacters` (a hash, base64) and words longer than `maxWordCharacters` are not terms.
 */

/** The longest run of letters and digits that is a term, in UTF-16 code units. */
export const maxTermCharacters = 64;
/** The longest whole word (a path, a URL) that is a term. */
export const maxWordCharacters = 256;

/** How many times each term occurs in a text, and how many terms it has in all (its length for BM25). */
export interface TermCounts {
  counts: Map<string, number>;
  length: number;
}

/** Calls `emit` with each term of `text`, in order, repeats included. */
export function forEachTerm(text: string, emit: (term: string) => void): void {
  // Lower-casing the text once is several times cheaper than lower-casing each term; where it
  // changes the length (a few characters lower-case to two), each term is lower-cased instead.
  const lowered = text.toLowerCase();
  const sameLength = lowered.length === text.length;
  const term = (from: number, to: number) => (sameLength ? lowered.slice(from, to) : text.slice(from, to).toLowerCase());
  let wordStart = -1;
  let runStart = -1;
  let wordHasPunctuation = false;
  const endRun = (end: number) => {
    if (runStart >= 0 && end - runStart <= maxTermCharacters) emit(term(runStart, end));
    runStart = -1;
  };
  const endWord = (end: number) => {
    endRun(end);
    if (wordStart < 0) return;
    let from = wordStart;
    let to = end;
    while (to > from && isTrailingPunctuation(text.charCodeAt(to - 1))) to--;
    while (from < to && text.charCodeAt(from) === 0x3a) from++;
    if (wordHasPunctuation && to - from <= maxWordCharacters && hasPunctuationBetween(text, from, to) && hasWordCharacterBetween(text, from, to)) {
      emit(term(from, to));
    }
    wordStart = -1;
    wordHasPunctuation = false;
  };
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    if (isWordCharacter(code)) {
      if (wordStart < 0) wordStart = index;
      if (runStart < 0) runStart = index;
    } else if (isWordBoundary(code)) {
      endWord(index);
    } else {
      endRun(index);
      if (wordStart < 0) wordStart = index;
      wordHasPunctuation = true;
    }
  }
  endWord(text.length);
}

/** The term counts of `text`. */
export function termCounts(text: string): TermCounts {
  const counts = new Map<string, number>();
  let length = 0;
  forEachTerm(text, (term) => {
    counts.set(term, (counts.get(term) ?? 0) + 1);
    length++;
  });
  return { counts, length };
}

/** The distinct terms of `text` in the order they first occur. */
export function distinctTerms(text: string): string[] {
  const seen = new Set<string>();
  forEachTerm(text, (term) => seen.add(term));
  return [...seen];
}

function isWordCharacter(code: number): boolean {
  if (code < 0x80) return (code >= 0x30 && code <= 0x39) || (code >= 0x41 && code <= 0x5a) || (code >= 0x61 && code <= 0x7a);
  // Latin-1 punctuation and signs, general punctuation (dashes, quotes, spaces), CJK punctuation and the BOM are not.
  return !(code <= 0xbf || (code >= 0x2000 && code <= 0x206f) || (code >= 0x3000 && code <= 0x303f) || code === 0xfeff);
}

/** Whitespace, quotes, brackets, `,;|\`: what ends a word. */
function isWordBoundary(code: number): boolean {
  switch (code) {
    case 0x20: case 0x09: case 0x0a: case 0x0b: case 0x0c: case 0x0d: case 0xa0: case 0x2028: case 0x2029: case 0x3000: case 0xfeff:
    case 0x2000: case 0x2001: case 0x2002: case 0x2003: case 0x2004: case 0x2005: case 0x2006: case 0x2007: case 0x2008: case 0x2009: case 0x200a: case 0x200b:
    case 0x22: case 0x27: case 0x60: case 0x28: case 0x29: case 0x5b: case 0x5d: case 0x7b: case 0x7d: case 0x3c: case 0x3e:
    case 0x2c: case 0x3b: case 0x7c: case 0x5c:
      return true;
    default:
      return false;
  }
}

function isTrailingPunctuation(code: number): boolean {
  return code === 0x2e || code === 0x3a || code === 0x21 || code === 0x3f;
}

function hasPunctuationBetween(text: string, from: number, to: number): boolean {
  for (let index = from; index < to; index++) if (!isWordCharacter(text.charCodeAt(index))) return true;
  return false;
}

function hasWordCharacterBetween(text: string, from: number, to: number): boolean {
  for (let index = from; index < to; index++) if (isWordCharacter(text.charCodeAt(index))) return true;
  return false;
}
