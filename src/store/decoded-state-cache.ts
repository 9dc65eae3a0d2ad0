import type { ConversationState } from "#gen/contextd/v1/state_pb";
import type { MessageListLineage } from "../core/model/message-list-lineage.js";
import { MessageIdIndex } from "./message-id-index.js";

/**
 * The decoded states a store keeps in this process, the least recently used leaving first, bounded
 * by count and by the size of their encodings. The byte bound is what keeps memory in check: one
 * state of a long conversation can weigh as much as thousands of short ones, and decoded it takes
 * several times its encoding (~15x for short messages, less for long texts). The newest state is
 * kept even when it alone is over the bound. Beside a state of a long conversation it keeps the
 * index of its message ids (`MessageIdIndex`, a few tens of bytes per message, not counted in the
 * bound), carried forward to each newer state of the conversation that extends it (per `lineage`).
 */
export class DecodedStateCache {
  private readonly entries = new Map<string, { state: ConversationState; encodedBytes: number; ids?: MessageIdIndex }>();
  private encodedBytes = 0;

  constructor(
    private readonly maxStates: number,
    private readonly maxEncodedBytes: number,
    private readonly lineage: MessageListLineage,
  ) {}

  get(conversationId: string): ConversationState | undefined {
    return this.entries.get(conversationId)?.state;
  }

  /**
   * The id index of `state` when it is the cached state of its conversation: the one kept, or one
   * built now (undefined for a conversation short enough to look in place, or a state not cached).
   */
  idIndex(state: ConversationState): MessageIdIndex | undefined {
    const entry = this.entries.get(state.conversationId);
    if (entry?.state !== state) return undefined;
    if (entry.ids?.state !== state) entry.ids = MessageIdIndex.of(state);
    return entry.ids;
  }

  /** Keeps `state`, `encodedBytes` long when encoded, as the most recently used. */
  remember(state: ConversationState, encodedBytes: number): void {
    const ids = this.entries.get(state.conversationId)?.ids?.advancedTo(state, this.lineage);
    this.delete(state.conversationId);
    this.entries.set(state.conversationId, { state, encodedBytes, ids });
    this.encodedBytes += encodedBytes;
    while (this.entries.size > 1 && (this.entries.size > this.maxStates || this.encodedBytes > this.maxEncodedBytes)) {
      this.delete(this.entries.keys().next().value!);
    }
  }

  /** Marks a cached state as just used, keeping it longer. */
  touch(conversationId: string): void {
    const entry = this.entries.get(conversationId);
    if (!entry) return;
    this.entries.delete(conversationId);
    this.entries.set(conversationId, entry);
  }

  delete(conversationId: string): void {
    const entry = this.entries.get(conversationId);
    if (!entry) return;
    this.entries.delete(conversationId);
    this.encodedBytes -= entry.encodedBytes;
  }

  get size(): number {
    return this.entries.size;
  }

  /** The encodings' total size of the states kept. */
  get keptEncodedBytes(): number {
    return this.encodedBytes;
  }
}
