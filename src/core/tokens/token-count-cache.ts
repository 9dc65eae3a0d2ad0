import type { Message } from "../../../gen/ts/contextd/v1/message_pb.js";
import type { ToolDefinition } from "../../../gen/ts/contextd/v1/state_pb.js";
import { messageContentKey } from "../model/content-hash.js";
import type { TokenEstimator } from "./estimator.js";

/**
 * Per-message token counts keyed by (estimator configuration, message content). A conversation is
 * tokenized once; later compiles, including those whose messages arrive freshly decoded from the
 * wire, look counts up by content. Bounded: past `maxEntries` the oldest entries are evicted
 * (Map iteration order is insertion order).
 */
export class TokenCountCache {
  private readonly counts = new Map<string, Map<string, number>>();
  private size = 0;

  constructor(private readonly maxEntries = 200_000) {}

  /** The count of `message` under `estimator`, computed at most once per distinct content. */
  count(estimator: TokenEstimator, message: Message): number {
    // Most messages are a single text part: key those by the text itself, in a map per estimator
    // and role. Decoded strings are flat, so V8 hashes them without the copy a concatenated key
    // costs. Everything else is keyed by its full content key.
    const only = message.parts.length === 1 && message.senderName === "" ? message.parts[0]!.kind : undefined;
    const textOnly = only?.case === "text";
    const mapKey = textOnly ? `${estimator.cacheKey}\u0000text:${message.role}` : estimator.cacheKey;
    let byContent = this.counts.get(mapKey);
    if (!byContent) {
      byContent = new Map();
      this.counts.set(mapKey, byContent);
    }
    const key = textOnly ? (only.value as { text: string }).text : messageContentKey(message);
    const cached = byContent.get(key);
    if (cached !== undefined) return cached;
    const count = estimator.countMessage(message);
    byContent.set(key, count);
    if (++this.size > this.maxEntries) this.evictOldest();
    return count;
  }

  /** Counts of `messages` in order. */
  countAll(estimator: TokenEstimator, messages: readonly Message[]): number[] {
    const counts = new Array<number>(messages.length);
    for (let index = 0; index < messages.length; index++) counts[index] = this.count(estimator, messages[index]!);
    return counts;
  }

  /** Tokens of tool definitions under `estimator`, cached by their exact text. */
  countToolDefinitions(estimator: TokenEstimator, definitions: readonly ToolDefinition[]): number {
    if (definitions.length === 0) return 0;
    let key = "\u0000tools";
    for (const definition of definitions) key += `\u0001${definition.name}\u0002${definition.description}\u0002${definition.parameters}`;
    let byContent = this.counts.get(estimator.cacheKey);
    if (!byContent) {
      byContent = new Map();
      this.counts.set(estimator.cacheKey, byContent);
    }
    const cached = byContent.get(key);
    if (cached !== undefined) return cached;
    const count = estimator.countToolDefinitions(definitions);
    byContent.set(key, count);
    if (++this.size > this.maxEntries) this.evictOldest();
    return count;
  }

  /** Forgets everything (benchmarks measure cold compiles with this). */
  clear(): void {
    this.counts.clear();
    this.size = 0;
  }

  private evictOldest(): void {
    // Evict a tenth at once so a full cache does not pay an eviction on every insert.
    let toEvict = Math.ceil(this.maxEntries / 10);
    for (const byContent of this.counts.values()) {
      for (const key of byContent.keys()) {
        byContent.delete(key);
        this.size--;
        if (--toEvict === 0) return;
      }
    }
  }
}
