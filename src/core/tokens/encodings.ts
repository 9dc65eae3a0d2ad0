import { Code, ConnectError } from "@connectrpc/connect";
import { TokenizerEncoding } from "../../../gen/ts/contextd/v1/compile_pb.js";
import { countInChunks } from "./long-runs.js";

/**
 * Counts the BPE tokens of a text. Never throws on special-token strings. A long text is counted in
 * chunks, and `betweenChunks` (which may throw, to give up) is called after each.
 */
export type TextTokenCounter = (text: string, betweenChunks?: () => void) => number;

interface EncodingModule {
  countTokens(text: string, options?: { disallowedSpecial?: Set<string> }): number;
}

const loaders: Record<number, () => Promise<EncodingModule>> = {
  [TokenizerEncoding.UNSPECIFIED]: () => import("gpt-tokenizer/encoding/o200k_base"),
  [TokenizerEncoding.O200K_BASE]: () => import("gpt-tokenizer/encoding/o200k_base"),
  [TokenizerEncoding.CL100K_BASE]: () => import("gpt-tokenizer/encoding/cl100k_base"),
  [TokenizerEncoding.O200K_HARMONY]: () => import("gpt-tokenizer/encoding/o200k_harmony"),
};

const loaded = new Map<number, Promise<TextTokenCounter>>();

// An empty disallowed set turns off special-token detection: "<|endoftext|>" typed by a user is
// counted as the plain text it is, and never throws (gpt-tokenizer's default would throw).
const plainText = { disallowedSpecial: new Set<string>() };

/**
 * The token counter of an encoding, linear in the text (`countInChunks`; exact but for stretches
 * longer than `longestPiece` without a space). Rank tables are megabytes, so each is imported on
 * first use and shared afterwards.
 */
export function loadEncoding(encoding: TokenizerEncoding): Promise<TextTokenCounter> {
  const key = encoding === TokenizerEncoding.UNSPECIFIED ? TokenizerEncoding.O200K_BASE : encoding;
  let counter = loaded.get(key);
  if (!counter) {
    const loader = loaders[key];
    if (!loader) return Promise.reject(new ConnectError(`unknown tokenizer encoding ${encoding}`, Code.InvalidArgument));
    counter = loader().then((module) => {
      const countPlain = (text: string) => module.countTokens(text, plainText);
      return (text: string, betweenChunks?: () => void) => (text === "" ? 0 : countInChunks(text, countPlain, betweenChunks));
    });
    loaded.set(key, counter);
  }
  return counter;
}
