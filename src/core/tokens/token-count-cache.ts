import type { TokenizerEncoding } from "#gen/contextd/v1/compile_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import type { ToolDefinition } from "#gen/contextd/v1/state_pb";
import { ByteBoundedLru } from "../byte-bounded-lru.js";
import { DeadlineCheck } from "../compile/deadline.js";
import type { PacedTextTokenCounter, TextTokenCounter } from "./encodings.js";
import type { TextCounterSource, TokenEstimator } from "./estimator.js";
import { sameCountInputs } from "./same-count-inputs.js";
import { TextCountTable } from "./text-count-table.js";

/**
 * How many lists (segments of conversations, told apart by their first id) `countAll` keeps for
 * the next request; each entry holds its list alive.
 */
const maxRecentLists = 64;
/**
 * Default of `--token-count-list-bytes`: what the recent lists may weigh together
 * (`approximateListBytes`): each holds its list alive, a long one past its state's cache too.
 */
export const defaultMaxTokenCountListBytes = 256 * 1024 * 1024;
/**
 * Heap bytes a message of a recent list costs beyond its texts: its objects (message, part, the
 * part's oneof and body) and its count; the store's decoded states are weighed alike
 * (`decodedMessageOverheadBytes`, measured there).
 */
const listMessageOverheadBytes = 640;
/** Default of `--token-count-text-bytes`: what the text level keeps (its texts and entries). */
export const defaultMaxTokenCountTextBytes = 64 * 1024 * 1024;

/**
 * Counts known beside the messages themselves: what a store read with a stored message (see
 * `StoredTokenCounts` in the codec), the same number `countMessage` of the estimator with that
 * cache key gives. A message it knows is not counted again.
 */
export interface KnownTokenCounts {
  /** The cache key of the estimator whose counts are known (undefined: none are). */
  readonly cacheKey: string | undefined;
  countOf(message: Message, cacheKey: string): number | undefined;
}

/**
 * Token counts shared across compiles (semantics §4: a conversation is tokenized once), at three
 * levels:
 * - per message list object, one WeakMap per estimator configuration: a segment of a stored state
 *   the store hands out again unchanged (its decoded-state cache) costs one identity lookup for
 *   all its messages. Lists and messages are immutable (core never mutates either, stores share
 *   theirs read-only), which makes identity a sound key;
 * - per text, for the TOKENIZER estimator only (`textCounter`): a freshly decoded message is
 *   counted by looking up each of its texts, so BPE runs once per distinct text. Keys are the texts
 *   themselves, looked up by a sampled hash and confirmed by equality (see `TextCountTable`).
 * - per conversation, the last list counted under each first message id (`recentLists`): a request
 *   decoded afresh but re-sending (a prefix of) the previous list is matched message by message
 *   with `sameCountInputs`, string compares instead of hashing every text for the text level.
 * There is no per-message identity level: a WeakMap entry for every freshly decoded message costs
 * more in insertion and garbage collection than counting it through the text level. The other
 * estimators are linear scans that cost no more than hashing their text, so only lists are cached
 * for them. The text level is bounded: past `maxTexts` the oldest tenth is evicted.
 */
export class TokenCountCache implements TextCounterSource {
  private readonly byList = new Map<string, WeakMap<readonly Message[], readonly number[]>>();
  private readonly textCounters = new Map<TokenizerEncoding, TextTokenCounter>();
  private readonly texts = new Map<TokenizerEncoding, TextCountTable>();
  private readonly toolDefinitionCounts = new Map<string, number>();
  /** Estimator cache key + first message id → the last list counted with that start, its counts and what it weighs. */
  private readonly recentLists: ByteBoundedLru<string, { messages: readonly Message[]; counts: readonly number[] }>;
  private textCount = 0;
  /** `countAll` calls on a non-empty list, and the ones answered from a list counted before (for metrics). */
  listLookups = 0;
  listHits = 0;

  /** Messages counted afresh that `known` answered (for metrics and tests). */
  knownHits = 0;

  constructor(
    private readonly maxTexts = 200_000,
    /** Counts stored with the messages (a fresh sidecar's first compile of a long conversation takes them instead of counting it). */
    readonly known?: KnownTokenCounts,
    /** What the text level may keep (`TextCountTable.bytes` of every encoding together); past it the oldest tenth goes, again until under. */
    private readonly maxTextBytes = defaultMaxTokenCountTextBytes,
    /** What the recent lists may weigh together (`approximateListBytes`); past it the oldest go, and a list over it alone is not kept. */
    maxListBytes = defaultMaxTokenCountListBytes,
  ) {
    this.recentLists = new ByteBoundedLru({ maxBytes: maxListBytes, maxEntries: maxRecentLists });
  }

  /** The count of `message` under `estimator`. */
  count(estimator: TokenEstimator, message: Message): number {
    return estimator.countMessage(message);
  }

  /**
   * The count of `message` under `estimator`, counting its long texts with `clock`'s pauses (the
   * current turn may be the whole 16 MiB of a request).
   */
  async countPaced(estimator: TokenEstimator, message: Message, clock: DeadlineCheck): Promise<number> {
    await estimator.countLongTexts?.(message, clock);
    return estimator.countMessage(message);
  }

  /**
   * Counts of `messages` in order; shared with later calls for the same list, so never mutate it.
   * Messages not counted before give the event loop a turn between them when `clock` says one is
   * due, and their long texts between chunks (`TokenEstimator.countLongTexts`).
   */
  countAll(estimator: TokenEstimator, messages: readonly Message[], clock = DeadlineCheck.none): readonly number[] | Promise<readonly number[]> {
    if (messages.length === 0) return [];
    let known = this.byList.get(estimator.cacheKey);
    if (!known) {
      known = new WeakMap();
      this.byList.set(estimator.cacheKey, known);
    }
    const cached = known.get(messages);
    this.listLookups++;
    if (cached) {
      this.listHits++;
      return cached;
    }
    const byList = known;
    const counts = this.countAgainstRecent(estimator, messages, clock);
    if (counts instanceof Promise) return counts.then((done) => (byList.set(messages, done), done));
    byList.set(messages, counts);
    return counts;
  }

  /**
   * Counts of `messages` in order, each counted as `countAll` counts one it has not seen (texts
   * still go through the text level), without remembering the list: for the few messages a
   * commit appended to a history whose other counts the caller keeps (`HistoryFacts`).
   */
  countEach(estimator: TokenEstimator, messages: readonly Message[], clock = DeadlineCheck.none): number[] | Promise<number[]> {
    const counts = new Array<number>(messages.length);
    for (let index = 0; index < messages.length; index++) {
      const count = this.countFresh(estimator, messages[index]!, clock);
      if (typeof count !== "number") return this.countEachFrom(estimator, messages, clock, counts, index, count);
      counts[index] = count;
    }
    return counts;
  }

  /** One message counted afresh: its stored count when `known` has one, else `countFresh`. */
  private countFresh(estimator: TokenEstimator, message: Message, clock: DeadlineCheck): number | Promise<number> {
    const stored = this.known?.countOf(message, estimator.cacheKey);
    if (stored !== undefined) {
      this.knownHits++;
      return stored;
    }
    return countFresh(estimator, message, clock);
  }

  private async countEachFrom(estimator: TokenEstimator, messages: readonly Message[], clock: DeadlineCheck, counts: number[], index: number, waiting: Promise<number>): Promise<number[]> {
    counts[index] = await waiting;
    for (index++; index < messages.length; index++) {
      const count = this.countFresh(estimator, messages[index]!, clock);
      counts[index] = typeof count === "number" ? count : await count;
    }
    return counts;
  }

  /**
   * Counts `messages`, reusing the counts of the last list that started with the same message id
   * wherever the message at the same index has the same count inputs; then remembers this list
   * for the next request of the conversation. Synchronous until a message needs a wait (a turn of
   * the event loop, a long text): a warm compile's lists create no promise.
   */
  private countAgainstRecent(estimator: TokenEstimator, messages: readonly Message[], clock: DeadlineCheck): number[] | Promise<number[]> {
    const key = estimator.cacheKey + "\u0000" + messages[0]!.id;
    const recent = this.recentLists.get(key);
    const counts = new Array<number>(messages.length);
    const reusable = recent ? Math.min(recent.messages.length, messages.length) : 0;
    for (let index = 0; index < messages.length; index++) {
      const message = messages[index]!;
      if (index < reusable && sameCountInputs(message, recent!.messages[index]!)) {
        counts[index] = recent!.counts[index]!;
        continue;
      }
      const count = this.countFresh(estimator, message, clock);
      if (typeof count !== "number") return this.countRestAgainstRecent(estimator, messages, clock, key, counts, index, count);
      counts[index] = count;
    }
    this.rememberList(key, messages, counts);
    return counts;
  }

  /** `countAgainstRecent` from `index` on, once the count of that message had to wait. */
  private async countRestAgainstRecent(
    estimator: TokenEstimator,
    messages: readonly Message[],
    clock: DeadlineCheck,
    key: string,
    counts: number[],
    index: number,
    waiting: Promise<number>,
  ): Promise<number[]> {
    const recent = this.recentLists.get(key);
    const reusable = recent ? Math.min(recent.messages.length, messages.length) : 0;
    counts[index] = await waiting;
    for (index++; index < messages.length; index++) {
      const message = messages[index]!;
      if (index < reusable && sameCountInputs(message, recent!.messages[index]!)) {
        counts[index] = recent!.counts[index]!;
        continue;
      }
      const count = this.countFresh(estimator, message, clock);
      counts[index] = typeof count === "number" ? count : await count;
    }
    this.rememberList(key, messages, counts);
    return counts;
  }

  private rememberList(key: string, messages: readonly Message[], counts: number[]): void {
    this.recentLists.set(key, { messages, counts }, approximateListBytes(messages));
  }

  /** The recent lists kept and what they weigh together (bounded by `maxListBytes`). */
  get keptLists(): { count: number; bytes: number } {
    return { count: this.recentLists.size, bytes: this.recentLists.bytes };
  }

  /**
   * `count` memoised per text for `encoding`, for the TOKENIZER estimator to count with. One
   * wrapper per encoding, so estimators built per request share it.
   */
  /** Texts whose counts are kept (bounded by `maxTexts`). */
  get keptTexts(): number {
    return this.textCount;
  }

  /** Roughly what the kept texts hold (bounded by `maxTextBytes`). */
  get keptTextBytes(): number {
    let bytes = 0;
    for (const texts of this.texts.values()) bytes += texts.bytes;
    return bytes;
  }

  textCounter(encoding: TokenizerEncoding, count: TextTokenCounter): TextTokenCounter {
    let counter = this.textCounters.get(encoding);
    if (!counter) {
      const texts = this.textTable(encoding);
      counter = (text, betweenChunks) => {
        const cached = texts.get(text);
        if (cached !== undefined) return cached;
        const tokens = count(text, betweenChunks);
        texts.set(text, tokens);
        if (++this.textCount > this.maxTexts || texts.bytes > this.maxTextBytes) this.evictOldestTexts();
        return tokens;
      };
      this.textCounters.set(encoding, counter);
    }
    return counter;
  }

  /** `textCounter`'s paced twin, sharing its texts: a text counted by either is known to both. */
  pacedTextCounter(encoding: TokenizerEncoding, countPaced: PacedTextTokenCounter): PacedTextTokenCounter {
    const texts = this.textTable(encoding);
    return async (text, clock, stage) => {
      const cached = texts.get(text);
      if (cached !== undefined) return cached;
      const tokens = await countPaced(text, clock, stage);
      // Another call may have counted the same text while this one waited.
      if (texts.get(text) === undefined) {
        texts.set(text, tokens);
        if (++this.textCount > this.maxTexts || texts.bytes > this.maxTextBytes) this.evictOldestTexts();
      }
      return tokens;
    };
  }

  private textTable(encoding: TokenizerEncoding): TextCountTable {
    let texts = this.texts.get(encoding);
    if (!texts) {
      texts = new TextCountTable();
      this.texts.set(encoding, texts);
    }
    return texts;
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
    this.recentLists.clear();
    for (const texts of this.texts.values()) texts.clear();
    this.toolDefinitionCounts.clear();
    this.textCount = 0;
  }

  private evictOldestTexts(): void {
    // A tenth at once, so a full cache does not pay an eviction on every insert; by bytes, a tenth
    // of what is kept, again until under the bound (a few long texts can hold most of it).
    do {
      let toEvict = Math.max(1, Math.ceil((this.keptTextBytes > this.maxTextBytes ? this.textCount : this.maxTexts) / 10));
      for (const texts of this.texts.values()) {
        const evicted = texts.evict(toEvict);
        this.textCount -= evicted;
        toEvict -= evicted;
        if (toEvict <= 0) break;
      }
    } while (this.textCount > 0 && this.keptTextBytes > this.maxTextBytes);
  }
}

/**
 * One message counted afresh. A promise only when it has long texts (`countLongTexts`) or a turn
 * of the event loop is due, so a cold compile of short messages awaits nothing.
 */
function countFresh(estimator: TokenEstimator, message: Message, clock: DeadlineCheck): number | Promise<number> {
  const long = clock.yields ? estimator.countLongTexts?.(message, clock) : undefined;
  if (long) return long.then(() => countFresh(estimator, message, clock));
  const tokens = estimator.countMessage(message);
  if (!clock.check("token counting")) return tokens;
  return clock.pause("token counting").then(() => tokens);
}

/**
 * What a list holds alive, approximately: per message a fixed overhead and the UTF-16 length of
 * the texts a count reads (those `sameCountInputs` compares). O(parts): a
 * string's length is read, not its characters, so it costs less than the comparison it follows.
 */
function approximateListBytes(messages: readonly Message[]): number {
  let bytes = 0;
  for (const message of messages) {
    bytes += listMessageOverheadBytes + 2 * message.id.length;
    for (const part of message.parts) {
      const kind = part.kind;
      switch (kind.case) {
        case "text":
        case "reasoning":
          bytes += 2 * kind.value.text.length;
          break;
        case "toolCall":
          bytes += 2 * (kind.value.id.length + kind.value.name.length + (kind.value.arguments?.text.length ?? 0) + (kind.value.arguments?.data.length ?? 0));
          break;
        case "toolResult":
          bytes += 2 * (kind.value.toolCallId.length + (kind.value.payload?.text.length ?? 0) + (kind.value.payload?.data.length ?? 0));
          break;
        default:
          break;
      }
    }
  }
  return bytes;
}
