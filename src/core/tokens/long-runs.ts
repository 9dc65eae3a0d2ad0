import type { DeadlineCheck } from "../compile/deadline.js";

/**
 * Why it exists: BPE merges within one pre-tokenizer piece, and gpt-tokenizer's merge loop is
 * quadratic in the piece's length. A piece is a run without a word break: 100 KB of `=` (a log
 * separator) took 10 s to count, 200 KB of `a` 40 s. Counting costs about the same per character
 * for pieces up to a few hundred characters (measured on random letters: 0.38 µs at 32, 0.50 at
 * 512, 0.65 at 1,024, then growing with the length), so long texts are counted in chunks whose
 * pieces stay short.
 *
 * Chunks end just before a space that follows a non-space. No piece of o200k_base, cl100k_base or
 * o200k_harmony spans such a place (a piece may start with a space, never end before one), so those
 * cuts are exact. A stretch longer than `longestPiece` without such a place is cut where it reaches
 * that length; each of these cuts may change the count by a token or two. The documented error is
 * 0.5 % of the exact count on such stretches and none elsewhere (test/core/token-chunks.test.ts);
 * bench/token-splitting.ts measured 0.00 % on runs of one character, up to 0.28 % on random
 * letters, base64 and minified code, 0 on prose and code with spaces.
 */

/** Longest stretch of text counted in one piece; longer ones are cut (approximate) at this length. */
export const longestPiece = 256;
/** Texts are counted in chunks of about this many characters when they can be cut exactly. */
const chunkCharacters = 16_384;

/**
 * `count` summed over chunks of `text` in which no piece is longer than `longestPiece`;
 * `betweenChunks` runs after each chunk (it may throw to give up).
 */
export function countInChunks(text: string, count: (text: string) => number, betweenChunks?: () => void): number {
  if (text.length <= longestPiece) return count(text);
  // The same cuts as `chunkCuts`, inline: a generator made this scan 40 % slower (most texts of a
  // cold compile are a few hundred characters and never cut).
  let total = 0;
  let chunkStart = 0;
  let pieceStart = 0;
  for (let index = 1; index < text.length; index++) {
    const unit = text.charCodeAt(index);
    if (unit === 0x20 && !isWhitespace(text.charCodeAt(index - 1))) {
      pieceStart = index;
      if (index - chunkStart >= chunkCharacters) {
        total += count(text.slice(chunkStart, index));
        chunkStart = index;
        betweenChunks?.();
      }
    } else if (index - pieceStart >= longestPiece) {
      const cut = unit >= 0xdc00 && unit <= 0xdfff ? index - 1 : index;
      if (cut > chunkStart) {
        total += count(text.slice(chunkStart, cut));
        chunkStart = cut;
        betweenChunks?.();
      }
      pieceStart = cut;
    }
  }
  return total + count(text.slice(chunkStart));
}

/**
 * `countInChunks` giving the event loop a turn between chunks when `clock` says a slice of work
 * has passed (a 16 MiB text gpt-tokenizer has not seen takes seconds).
 */
export async function countInChunksPaced(text: string, count: (text: string) => number, clock: DeadlineCheck, stage: string): Promise<number> {
  if (text.length <= longestPiece) return count(text);
  let total = 0;
  let chunkStart = 0;
  for (const cut of chunkCuts(text)) {
    total += count(text.slice(chunkStart, cut));
    // A chunk of 256 characters can take a millisecond (5 µs per character on random letters): the
    // clock is read after every one, which costs nothing beside that.
    if (clock.checkNow(stage)) await clock.pause(stage);
    chunkStart = cut;
  }
  return total + count(text.slice(chunkStart));
}

/**
 * Where `text` (longer than `longestPiece`) is cut into chunks, in order; the last chunk runs to its
 * end. The cuts of `countInChunks` (test/core/event-loop-turns.test.ts compares the counts).
 */
function* chunkCuts(text: string): Generator<number> {
  let chunkStart = 0;
  // Where the piece running at `index` may have started: the last exact cut place, or a forced cut.
  let pieceStart = 0;
  for (let index = 1; index < text.length; index++) {
    const unit = text.charCodeAt(index);
    if (unit === 0x20 && !isWhitespace(text.charCodeAt(index - 1))) {
      pieceStart = index;
      if (index - chunkStart >= chunkCharacters) {
        yield index;
        chunkStart = index;
      }
    } else if (index - pieceStart >= longestPiece) {
      // Never between the halves of a surrogate pair.
      const cut = unit >= 0xdc00 && unit <= 0xdfff ? index - 1 : index;
      if (cut > chunkStart) {
        yield cut;
        chunkStart = cut;
      }
      pieceStart = cut;
    }
  }
}

function isWhitespace(unit: number): boolean {
  return unit === 0x20 || (unit >= 0x09 && unit <= 0x0d) || unit === 0x85 || unit === 0xa0 || unit === 0x1680 || (unit >= 0x2000 && unit <= 0x200a) || unit === 0x2028 || unit === 0x2029 || unit === 0x202f || unit === 0x205f || unit === 0x3000 || unit === 0xfeff;
}
