import { Code, ConnectError } from "@connectrpc/connect";
import { TokenizerEncoding } from "#gen/contextd/v1/compile_pb";
import type { DeadlineCheck } from "../compile/deadline.js";
import { countInChunks, countInChunksPaced } from "./long-runs.js";

/**
 * Counts the BPE tokens of a text. Never throws on special-token strings. A long text is counted in
 * chunks, and `betweenChunks` (which may throw, to give up) is called after each.
 */
export type TextTokenCounter = (text: string, betweenChunks?: () => void) => number;

/** `TextTokenCounter` that gives the event loop a turn between chunks when `clock` says one is due. */
export type PacedTextTokenCounter = (text: string, clock: DeadlineCheck, stage: string) => Promise<number>;

interface EncodingCounters {
  count: TextTokenCounter;
  countPaced: PacedTextTokenCounter;
}

interface EncodingModule {
  countTokens(text: string, options?: { disallowedSpecial?: Set<string> }): number;
}

const loaders: Record<number, () => Promise<EncodingModule>> = {
  [TokenizerEncoding.UNSPECIFIED]: () => import("gpt-tokenizer/encoding/o200k_base"),
  [TokenizerEncoding.O200K_BASE]: () => import("gpt-tokenizer/encoding/o200k_base"),
  [TokenizerEncoding.CL100K_BASE]: () => import("gpt-tokenizer/encoding/cl100k_base"),
  [TokenizerEncoding.O200K_HARMONY]: () => import("gpt-tokenizer/encoding/o200k_harmony"),
};

const loaded = new Map<number, Promise<EncodingCounters>>();

// An empty disallowed set turns off special-token detection: "<|endoftext|>" typed by a user is
// counted as the plain text it is, and never throws (gpt-tokenizer's default would throw).
const plainText = { disallowedSpecial: new Set<string>() };

/**
 * The token counter of an encoding, linear in the text (`countInChunks`; exact but for stretches
 * longer than `longestPiece` without a space). Rank tables are megabytes, so each is imported on
 * first use and shared afterwards.
 */
export async function loadEncoding(encoding: TokenizerEncoding): Promise<TextTokenCounter> {
  return (await loadCounters(encoding)).count;
}

/** The paced twin of `loadEncoding`'s counter: the same counts, for texts long enough to take milliseconds. */
export async function loadPacedEncoding(encoding: TokenizerEncoding): Promise<PacedTextTokenCounter> {
  return (await loadCounters(encoding)).countPaced;
}

function loadCounters(encoding: TokenizerEncoding): Promise<EncodingCounters> {
  const key = encoding === TokenizerEncoding.UNSPECIFIED ? TokenizerEncoding.O200K_BASE : encoding;
  let counters = loaded.get(key);
  if (!counters) {
    const loader = loaders[key];
    if (!loader) return Promise.reject(new ConnectError(`unknown tokenizer encoding ${encoding}`, Code.InvalidArgument));
    counters = loader().then((module) => {
      const countPlain = (text: string) => module.countTokens(text, plainText);
      return {
        count: (text: string, betweenChunks?: () => void) => (text === "" ? 0 : countInChunks(text, countPlain, betweenChunks)),
        countPaced: (text: string, clock: DeadlineCheck, stage: string) => countInChunksPaced(text, countPlain, clock, stage),
      };
    });
    loaded.set(key, counters);
  }
  return counters;
}
