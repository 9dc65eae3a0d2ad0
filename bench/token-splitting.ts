// How far counting in chunks (src/core/tokens/long-runs.ts) is from gpt-tokenizer's exact count,
// and how their times grow: texts with long stretches without a space (a run of "=", one long
// word, random letters, base64, minified code) and ordinary text (prose, code, newlines), at
// sizes where the exact count still finishes, side by side; then the chunked count alone up to
// 16 MiB, the largest request. Each timing counts a text neither counter has seen (gpt-tokenizer
// memoizes pieces). Run with `npm run bench:tokens`.
import { countTokens } from "gpt-tokenizer/encoding/o200k_base";
import { countInChunks, longestPiece } from "../src/core/tokens/long-runs.js";

const plain = { disallowedSpecial: new Set<string>() };
const exact = (text: string) => countTokens(text, plain);

/** A deterministic text of `length` characters of `kind`; `seed` makes a fresh one. */
function sample(kind: string, length: number, seed: number): string {
  let state = (seed * 2654435761) >>> 0 || 1;
  const next = () => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32;
  const letters = (count: number) => {
    let text = "";
    for (let index = 0; index < count; index++) text += String.fromCharCode(97 + Math.floor(next() * 26));
    return text;
  };
  const base64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const words = ["the", "agent", "called", "a", "tool", "and", "read", "context", "windows", "of", "long", "documents", "while", "tokens"];
  let text = "";
  switch (kind) {
    case "run of '='":
      // The seed shifts the length so every text is new to the memo.
      return "=".repeat(length + seed);
    case "one long word":
      return "a".repeat(length + seed);
    case "random letters":
      return letters(length);
    case "base64":
      while (text.length < length) text += base64[Math.floor(next() * 64)];
      return text;
    case "minified code":
      while (text.length < length) text += `${letters(1 + Math.floor(next() * 6))}${"(){};=.,+"[Math.floor(next() * 9)]}`;
      return text.slice(0, length);
    case "prose":
      while (text.length < length) text += `${words[Math.floor(next() * words.length)]}${next() < 0.1 ? ". " : " "}`;
      return text.slice(0, length);
    case "code, newlines":
      while (text.length < length) text += `${next() < 0.2 ? "\n    " : " "}${letters(1 + Math.floor(next() * 8))}${next() < 0.3 ? "();" : ""}`;
      return text.slice(0, length);
    default:
      throw new Error(kind);
  }
}

function timed(count: (text: string) => number, text: string): { tokens: number; ms: number } {
  const started = process.hrtime.bigint();
  const tokens = count(text);
  return { tokens, ms: Number(process.hrtime.bigint() - started) / 1e6 };
}

const kinds = ["run of '='", "one long word", "random letters", "base64", "minified code", "prose", "code, newlines"];
const pad = (value: string | number, width: number) => String(value).padStart(width);
exact(sample("prose", 10_000, 99));
console.log(`longest piece counted whole: ${longestPiece} characters`);
console.log(`${"text".padEnd(16)}${pad("chars", 10)}${pad("exact", 10)}${pad("chunked", 10)}${pad("error", 9)}${pad("exact ms", 11)}${pad("chunked ms", 12)}`);
let seed = 1;
for (const kind of kinds) {
  for (const length of [1_024, 4_096, 16_384, 32_768]) {
    const text = sample(kind, length, seed++);
    const reference = exact(text);
    const chunkedCount = countInChunks(text, exact);
    const exactTime = timed(exact, sample(kind, length, seed++)).ms;
    const chunkedTime = timed((fresh) => countInChunks(fresh, exact), sample(kind, length, seed++)).ms;
    const error = (100 * (chunkedCount - reference)) / reference;
    console.log(
      `${kind.padEnd(16)}${pad(text.length, 10)}${pad(reference, 10)}${pad(chunkedCount, 10)}${pad(`${error.toFixed(2)}%`, 9)}${pad(exactTime.toFixed(1), 11)}${pad(chunkedTime.toFixed(1), 12)}`,
    );
  }
}
console.log(`\nchunked only${pad("chars", 14)}${pad("tokens", 10)}${pad("ms", 10)}${pad("µs/char", 10)}`);
for (const kind of kinds) {
  for (const length of [100_000, 1_000_000, 16 * 1024 * 1024]) {
    const { tokens, ms } = timed((fresh) => countInChunks(fresh, exact), sample(kind, length, seed++));
    console.log(`${kind.padEnd(16)}${pad(length, 10)}${pad(tokens, 10)}${pad(ms.toFixed(0), 10)}${pad(((1000 * ms) / length).toFixed(3), 10)}`);
  }
}
