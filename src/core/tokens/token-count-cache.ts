import type { Message } from "../../../gen/ts/contextd/v1/message_pb.js";
import type { ToolDefinition } from "../../../gen/ts/contextd/v1/state_pb.js";
import { messageContentKey } from "../model/content-hash.js";
import type { TokenEstimator } from "./estimator.js";

interface EstimatorMaps {
  /** Single-text-part messages by role, keyed by their text. */
  byText: Map<string, number>[];
  /** Everything else, keyed by `messageContentKey`. */
  byContent: Map<string, number>;
}

/**
 * Per-message token counts keyed by (estimator configuration, message content). A conversation is
 * tokenized once; later compiles, including those whose messages arrive freshly decoded from the
 * wire, look counts up by content. Bounded: past `maxEntries` the oldest entries are evicted
 * (Map iteration order is insertion order).
 */
export class TokenCountCache {
  private readonly byEstimator = new Map<string, EstimatorMaps>();
  private size = 0;

  constructor(private readonly maxEntries = 200_000) {}

  /** The count of `message` under `estimator`, computed at most once per distinct content. */
  count(estimator: TokenEstimator, message: Message): number {
    return this.countIn(this.mapsOf(estimator), estimator, message);
  }

  /** Counts of `messages` in order. */
  countAll(estimator: TokenEstimator, messages: readonly Message[]): number[] {
    const maps = this.mapsOf(estimator);
    const counts = new Array<number>(messages.length);
    for (let index = 0; index < messages.length; index++) counts[index] = this.countIn(maps, estimator, messages[index]!);
    return counts;
  }

  private mapsOf(estimator: TokenEstimator): EstimatorMaps {
    let maps = this.byEstimator.get(estimator.cacheKey);
    if (!maps) {
      maps = { byText: [], byContent: new Map() };
      this.byEstimator.set(estimator.cacheKey, maps);
    }
    return maps;
  }

  private countIn(maps: EstimatorMaps, estimator: TokenEstimator, message: Message): number {
    // Most messages are a single text part: key those by the text itself, in a map per role.
    // Decoded strings are flat, so V8 hashes them without the copy a concatenated key costs.
    // Everything else is keyed by its full content key.
    const only = message.parts.length === 1 && message.senderName === "" ? message.parts[0]!.kind : undefined;
    let map: Map<string, number>;
    let key: string;
    if (only?.case === "text") {
      map = maps.byText[message.role] ??= new Map();
      key = only.value.text;
    } else {
      map = maps.byContent;
      key = messageContentKey(message);
    }
    const cached = map.get(key);
    if (cached !== undefined) return cached;
    const count = estimator.countMessage(message);
    map.set(key, count);
    if (++this.size > this.maxEntries) this.evictOldest();
    return count;
  }

  /** Tokens of tool definitions under `estimator`, cached by their exact text. */
  countToolDefinitions(estimator: TokenEstimator, definitions: readonly ToolDefinition[]): number {
    if (definitions.length === 0) return 0;
    let key = "\u0000tools";
    for (const definition of definitions) key += `\u0001${definition.name}\u0002${definition.description}\u0002${definition.parameters}`;
    const byContent = this.mapsOf(estimator).byContent;
    const cached = byContent.get(key);
    if (cached !== undefined) return cached;
    const count = estimator.countToolDefinitions(definitions);
    byContent.set(key, count);
    if (++this.size > this.maxEntries) this.evictOldest();
    return count;
  }

  /** Forgets everything (benchmarks measure cold compiles with this). */
  clear(): void {
    this.byEstimator.clear();
    this.size = 0;
  }

  private evictOldest(): void {
    // Evict a tenth at once so a full cache does not pay an eviction on every insert.
    let toEvict = Math.ceil(this.maxEntries / 10);
    for (const maps of this.byEstimator.values()) {
      for (const map of [...maps.byText.filter(Boolean), maps.byContent]) {
        for (const key of map.keys()) {
          map.delete(key);
          this.size--;
          if (--toEvict === 0) return;
        }
      }
    }
  }
}
