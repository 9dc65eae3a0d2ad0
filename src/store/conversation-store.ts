import type { Change } from "#gen/contextd/v1/conversation_service_pb";
import type { ConversationState, Delta, ForkOrigin } from "#gen/contextd/v1/state_pb";
import type { DeltaContext } from "../core/deltas/delta-context.js";
import type { MessageListLineage } from "../core/model/message-list-lineage.js";
import type { CalibrationStore } from "./calibration-store.js";
import type { ConversationPage, ListQuery } from "./conversation-listing.js";
import type { SegmentWindow, WindowQuery } from "./segment-window.js";
import type { UsageLedgerStore } from "./usage-ledger.js";

/** The outcome of a successful commit. */
export interface CommitOutcome {
  /** The version the batch produced. */
  version: bigint;
  /**
   * The state after the batch. On a replay, present only while the conversation is still at
   * `version` (idempotency records keep the version, not a copy of the state).
   */
  state: ConversationState | undefined;
  /** True when an idempotency record answered a retry; nothing was applied again. */
  replayed: boolean;
}

/** How a commit answers (`ConversationStore.commit`). */
export interface CommitOptions {
  /**
   * False: the caller does not use `CommitOutcome.state` (the Commit RPC without `include_state`),
   * so a process holding no copy of the conversation may plan an append on its stored tail and
   * answer without the state (store/tail-commit.ts). Default true.
   */
  withState?: boolean;
}

/**
 * What a store of one element or row per message (Redis, Postgres) holds in this process between
 * calls, and how its commits used it, for the metrics (`GET /metrics`): the decoded states
 * (`--decoded-state-bytes`, decoded-state-cache.ts) and the kept tails (`--kept-tail-bytes`,
 * kept-tails.ts), each as entries and approximate heap bytes, and since the store was made the
 * commits planned on a kept tail with no read and the tail reads commits made.
 */
export interface HeldCopies {
  decodedStates: { count: number; bytes: number };
  keptTails: { count: number; bytes: number };
  keptTailCommits: number;
  tailReads: number;
  /** Conversations followed for commit notices, and the catch-up reads notices started (followed-conversations.ts). */
  prefetch: { followed: number; catchUps: number };
}

/** The outcome of a fork: the new conversation's version (1) and what it was copied from. */
export interface ForkOutcome {
  version: bigint;
  forkedFrom: ForkOrigin;
}

export type { ConversationPage } from "./conversation-listing.js";

/**
 * Where conversations live. The implementations obey one contract (tested by one shared suite):
 * `MemoryConversationStore`, the embedded default, `RedisConversationStore` and
 * `PostgresConversationStore`.
 *
 * Errors are `ConnectError`s with the gRPC code the caller should see: ABORTED for a stale
 * `expectedVersion` (the message says the current version), INVALID_ARGUMENT for an invalid
 * delta (naming its index and the rule) or an id/key with a lone surrogate, UNAVAILABLE when the
 * backing store cannot be reached, DATA_LOSS (naming the conversation) when what it holds for the
 * conversation cannot be trusted (a version without its payload, an undecodable state or change, a
 * key of the wrong type), RESOURCE_EXHAUSTED when it refuses writes for memory.
 *
 * States returned by `load` and `commit` may be shared with the store's cache: treat them as
 * immutable (core functions never mutate their inputs).
 *
 * Every store also keeps the deployment's token calibration records (`CalibrationStore`) and its
 * usage ledger (`UsageLedgerStore`).
 *
 * A conversation expires its last commit plus its idle TTL (`conversation-expiry.ts`, computed by
 * the commit engine): from then on every method answers for it as for one never written, whether
 * or not the store's sweep has removed it yet, and a commit starts it anew at version 1.
 */
export interface ConversationStore extends CalibrationStore, UsageLedgerStore {
  /**
   * Which segment lists of the states this store hands out were made by appending to which: a
   * reader that keeps something per list (the compiler's history facts) learns in constant time
   * that a newer history extends the one it has. Absent = unknown (compare elements).
   */
  readonly lineage?: MessageListLineage;
  /** What the store holds of its conversations in this process (Redis, Postgres); absent for one that holds them all (memory). */
  readonly heldCopies?: HeldCopies;
  /**
   * How ids are looked up when a batch is applied to `base` (a state this store handed out for
   * `conversationId`) outside a commit: a compile with `commit.deltas` compiles its batch applied
   * to the stored state before the store commits it. With the store's id index and lineage that
   * costs what the batch brings; looked up in place, a one-message turn on 100,000 stored messages
   * compared 100,000 ids (~2.7 ms of a 4.3 ms turn). Absent = look in place.
   */
  idLookupsFor?(conversationId: string, base: ConversationState): Pick<DeltaContext, "lineage" | "messageIds" | "toolCallIds">;
  /**
   * Whether commits refuse the tool-round pairing rules (`DeltaContext.strictToolRounds`, the
   * server's `--strict-tool-rounds`): a compile-commit applies its batch beforehand by the same rules.
   */
  readonly strictToolRounds?: boolean;
  /** The current state; a conversation never written is an empty state with version 0. */
  load(conversationId: string): Promise<ConversationState>;
  /**
   * A window of one segment at one version: messages [end - count, end) of it (the tail when
   * `end` is unset), read without the rest of the segment, and with `withRest` the rest of the
   * state whole. All from one snapshot; `atVersion` pins the read to a version (a later page of
   * the same read), ABORTED naming the current version when the conversation is elsewhere. What
   * it costs is the window (and the rest when asked), not the segment: a reader of the last
   * messages of a 100,000-message history reads those. See `segment-window.ts`.
   */
  readWindow(conversationId: string, query: WindowQuery): Promise<SegmentWindow>;
  /**
   * Applies `deltas` atomically as one new version. `expectedVersion` undefined = no check. A
   * non-empty `idempotencyKey` already used with the same deltas returns the original outcome's
   * version (and its state while current), before any version check. `requestFingerprint`, when
   * given, identifies the batch for that instead of the deltas (a compile-commit: its deltas depend
   * on the state it read). `messageIds`, when given, are the ids for the messages the batch brings
   * without one, in the order the batch creates them (a compile that applied the same deltas to
   * the same version beforehand, so the ids it compiled are the ids stored); past its end, ids
   * are random as usual. `options.withState` false: the outcome's state may be left out (see `CommitOptions`).
   */
  commit(
    conversationId: string,
    expectedVersion: bigint | undefined,
    deltas: Delta[],
    idempotencyKey: string,
    requestFingerprint?: string,
    messageIds?: readonly string[],
    options?: CommitOptions,
  ): Promise<CommitOutcome>;
  /** The current version alone (0 for a conversation never written); cheaper than `load`. */
  currentVersion(conversationId: string): Promise<bigint>;
  /** Empties the conversation and advances its version (a tombstone). */
  clear(conversationId: string, expectedVersion: bigint | undefined): Promise<bigint>;
  /**
   * Removes every stored part of the conversation (state, segments, change log, listing entries,
   * idempotency records, usage ledger; its tenant's usage totals stay) at once: it then reads as
   * one never written, and no record answers a retry of its old commits. ABORTED (naming the
   * current version) when `expectedVersion` is given and is not the stored one. Returns the
   * version deleted, 0 when nothing was stored. Watches of it see no further changes; the server
   * ends them (a version that went back, `watchWithHeartbeats`). An expiry removes the same.
   */
  delete(conversationId: string, expectedVersion: bigint | undefined): Promise<bigint>;
  /**
   * Conversations by id or newest update first, filtered, examining at most a bounded number of
   * entries per call (see `conversation-listing.ts` and `ListConversationsRequest`).
   */
  list(query: ListQuery): Promise<ConversationPage>;
  /**
   * Every change with a version greater than `fromVersion`, in version order, then live changes
   * until `signal` aborts. Idle periods yield nothing; the caller sends heartbeats. Resuming from a
   * version whose following changes were trimmed from the bounded change log is OUT_OF_RANGE.
   */
  watch(conversationId: string, fromVersion: bigint, signal: AbortSignal): AsyncIterable<Change>;
  /**
   * The state at `version`, rebuilt from the change log when it is not the current one
   * (`version-history.ts`): OUT_OF_RANGE past the current version or outside the history window
   * (naming the oldest readable version), RESOURCE_EXHAUSTED past the read's bound.
   */
  loadAt(conversationId: string, version: bigint): Promise<ConversationState>;
  /**
   * Commits a new version whose state is the state at `toVersion` (`loadAt`'s), with the
   * expected-version check and idempotency key of a commit; its change has no deltas and
   * `rewound_to_version` set.
   */
  rewind(conversationId: string, expectedVersion: bigint | undefined, toVersion: bigint, idempotencyKey: string): Promise<CommitOutcome>;
  /**
   * Copies `conversationId` at `atVersion` (undefined = the current one) into `newConversationId`
   * as its version 1, `forked_from` set; the source is not written. ALREADY_EXISTS when the new id
   * was ever written, NOT_FOUND for a source never written.
   */
  fork(conversationId: string, atVersion: bigint | undefined, newConversationId: string): Promise<ForkOutcome>;
  /** Resolves when the store is usable, rejects when it is not; drives health. */
  ping(): Promise<void>;
  /** Releases connections and stops the expiry sweep; pending watches end. */
  close(): Promise<void>;
}
