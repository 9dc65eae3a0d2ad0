import type { ConversationState } from "#gen/contextd/v1/state_pb";

/**
 * The states a store committed after finding that another process had written the conversation
 * since its cached copy (a read caught the copy up, or the commit was refused as a conflict):
 * sidecars taking turns behind a balancer, each one version behind at every turn. A commit from
 * such a copy reads first: one round trip that catches it up, where trying the copy cost a refused
 * commit, the read and the commit again, and a plan thrown away. A commit whose read finds the
 * copy current is not recorded, so the next one goes back to committing from the cache unread.
 * The engine records the stored tails a store kept (kept-tails.ts) the same way.
 * Weak: nothing is kept alive by being recorded.
 */
export class ContendedCopies {
  private readonly states = new WeakSet<ConversationState>();

  /** Whether a commit may start from `cached` without reading. */
  trusted(cached: ConversationState): boolean {
    return !this.states.has(cached);
  }

  /** Records `committed` as made after others' writes. */
  add(committed: ConversationState): void {
    this.states.add(committed);
  }
}
