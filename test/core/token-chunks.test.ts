import { countTokens } from "gpt-tokenizer/encoding/o200k_base";
import { countTokens as countCl100k } from "gpt-tokenizer/encoding/cl100k_base";
import { describe, expect, it } from "vitest";
import { TokenizerEncoding } from "#gen/contextd/v1/compile_pb";
import { loadEncoding } from "../../src/core/tokens/encodings.js";
import { countInChunks, longestPiece } from "../../src/core/tokens/long-runs.js";

const plain = { disallowedSpecial: new Set<string>() };
const exactO200k = (text: string) => countTokens(text, plain);
const exactCl100k = (text: string) => countCl100k(text, plain);

/** Deterministic pseudo-random text from `alphabet` pieces. */
function textOf(pieces: readonly string[], length: number, seed: number): string {
  let state = seed;
  let text = "";
  while (text.length < length) {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    text += pieces[state % pieces.length];
  }
  return text;
}

describe("counting long texts in chunks", () => {
  it("is exact on text with spaces: prose, code, newlines, tabs, runs of spaces, punctuation before newlines", () => {
    const pieces = ["the ", "agent ", "called", " a", " tool.\n\n", "  ", "\t", "foo();\n    ", "x = 1;\r\n", " 12345", "don't ", "ÄÖÜ ", "漢字 ", "🙂 ", " - ", "/path/", "\n"];
    for (const seed of [1, 2, 3]) {
      const text = textOf(pieces, 60_000, seed);
      expect(countInChunks(text, exactO200k)).toBe(exactO200k(text));
      expect(countInChunks(text, exactCl100k)).toBe(exactCl100k(text));
    }
  });

  it(`stays within 0.5 % of the exact count on stretches without a space longer than ${longestPiece} characters`, () => {
    const cases = [
      "=".repeat(20_000),
      "a".repeat(20_000),
      textOf("abcdefghijklmnopqrstuvwxyz".split(""), 20_000, 7),
      textOf("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".split(""), 20_000, 9),
      textOf(["🙂", "é", "a", "漢"], 20_000, 11),
    ];
    for (const text of cases) {
      const exact = exactO200k(text);
      expect(Math.abs(countInChunks(text, exactO200k) - exact) / exact).toBeLessThanOrEqual(0.005);
    }
  });

  it("never cuts between the halves of a surrogate pair", () => {
    const seen: string[] = [];
    countInChunks("🙂".repeat(1_000), (chunk) => (seen.push(chunk), 1));
    for (const chunk of seen) expect(chunk).toBe("🙂".repeat(chunk.length / 2));
  });

  // The unchunked counter took 10 s on 100 KB of "=" and 40 s on 200 KB of "a" (4.6 s and 21 s on
  // this machine); the test timeout is 5 s.
  it("counts 100 KB of = and 200 KB of a through the TOKENIZER counter, exactly", { timeout: 5_000 }, async () => {
    const count = await loadEncoding(TokenizerEncoding.O200K_BASE);
    // The exact counts, from gpt-tokenizer unchunked.
    expect(count("=".repeat(100_000))).toBe(1_562);
    expect(count("a".repeat(200_000))).toBe(25_000);
  });
});
