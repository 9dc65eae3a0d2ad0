import type { TokenizerEncoding } from "../../../gen/ts/contextd/v1/compile_pb.js";
import type { Message } from "../../../gen/ts/contextd/v1/message_pb.js";
import type { ToolDefinition } from "../../../gen/ts/contextd/v1/state_pb.js";
import type { TextTokenCounter } from "./encodings.js";
import type { TokenEstimator } from "./estimator.js";
import { TextCountTable } from "./text-count-table.js";

/**
 * Token counts shared across compiles (semantics §4: a conversation is tokenized once), at two
 * levels:
 * - per message list object, one WeakMap per estimator configuration: a segment of a stored state
 *   the store hands out again unchanged (its decoded-state cache) costs one identity lookup for
 *   all its messages. Lists and messages are immutable (core never mutates either, stores share
 *   theirs read-only), which makes identity a sound key;
 * - per text, for the TOKENIZER estimator only (`textCounter`): a freshly decoded message is
 *   counted by looking up each of its texts, so BPE runs once per distinct text. Keys are the texts
 *   themselves, looked up by a sampled hash and confirmed by equality (see `TextCountTable`).
 * There is no per-message identity level: a WeakMap entry for every freshly decoded message costs
 * more in insertion and garbage collection than counting it through the text level. The other
 * estimators are linear scans that cost no more than hashing their text, so only lists are cached
 * for them. The text level is bounded: past `maxTexts` the oldest tenth is evicted.
 */
export class TokenCountCache {
  private readonly byList = new Map<string, WeakMap<readonly Message[], readonly number[]>>();
  private readonly textCounters = new Map<TokenizerEncoding, TextTokenCounter>();
  private readonly texts = new Map<TokenizerEncoding, TextCountTable>();
  private readonly toolDefinitionCounts = new Map<string, number>();
  private textCount = 0;

  constructor(private readonly maxTexts = 200_000) {}

  /** The count of `message` under `estimator`. */
  count(estimator: TokenEstimator, message: Message): number {
    return estimator.countMessage(message);
  }

  /** Counts of `messages` in order; shared with later calls for the same list, so never mutate it. */
  countAll(estimator: TokenEstimator, messages: readonly Message[]): readonly number[] {
    if (messages.length === 0) return [];
    let known = this.byList.get(estimator.cacheKey);
    if (!known) {
      known = new WeakMap();
      this.byList.set(estimator.cacheKey, known);
    }
    let counts = known.get(messages);
    if (!counts) {
      const computed = new Array<number>(messages.length);
      for (let index = 0; index < messages.length; index++) computed[index] = estimator.countMessage(messages[index]!);
      known.set(messages, computed);
      counts = computed;
    }
    return counts;
  }

  /**
   * `count` memoised per text for `encoding`, for the TOKENIZER estimator to count with. One
   * wrapper per encoding, so estimators built per request share it.
   */
  textCounter(encoding: TokenizerEncoding, count: TextTokenCounter): TextTokenCounter {
    let counter = this.textCounters.get(encoding);
    if (!counter) {
      const texts = new TextCountTable();
      this.texts.set(encoding, texts);
      counter = (text) => {
        const cached = texts.get(text);
        if (cached !== undefined) return cached;
        const tokens = count(text);
        texts.set(text, tokens);
        if (++this.textCount > this.maxTexts) this.evictOldestTexts();
        return tokens;
      };
      this.textCounters.set(encoding, counter);
    }
    return counter;
  }

  /** Tokens of tool definitions under `estimator`, cached by their exact text. */
  countToolDefinitions(estimator: TokenEstimator, definitions: readonly ToolDefinition[]): number {
    if (definitions.length === 0) return 0;
    let key = estimator.cacheKey;
    for (const definition of definitions) key += `\u0001${definition.name}\u0002${definition.description}\u0002${definition.parameters}`;
    const cached = this.toolDefinitionCounts.get(key);
    if (cached !== undefined) return cached;
    const count = estimator.countToolDefinitions(definitions);
    // Definitions change rarely; a small bound keeps a stream of distinct sets from growing it.
    if (this.toolDefinitionCounts.size >= 1_000) this.toolDefinitionCounts.clear();
    this.toolDefinitionCounts.set(key, count);
    return count;
  }

  /** Forgets everything (benchmarks measure cold compiles with this). */
  clear(): void {
    this.byList.clear();
    for (const texts of this.texts.values()) texts.clear();
    this.toolDefinitionCounts.clear();
    this.textCount = 0;
  }

  private evictOldestTexts(): void {
    // A tenth at once, so a full cache does not pay an eviction on every insert.
    let toEvict = Math.ceil(this.maxTexts / 10);
    for (const texts of this.texts.values()) {
      const evicted = texts.evict(toEvict);
      this.textCount -= evicted;
      toEvict -= evicted;
      if (toEvict <= 0) return;
    }
  }
}
