/**
 * The conversations this process follows: ones it commits to and that another process writes
 * too (two sidecars behind a round-robin balancer). Why it exists: each such sidecar found its
 * copy one version behind at every turn and read before writing, one round trip more than a warm
 * turn (issue 30; docs/benchmarks.md, "Round-robin"). Followed, a conversation's commits by other
 * processes arrive as notices (Redis pub/sub, Postgres LISTEN), and this process catches its copy
 * (or its kept tail) up in the background, with the read a commit would have made, so its next
 * commit starts from a current copy: the write alone.
 *
 * Bounds: at most `capacity` conversations (`--prefetch-conversations`; the oldest followed is
 * dropped for a new one), at most one catch-up in flight per conversation (notices meanwhile only
 * raise the version it goes on to), and a conversation is unfollowed after `unfollowAfter` notices
 * with no commit of this process between (it is not turned here: the warm turn of another sidecar
 * would otherwise cost this one a read per commit) or `unfollowAfter` commits of this process with
 * no notice between (no one else writes it: its notices would go to no one). A notice lost or out
 * of order costs nothing but the prefetch: a commit from a copy behind still reads first.
 */

/** `--prefetch-conversations` by default: a sidecar's turned conversations fit; one followed weighs an id and four numbers. */
export const defaultPrefetchConversations = 1_024;

/** Notices without an own commit, or own commits without a notice, after which a conversation is unfollowed. */
export const unfollowAfter = 3;

export interface FollowedConversationsOptions {
  /** Most conversations followed at once; 0 = none (no notices received, none published). */
  capacity: number;
  /** The version of the copy or kept tail this process holds of the conversation, if any. */
  heldVersion(conversationId: string): bigint | undefined;
  /** Reads what the held copy (or kept tail) lacks, as a commit's read would. */
  catchUp(conversationId: string): Promise<void>;
  /** Starts receiving the conversation's notices. */
  subscribe(conversationId: string): void;
  /** Stops receiving them. */
  unsubscribe(conversationId: string): void;
}

interface Followed {
  /** Notices of newer versions since this process's last commit. */
  notices: number;
  /** Commits of this process since the last notice. */
  ownCommits: number;
  /** The newest version a notice named. */
  noticed: bigint;
  /** The catch-up in flight, if one is. */
  catchingUp?: Promise<void>;
}

export class FollowedConversations {
  private readonly followed = new Map<string, Followed>();
  /** Catch-up reads started by notices, and those finished (for tests and gauges). */
  catchUps = 0;
  caughtUp = 0;

  constructor(private readonly options: FollowedConversationsOptions) {}

  /** How many conversations are followed. */
  get size(): number {
    return this.followed.size;
  }

  isFollowed(conversationId: string): boolean {
    return this.followed.has(conversationId);
  }

  /** A commit of this process found the conversation written by another since its copy: follow it. */
  othersWrote(conversationId: string): void {
    if (this.options.capacity <= 0 || this.followed.has(conversationId)) return;
    if (this.followed.size >= this.options.capacity) this.unfollow(this.followed.keys().next().value!);
    this.followed.set(conversationId, { notices: 0, ownCommits: 0, noticed: 0n });
    this.options.subscribe(conversationId);
  }

  /** This process committed the conversation; whether to publish a notice of it (someone else may follow it). */
  committed(conversationId: string): boolean {
    const followed = this.followed.get(conversationId);
    if (followed === undefined) return false;
    followed.notices = 0;
    if (++followed.ownCommits >= unfollowAfter) {
      this.unfollow(conversationId);
      return false;
    }
    return true;
  }

  /**
   * A notice that another process (never this one) committed `version` of the conversation
   * (undefined: some version after the one held, for a notice that does not say which).
   */
  noticed(conversationId: string, version?: bigint): void {
    const followed = this.followed.get(conversationId);
    if (followed === undefined) return;
    const held = this.options.heldVersion(conversationId);
    if (held === undefined) return this.unfollow(conversationId);
    // Another process writes it, even if this notice came after this process caught up anyway.
    followed.ownCommits = 0;
    // A notice without a version is one more commit than any noticed before (each counts).
    const newer = version ?? (held > followed.noticed ? held : followed.noticed) + 1n;
    if (newer <= held || newer <= followed.noticed) return;
    followed.noticed = newer;
    if (++followed.notices >= unfollowAfter) return this.unfollow(conversationId);
    followed.catchingUp ??= this.catchUpTo(conversationId, followed);
  }

  /** How many conversations are followed, and the catch-ups notices started and finished (tests, gauges). */
  get figures(): { followed: number; catchUps: number; caughtUp: number } {
    return { followed: this.followed.size, catchUps: this.catchUps, caughtUp: this.caughtUp };
  }

  /** The catch-up in flight for the conversation, so that a commit starts from its result instead of reading too. */
  catchingUp(conversationId: string): Promise<void> | undefined {
    return this.followed.get(conversationId)?.catchingUp;
  }

  /** Stops following every conversation (the store is closing). */
  clear(): void {
    for (const conversationId of [...this.followed.keys()]) this.unfollow(conversationId);
  }

  private unfollow(conversationId: string): void {
    if (!this.followed.delete(conversationId)) return;
    this.options.unsubscribe(conversationId);
  }

  /** Catches up until the copy holds the newest noticed version, or a read brings it no further. */
  private async catchUpTo(conversationId: string, followed: Followed): Promise<void> {
    try {
      for (;;) {
        const before = this.options.heldVersion(conversationId);
        if (before === undefined || before >= followed.noticed) return;
        this.catchUps++;
        try {
          await this.options.catchUp(conversationId);
        } finally {
          this.caughtUp++;
        }
        const after = this.options.heldVersion(conversationId);
        if (after === undefined || after <= before) return;
      }
    } catch {
      // A failed prefetch leaves the copy behind: the next commit reads first, as without notices.
    } finally {
      followed.catchingUp = undefined;
    }
  }
}
