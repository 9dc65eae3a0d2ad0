import type { ConversationState } from "../../gen/ts/contextd/v1/state_pb.js";

/**
 * The decoded states a store keeps in this process, the least recently used leaving first, bounded
 * by count and by the size of their encodings. The byte bound is what keeps memory in check: one
 * state of a long conversation can weigh as much as thousands of short ones, and decoded it takes
 * several times its encoding (~15x for short messages, less for long texts). The newest state is
 * kept even when it alone is over the bound.
 */
export class DecodedStateCache {
  private readonly entries = new Map<string, { state: ConversationState; encodedBytes: number }>();
  private encodedBytes = 0;

  constructor(
    private readonly maxStates: number,
    private readonly maxEncodedBytes: number,
  ) {}

  get(conversationId: string): ConversationState | undefined {
    return this.entries.get(conversationId)?.state;
  }

  /** Keeps `state`, `encodedBytes` long when encoded, as the most recently used. */
  remember(state: ConversationState, encodedBytes: number): void {
    this.delete(state.conversationId);
    this.entries.set(state.conversationId, { state, encodedBytes });
    this.encodedBytes += encodedBytes;
    while (this.entries.size > 1 && (this.entries.size > this.maxStates || this.encodedBytes > this.maxEncodedBytes)) {
      this.delete(this.entries.keys().next().value!);
    }
  }

  /** Marks a cached state as just used, keeping it longer. */
  touch(conversationId: string): void {
    const entry = this.entries.get(conversationId);
    if (entry) this.remember(entry.state, entry.encodedBytes);
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
