import { ByteBoundedLru } from "../core/byte-bounded-lru.js";
import { HistoryFacts } from "../core/compile/history-facts.js";
import type { Message } from "#gen/contextd/v1/message_pb";
import type { MessageListLineage } from "../core/model/message-list-lineage.js";

/** Bounds of `HistoryFactsCache` (`--history-facts-bytes`, `--history-facts-conversations`). */
export interface HistoryFactsLimits {
  /** Approximate bytes of all kept facts together; 0 keeps none (every compile walks its whole history). */
  maxBytes: number;
  /** Conversations whose facts are kept; 0 keeps none. */
  maxConversations: number;
}

export const defaultHistoryFactsLimits: HistoryFactsLimits = { maxBytes: 64 * 1024 * 1024, maxConversations: 10_000 };

/**
 * The `HistoryFacts` of recently compiled conversations, one per conversation, the least recently
 * compiled forgotten first past either bound. A compile takes its conversation's facts out and
 * puts them back when done, so two compiles of one conversation at the same time never share
 * them (the second builds its own). One per server, injected into the `Compiler`.
 */
export class HistoryFactsCache {
  private readonly entries: ByteBoundedLru<string, HistoryFacts>;

  /**
   * `lineage`: the store's record of appended lists; with it, that the next history extends the
   * kept one is known without comparing its elements (1 ms a compile at 100,000 messages).
   */
  constructor(
    private readonly limits: HistoryFactsLimits = defaultHistoryFactsLimits,
    private readonly lineage?: MessageListLineage,
  ) {
    this.entries = new ByteBoundedLru({ maxBytes: limits.maxBytes, maxEntries: limits.maxConversations });
  }

  /**
   * A lender of facts for one compile of `conversationId`: `facts(history)` takes the kept facts
   * out and extends (or rebuilds) them for `history`; `giveBack()` keeps what was lent.
   */
  lend(conversationId: string): { facts: (history: readonly Message[]) => HistoryFacts | undefined; adopt: (history: readonly Message[], knownShared?: number) => void; giveBack: () => void } {
    let lent: HistoryFacts | undefined;
    return {
      /** The history the compile's commit stored (see `HistoryFacts.adopt`). */
      adopt: (history, knownShared) => lent?.adopt(history, knownShared),
      facts: (history) => {
        if (this.limits.maxBytes === 0 || this.limits.maxConversations === 0) return undefined;
        lent = HistoryFacts.of(history, lent ?? this.take(conversationId), this.lineage);
        return lent;
      },
      giveBack: () => {
        if (lent) this.put(conversationId, lent);
        lent = undefined;
      },
    };
  }

  /**
   * Whether facts of `conversationId` are kept whose history is still in memory (a compile without
   * them may plan from the stored tail instead). Facts whose history the store let go of are
   * forgotten here: they could only be rebuilt by walking the whole history the store reads again.
   */
  has(conversationId: string): boolean {
    if (this.entries.get(conversationId)?.history === undefined) this.take(conversationId);
    return this.entries.has(conversationId);
  }

  /** Approximate bytes kept and the conversations they are for. */
  get stats(): { bytes: number; conversations: number } {
    return { bytes: this.entries.bytes, conversations: this.entries.size };
  }

  private take(conversationId: string): HistoryFacts | undefined {
    return this.entries.delete(conversationId);
  }

  private put(conversationId: string, facts: HistoryFacts): void {
    // A concurrent compile of the conversation may have put its own since: the later one stays.
    this.entries.set(conversationId, facts, facts.approximateBytes);
  }
}
