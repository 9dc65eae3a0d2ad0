import { Code, ConnectError } from "@connectrpc/connect";
import { TokenizerEncoding } from "../../../gen/ts/contextd/v1/compile_pb.js";

/** Counts the BPE tokens of a text. Never throws on special-token strings. */
export type TextTokenCounter = (text: string) => number;

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
 * The token counter of an encoding. Rank tables are megabytes, so each is imported on first use
 * and shared afterwards.
 */
export function loadEncoding(encoding: TokenizerEncoding): Promise<TextTokenCounter> {
  const key = encoding === TokenizerEncoding.UNSPECIFIED ? TokenizerEncoding.O200K_BASE : encoding;
  let counter = loaded.get(key);
  if (!counter) {
    const loader = loaders[key];
    if (!loader) return Promise.reject(new ConnectError(`unknown tokenizer encoding ${encoding}`, Code.InvalidArgument));
    counter = loader().then((module) => (text: string) => (text === "" ? 0 : module.countTokens(text, plainText)));
    loaded.set(key, counter);
  }
  return counter;
}
