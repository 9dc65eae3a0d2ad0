import { TokenizerEncoding } from "#gen/contextd/v1/compile_pb";

/**
 * Why it exists: a request that names its render model (`render{provider, model}`) but no
 * estimator was counted at chars/4, although contextd ships the BPE ranks of that model. chars/4
 * is off by a lot where it matters (code, non-Latin scripts, JSON tool arguments), and the budget
 * trusts it. This maps OpenAI's public model names to their encodings, the same table OpenAI's
 * tiktoken uses (`MODEL_PREFIX_TO_ENCODING`), restricted to the encodings gpt-tokenizer provides.
 *
 * Longest prefix first: "gpt-4o" must win over "gpt-4", "gpt-4.1" over "gpt-4".
 */
const modelPrefixes: readonly (readonly [string, TokenizerEncoding])[] = [
  ["gpt-oss", TokenizerEncoding.O200K_HARMONY],
  ["chatgpt-4o", TokenizerEncoding.O200K_BASE],
  ["gpt-4o", TokenizerEncoding.O200K_BASE],
  ["gpt-4.1", TokenizerEncoding.O200K_BASE],
  ["gpt-4.5", TokenizerEncoding.O200K_BASE],
  ["gpt-5", TokenizerEncoding.O200K_BASE],
  ["o1", TokenizerEncoding.O200K_BASE],
  ["o3", TokenizerEncoding.O200K_BASE],
  ["o4", TokenizerEncoding.O200K_BASE],
  ["gpt-4", TokenizerEncoding.CL100K_BASE],
  ["gpt-3.5", TokenizerEncoding.CL100K_BASE],
  ["text-embedding-3", TokenizerEncoding.CL100K_BASE],
  ["text-embedding-ada-002", TokenizerEncoding.CL100K_BASE],
];

/**
 * The encoding of a model name, or undefined when contextd has none for it (Claude and Gemini
 * publish no tokenizer). A name matches a prefix when it equals it or continues it with "-" or
 * ":" ("gpt-4o-mini", "o3-2025-04-16", "gpt-4.1:ft-…"), so "o1x" or "gpt-40" never match. Names
 * with a provider path ("openai/gpt-4o") are looked up by their last segment.
 */
export function encodingOfModel(model: string): TokenizerEncoding | undefined {
  const name = model.slice(model.lastIndexOf("/") + 1).toLowerCase();
  for (const [prefix, encoding] of modelPrefixes) {
    if (name === prefix) return encoding;
    if (name.startsWith(prefix)) {
      const next = name[prefix.length];
      if (next === "-" || next === ":") return encoding;
    }
  }
  return undefined;
}
