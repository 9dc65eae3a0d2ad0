import { ByteBoundedLru } from "../core/byte-bounded-lru.js";
import type { CommitTail } from "./tail-commit.js";
import { approximateDecodedBytes } from "./decoded-state-cache.js";

/** `--kept-tail-bytes`: what the kept tails of a Redis or Postgres store may weigh in the heap, approximately. */
export const defaultKeptTailBytes = 32 * 1024 * 1024;

/** A kept tail: what a plan needs of it (no call names of the head: those are asked per batch). */
export type KeptTail = Omit<CommitTail, "headCallNames">;

/**
 * The stored tails of conversations this process committed on without holding their whole state
 * (tail-commit.ts), each at the version this process read or wrote, so that its next commit to the
 * conversation is planned on the kept tail and costs one round trip, the write, instead of a tail
 * read and the write. Why it exists: a fresh sidecar after a deploy, or one meeting more long
 * conversations than its decoded-state cache holds, paid the tail read on every commit (issue 30).
 * The write checks the stored version and list lengths as for any copy, so a kept tail made stale
 * by another writer costs the usual tail read, never a lost or doubled update.
 *
 * Bounded by what the tails weigh in the heap (`approximateDecodedBytes`, as the decoded states
 * are), the least recently used leaving first; a tail alone over the bound is not kept. A store
 * trims a tail before keeping it (`StoredCopies.keepWrittenTail`), so each stays near the 64
 * messages a tail read asks for.
 */
export class KeptTails {
  private readonly tails: ByteBoundedLru<string, KeptTail>;

  constructor(maxBytes: number) {
    this.tails = new ByteBoundedLru({ maxBytes });
  }

  get(conversationId: string): KeptTail | undefined {
    return this.tails.get(conversationId);
  }

  /** Keeps `tail` (its messages and rest `encodedBytes` long when encoded) as the conversation's, the most recently used. */
  keep(tail: KeptTail, encodedBytes: number): void {
    this.tails.set(tail.state.conversationId, tail, approximateDecodedBytes(tail.state, encodedBytes));
  }

  delete(conversationId: string): void {
    this.tails.delete(conversationId);
  }

  get size(): number {
    return this.tails.size;
  }

  /** What the kept tails weigh together (`approximateDecodedBytes`). */
  get keptBytes(): number {
    return this.tails.bytes;
  }
}
