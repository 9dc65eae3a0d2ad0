import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { randomUUID } from "node:crypto";
import type { Change } from "#gen/contextd/v1/conversation_service_pb";
import { ForkOriginSchema, type ConversationState, type Delta, type ForkOrigin } from "#gen/contextd/v1/state_pb";
import type { Codec } from "../codec/codec.js";
import type { DeltaContext } from "../core/deltas/delta-context.js";
import type { MessageListLineage } from "../core/model/message-list-lineage.js";
import { stringLimits } from "../core/model/string-limits.js";
import { clearStateDeltas, deltasFingerprint, indexedLookups, planCommit, planReplacement, presetMessageIds, type CommitPlan, type CommitPlanOptions } from "./commit-plan.js";
import type { UndoRecording } from "./change-undo.js";
import type { FollowedConversations } from "./followed-conversations.js";
import { ContendedCopies } from "./contended-copies.js";
import type { ConversationExpiry } from "./conversation-expiry.js";
import type { HistoryBound } from "./history-bound.js";
import type { CommitOutcome, ConversationStore, ForkOutcome } from "./conversation-store.js";
import { defaultHistoryLimits, rewoundState, sharedWith, stateAtVersion, type HistoryLimits } from "./version-history.js";
import { trustRewoundSegments } from "./segment-edits.js";
import type { MessageIdIndex } from "./message-id-index.js";
import { idempotencyKeyReused, requireStorableKey, versionConflict } from "./store-errors.js";
import type { ConversationUsageRecord, RecordedUsage, TenantUsagePage, UsageLedgerBounds, UsageLedgerRecords, UsageReport } from "./usage-ledger.js";
import { answeredCallIds, plannableOnTail, tailLookups, type CommitTail, type TailRead } from "./tail-commit.js";

/**
 * The one commit flow of every store: the idempotency and version checks, the plan (the batch's
 * rules, ids, tool rounds and limits, in `planCommit`), the retries of a commit another writer got
 * ahead of, and the outcome. Why it exists: the memory, Redis and Postgres stores each wrote this
 * flow out, and a rule changed in one had to be changed alike in the others. A store now supplies
 * only its I/O (`CommitIo`): its copy to start from, a read, and one atomic conditional write.
 *
 * A commit starts from the store's copy without reading when it can (the write compares the
 * stored version, so a stale copy costs a retry, never a lost update); what the copy cannot decide
 * (another expected version, a delta it refuses, a copy others wrote after: `ContendedCopies`) is
 * read first, which catches the copy up. Without a copy, a commit whose caller does not want the
 * state back is planned on the stored tail when the store can read one (`readTail`, tail-commit.ts).
 */

/** What a store keeps per idempotency key: the commit's response without its state. */
export interface RecordedCommit {
  fingerprint: string;
  /** The version the commit produced. */
  version: bigint;
}

/** A read for a commit: the stored state and, for a non-empty key, its record if one is kept. */
export interface CommitRead {
  state: ConversationState;
  record?: RecordedCommit;
}

/** The state a replacing commit sets on `base`, and the mark its change carries (see `planReplacement`). */
export type Replacement = (base: ConversationState) => { state: ConversationState; mark: Pick<Change, "rewoundToVersion" | "forkedFrom"> };

/** What a store's conditional write answered. */
export type CommitWrite =
  /** Written: the plan's state is the stored one now (and the store's copy). */
  | { outcome: "ok" }
  /** The key's record answered first; nothing was written. `current` is the stored version. */
  | { outcome: "replay"; record: RecordedCommit; current: bigint }
  /** Another writer moved the version past the base; nothing was written. */
  | { outcome: "conflict"; current: bigint }
  /** A plan on the tail the store's id index refuses (an id taken, the index not current): nothing was written; plan on the whole state. */
  | { outcome: "whole" }
  /** The stored lists are not the base's at its version (written behind the store's back): the store forgot its copy. */
  | { outcome: "stale"; current: bigint };

/** The copies a store holds in this process, as a commit starts from them. */
export interface CommitCopies {
  /** The copy a commit may start from without reading, if the store holds one. */
  copy(conversationId: string): ConversationState | undefined;
  /** The index of `base`'s message ids, when the store keeps one beside it. */
  idIndex(conversationId: string, base: ConversationState): MessageIdIndex | undefined;
}

/** A store's I/O for a commit (see the file's header). */
export interface CommitIo {
  /** The stored state (catching the copy up) and the record of `idempotencyKey` when it is non-empty. */
  read(conversationId: string, idempotencyKey: string): Promise<CommitRead>;
  /**
   * Writes `plan` as one atomic batch if the stored conversation is still at `base` and the key
   * has no record: the state, the change for Watch, the key's record; nothing otherwise.
   */
  write(conversationId: string, base: ConversationState, plan: CommitPlan, idempotencyKey: string, fingerprint: string): Promise<CommitWrite>;
  /**
   * What a commit planned on the stored tail needs (tail-commit.ts), in one read; the names of
   * `callIds`' latest calls among it. A store without it plans every commit on the whole state.
   */
  readTail?(conversationId: string, idempotencyKey: string, callIds: readonly string[]): Promise<TailRead>;
  /**
   * `write` for a plan made on `tail`; "whole" when the store's id index refuses it. Written, the
   * store keeps the plan's state as the conversation's tail (`keptTail`); not written, it forgets
   * the tail it kept.
   */
  writeTail?(conversationId: string, tail: CommitTail, plan: CommitPlan, idempotencyKey: string, fingerprint: string): Promise<CommitWrite>;
  /** The tail this process kept of the conversation at the version it last read or wrote it (kept-tails.ts), if any. */
  keptTail?(conversationId: string): CommitTail | undefined;
}

/** Most call ids one tail read looks up; a batch answering more is planned on the whole state. */
const maxTailCallLookups = 256;

/** Where a commit on the tail left the whole-state commit to go on from. */
interface TailFallback {
  /** The read the tail read was (a conversation never written), so the whole-state commit reads nothing more. */
  read?: CommitRead;
}

export interface CommitEngineOptions {
  copies: CommitCopies;
  io: CommitIo;
  codec: Codec;
  lineage: MessageListLineage;
  /** Ids for messages committed without one (random UUIDs by default), and whether tool-round rules are strict. */
  deltaContext?: DeltaContext;
  now: () => number;
  /** Attempts of a commit without expected version while other writers keep getting there first (default 100). */
  maxCommitAttempts?: number;
  /** The idle TTLs commits set each conversation's expiry by; none = never. */
  expiry?: ConversationExpiry;
  /** The default prune commits keep each conversation's history within (`--prune-*`); none = only `prune_history` deltas prune. */
  historyBound?: HistoryBound;
  /** Bytes one change's undo may hold (`--history-undo-bytes`, change-undo.ts); 0 or none = changes record no undo. */
  maxUndoBytes?: number;
}

export class CommitEngine implements Pick<ConversationStore, "commit" | "clear" | "idLookupsFor" | "strictToolRounds"> {
  private readonly contended = new ContendedCopies();
  private readonly deltaContext: DeltaContext;
  private readonly maxCommitAttempts: number;

  /** `CommitPlanOptions.historyBound`: the bound, messages measured by the codec (a message's kept encoding when it has one). */
  private readonly historyBound: CommitPlanOptions["historyBound"];

  constructor(private readonly options: CommitEngineOptions) {
    this.deltaContext = options.deltaContext ?? { newMessageId: () => randomUUID() };
    this.maxCommitAttempts = options.maxCommitAttempts ?? 100;
    const bound = options.historyBound;
    this.historyBound = bound?.any ? { bound, sizeOf: (message) => options.codec.encodeStoredMessage(message).byteLength } : undefined;
  }

  get strictToolRounds(): boolean {
    return this.deltaContext.strictToolRounds === true;
  }

  /** Commits written from a plan on the stored tail (`commitOnTail`), for tests and gauges. */
  tailCommits = 0;
  /** Of those, the ones planned on a tail this process kept, with no read before the write (`commitOnKeptTail`). */
  keptTailCommits = 0;
  /** Reads of the stored tail (`CommitIo.readTail` calls): what a commit on a kept tail saves. */
  tailReads = 0;
  /** Reads of the whole stored state before a commit's plan (`CommitIo.read` calls). */
  commitReads = 0;
  /** Conditional writes sent (`CommitIo.write` and `writeTail` calls), applied or refused. */
  commitWrites = 0;

  idLookupsFor(conversationId: string, base: ConversationState): Pick<DeltaContext, "lineage" | "messageIds" | "toolCallIds"> {
    return indexedLookups(this.options.lineage, () => this.options.copies.idIndex(conversationId, base));
  }

  /** How a plan records its change's undo; `historyStart` where a tail plan's history starts. */
  private undoRecording(historyStart: number): UndoRecording | undefined {
    const maxBytes = this.options.maxUndoBytes ?? 0;
    return maxBytes > 0 ? { maxBytes, lineage: this.options.lineage, historyStart } : undefined;
  }

  async commit(...[conversationId, expectedVersion, deltas, idempotencyKey, requestFingerprint, messageIds, options]: Parameters<ConversationStore["commit"]>): Promise<CommitOutcome> {
    const outcome = await this.apply(conversationId, expectedVersion, deltas, idempotencyKey, false, requestFingerprint, messageIds, options?.withState === false);
    if (outcome.state) this.options.codec.retainState(outcome.state, this.options.lineage);
    return outcome;
  }

  async clear(conversationId: string, expectedVersion: bigint | undefined): Promise<bigint> {
    return (await this.apply(conversationId, expectedVersion, [...clearStateDeltas], "", true)).version;
  }

  /**
   * Commits the state `replacement` gives for the base it is planned on (a rewind, a fork's first
   * version), with the same checks, retries and idempotency as a batch; `fingerprint` identifies
   * the request for its key.
   */
  async replace(conversationId: string, expectedVersion: bigint | undefined, idempotencyKey: string, fingerprint: string, replacement: Replacement): Promise<CommitOutcome> {
    const outcome = await this.apply(conversationId, expectedVersion, [], idempotencyKey, false, fingerprint, undefined, false, replacement);
    if (outcome.state) this.options.codec.retainState(outcome.state, this.options.lineage);
    return outcome;
  }

  private async apply(
    conversationId: string,
    expectedVersion: bigint | undefined,
    deltas: Delta[],
    idempotencyKey: string,
    cleared: boolean,
    requestFingerprint?: string,
    messageIds?: readonly string[],
    withoutState = false,
    replacement?: Replacement,
  ): Promise<CommitOutcome> {
    const { copies, io, lineage } = this.options;
    const deltaContext = this.deltaContext;
    requireStorableKey("conversation_id", conversationId, stringLimits.id);
    requireStorableKey("idempotency_key", idempotencyKey, stringLimits.idempotencyKey);
    const fingerprint = idempotencyKey === "" ? "" : (requestFingerprint ?? deltasFingerprint(deltas));
    let preRead: CommitRead | undefined;
    // A bounded history is measured on the whole state (a prune needs its tool rounds), never on the tail.
    const bounded = this.historyBound?.bound.limitsOf(conversationId) !== undefined;
    if (withoutState && !bounded && io.readTail && io.writeTail && copies.copy(conversationId) === undefined && plannableOnTail(deltas)) {
      const onTail = await this.commitOnTail(conversationId, expectedVersion, deltas, idempotencyKey, fingerprint, messageIds);
      if ("version" in onTail) return onTail;
      preRead = onTail.read;
    }
    let trustCopy = true;
    let othersWrote = false;
    for (let attempt = 1; ; attempt++) {
      const copy = trustCopy ? copies.copy(conversationId) : undefined;
      trustCopy = false;
      let base: ConversationState;
      const fromCopy = copy !== undefined && this.contended.trusted(copy) && (expectedVersion === undefined || expectedVersion === copy.version);
      if (fromCopy) {
        base = copy;
      } else {
        const before = copies.copy(conversationId);
        if (preRead === undefined) this.commitReads++;
        const read = preRead ?? (await io.read(conversationId, idempotencyKey));
        preRead = undefined;
        if (before !== undefined && read.state !== before) othersWrote = true;
        if (read.record) return replayed(conversationId, idempotencyKey, fingerprint, read.record, read.state);
        base = read.state;
        if (expectedVersion !== undefined && expectedVersion !== base.version) throw versionConflict(conversationId, expectedVersion, base.version);
      }
      let plan: CommitPlan;
      try {
        if (replacement !== undefined) {
          const { state, mark } = replacement(base);
          plan = planReplacement(base, state, mark, { idempotencyKey, committedAtUnixMs: BigInt(this.options.now()), expiry: this.options.expiry, undo: this.undoRecording(0) });
        } else plan = planCommit(base, deltas, {
          deltaContext: messageIds ? presetMessageIds(messageIds, deltaContext) : deltaContext,
          lineage,
          idIndex: () => copies.idIndex(conversationId, base),
          idempotencyKey,
          committedAtUnixMs: BigInt(this.options.now()),
          cleared,
          expiry: this.options.expiry,
          historyBound: this.historyBound,
          undo: this.undoRecording(0),
        });
      } catch (error) {
        // The copy may be behind (or a retry's batch already applied): read, then decide.
        if (!fromCopy) throw error;
        attempt--;
        continue;
      }
      this.commitWrites++;
      const written = await io.write(conversationId, base, plan, idempotencyKey, fingerprint);
      if (written.outcome === "whole") throw new ConnectError(`conversation "${conversationId}": the store answered a whole-state commit as a tail plan`, Code.Internal);
      if (written.outcome === "ok") {
        if (othersWrote) this.contended.add(plan.state);
        return { version: plan.state.version, state: plan.state, replayed: false };
      }
      if (written.outcome === "replay") {
        const { record, current } = written;
        if (record.fingerprint !== fingerprint) throw idempotencyKeyReused(conversationId, idempotencyKey);
        // The state goes with the replay only while the conversation is still at the recorded version.
        const now = copies.copy(conversationId);
        const state = current !== record.version ? undefined : now?.version === current ? now : (await io.read(conversationId, "")).state;
        return replayed(conversationId, idempotencyKey, fingerprint, record, state);
      }
      if (written.outcome === "conflict" && expectedVersion !== undefined) throw versionConflict(conversationId, expectedVersion, written.current);
      othersWrote = true;
      if (attempt >= this.maxCommitAttempts) throw gaveUp(conversationId, attempt, written.current);
    }
  }

  /**
   * The commit planned on the stored tail (tail-commit.ts): the same checks in the same order as
   * the whole-state flow, answered without the state; what the tail cannot decide (a refusal of
   * the plan included, so the error is the whole state's) goes on as a whole-state commit.
   */
  private async commitOnTail(
    conversationId: string,
    expectedVersion: bigint | undefined,
    deltas: Delta[],
    idempotencyKey: string,
    fingerprint: string,
    messageIds: readonly string[] | undefined,
  ): Promise<CommitOutcome | TailFallback> {
    const { io, lineage } = this.options;
    const callIds = answeredCallIds(deltas);
    if (callIds.length > maxTailCallLookups) return {};
    // A kept tail others wrote after (sidecars taking turns) is read first, as a contended copy is:
    // trying it would cost a refused write before the read.
    const kept = io.keptTail?.(conversationId);
    if (kept !== undefined && this.contended.trusted(kept.state) && (expectedVersion === undefined || expectedVersion === kept.state.version)) {
      const outcome = await this.commitOnKeptTail(conversationId, kept, deltas, idempotencyKey, fingerprint, messageIds);
      if (outcome === "whole") return {};
      if (outcome !== undefined) return outcome;
    }
    let othersWrote = false;
    for (let attempt = 1; ; attempt++) {
      this.tailReads++;
      const read = await io.readTail!(conversationId, idempotencyKey, callIds);
      if (kept !== undefined && read.version !== kept.state.version) othersWrote = true;
      if (read.record) return replayed(conversationId, idempotencyKey, fingerprint, read.record, undefined);
      if (expectedVersion !== undefined && expectedVersion !== read.version) throw versionConflict(conversationId, expectedVersion, read.version);
      if (read.whole) return { read: { state: read.whole } };
      if (!read.tail) return {};
      let plan: CommitPlan;
      try {
        plan = planCommit(read.tail.state, deltas, {
          deltaContext: messageIds ? presetMessageIds(messageIds, this.deltaContext) : this.deltaContext,
          lineage,
          lookups: tailLookups(read.tail, lineage),
          idempotencyKey,
          committedAtUnixMs: BigInt(this.options.now()),
          cleared: false,
          expiry: this.options.expiry,
          undo: this.undoRecording(read.tail.start),
        });
      } catch {
        return {};
      }
      this.commitWrites++;
      const written = await io.writeTail!(conversationId, read.tail, plan, idempotencyKey, fingerprint);
      switch (written.outcome) {
        case "ok": {
          this.tailCommits++;
          const keptNow = othersWrote ? io.keptTail?.(conversationId) : undefined;
          if (keptNow !== undefined) this.contended.add(keptNow.state);
          return { version: plan.state.version, state: undefined, replayed: false };
        }
        case "replay":
          return replayed(conversationId, idempotencyKey, fingerprint, written.record, undefined);
        case "conflict":
          if (expectedVersion !== undefined) throw versionConflict(conversationId, expectedVersion, written.current);
          if (attempt >= this.maxCommitAttempts) throw gaveUp(conversationId, attempt, written.current);
          othersWrote = true;
          continue;
        case "stale":
        case "whole":
          return {};
      }
    }
  }

  /**
   * The commit planned on the tail this process kept (kept-tails.ts): one round trip, the write,
   * which checks the key's record and then the stored version and lengths as it does for any
   * plan. Undefined where the kept tail cannot decide (the plan refused, a call it does not hold,
   * another writer ahead): the commit then goes on as if nothing was kept, so its outcome is the
   * one a tail read would have given. "whole" when the id index refused the plan, as a plan on a
   * tail read would have been: planned on the whole state next, as that one would.
   */
  private async commitOnKeptTail(
    conversationId: string,
    kept: CommitTail,
    deltas: Delta[],
    idempotencyKey: string,
    fingerprint: string,
    messageIds: readonly string[] | undefined,
  ): Promise<CommitOutcome | "whole" | undefined> {
    let plan: CommitPlan;
    try {
      plan = planCommit(kept.state, deltas, {
        deltaContext: messageIds ? presetMessageIds(messageIds, this.deltaContext) : this.deltaContext,
        lineage: this.options.lineage,
        lookups: tailLookups(kept, this.options.lineage),
        idempotencyKey,
        committedAtUnixMs: BigInt(this.options.now()),
        cleared: false,
        expiry: this.options.expiry,
        undo: this.undoRecording(kept.start),
      });
    } catch {
      return undefined;
    }
    this.commitWrites++;
    const written = await this.options.io.writeTail!(conversationId, kept, plan, idempotencyKey, fingerprint);
    if (written.outcome === "replay") return replayed(conversationId, idempotencyKey, fingerprint, written.record, undefined);
    if (written.outcome === "whole") return "whole";
    if (written.outcome !== "ok") return undefined;
    this.tailCommits++;
    this.keptTailCommits++;
    return { version: plan.state.version, state: undefined, replayed: false };
  }
}

/** ABORTED: a commit without expected version lost to other writers `attempts` times. */
function gaveUp(conversationId: string, attempts: number, current: bigint): ConnectError {
  return new ConnectError(`conversation "${conversationId}": gave up after ${attempts} attempts, other writers kept committing (current version ${current})`, Code.Aborted);
}

/**
 * What every store answers through its engine: commits, clears, and the id lookups and tool-round
 * rules a compile-commit applies its batch by beforehand. A store extends it and sets `engine`.
 */
export abstract class EngineCommittedStore
  implements Pick<ConversationStore, "commit" | "clear" | "idLookupsFor" | "strictToolRounds" | "loadAt" | "fork" | "rewind" | "recordUsage" | "readUsage" | "listTenantUsage">
{
  protected abstract readonly engine: CommitEngine;
  /** The conversations the store follows for other processes' commit notices (Redis, Postgres: `--prefetch-conversations`), if it does. */
  protected readonly followed: FollowedConversations | undefined;
  /** The store's record of appended and truncated lists (the one its engine plans with). */
  abstract readonly lineage: MessageListLineage;
  /** The store's usage ledger I/O, which the `UsageLedgerStore` calls go to. */
  protected abstract readonly usage: UsageLedgerRecords;
  /** What one read of a past version may cost (version-history.ts); a store sets it from its options. */
  protected historyLimits: HistoryLimits = defaultHistoryLimits;
  /**
   * A store's own copy of the source's current version into a new conversation, when it has one
   * cheaper than committing every message again (Redis: the fork reads the source's lists; Postgres: `INSERT …
   * SELECT` of the rows): "copied", "exists" (the new id has a version), or "unavailable" (no such
   * copy here, or the source moved on since): the fork then commits the state through the engine.
   */
  protected async forkCurrent(_conversationId: string, _forkedFrom: ForkOrigin, _newConversationId: string): Promise<"copied" | "exists" | "unavailable"> {
    return "unavailable";
  }
  /**
   * As `forkCurrent`, for a fork at a past version `state` (read through the undos) of a source
   * now at `current`: a store whose stored lists or rows the past state is a prefix of may share
   * them (Redis, Postgres migration 14) instead of the engine writing every message.
   */
  protected async forkPast(_conversationId: string, _forkedFrom: ForkOrigin, _newConversationId: string, _state: ConversationState, _current: bigint): Promise<"copied" | "exists" | "unavailable"> {
    return "unavailable";
  }
  abstract load(conversationId: string): Promise<ConversationState>;
  abstract currentVersion(conversationId: string): Promise<bigint>;
  abstract watch(conversationId: string, fromVersion: bigint, signal: AbortSignal): AsyncIterable<Change>;

  loadAt(conversationId: string, version: bigint): Promise<ConversationState> {
    return stateAtVersion(this, conversationId, version, this.historyLimits);
  }

  async rewind(conversationId: string, expectedVersion: bigint | undefined, toVersion: bigint, idempotencyKey: string): Promise<CommitOutcome> {
    const target = await this.loadAt(conversationId, toVersion);
    return this.engine.replace(conversationId, expectedVersion, idempotencyKey, `rewind:${toVersion}`, (base) => {
      const shared = sharedWith(base, target, this.lineage);
      trustRewoundSegments(base, shared, this.lineage, this.strictToolRounds);
      return { state: rewoundState(base, shared, base.version + 1n), mark: { rewoundToVersion: toVersion } };
    });
  }

  async fork(conversationId: string, atVersion: bigint | undefined, newConversationId: string): Promise<ForkOutcome> {
    requireStorableKey("conversation_id", conversationId, stringLimits.id);
    requireStorableKey("new_conversation_id", newConversationId, stringLimits.id);
    if (newConversationId === conversationId) throw new ConnectError(`new_conversation_id: must differ from conversation_id "${conversationId}"`, Code.InvalidArgument);
    const current = await this.currentVersion(conversationId);
    if (current === 0n) throw new ConnectError(`conversation "${conversationId}" has never been written: there is nothing to fork`, Code.NotFound);
    const version = atVersion ?? current;
    if (version < 1n) throw new ConnectError(`at_version: must be at least 1 (the first version), got ${version}`, Code.InvalidArgument);
    const forkedFrom = create(ForkOriginSchema, { conversationId, version });
    const exists = () => new ConnectError(`new_conversation_id "${newConversationId}" already exists: a fork makes a new conversation`, Code.AlreadyExists);
    if (version === current) {
      const copied = await this.forkCurrent(conversationId, forkedFrom, newConversationId);
      if (copied === "exists") throw exists();
      if (copied === "copied") return { version: 1n, forkedFrom };
    }
    const state = await this.loadAt(conversationId, version);
    if (version !== current) {
      const shared = await this.forkPast(conversationId, forkedFrom, newConversationId, state, current);
      if (shared === "exists") throw exists();
      if (shared === "copied") return { version: 1n, forkedFrom };
    }
    if ((await this.currentVersion(newConversationId)) !== 0n) throw exists();
    try {
      const outcome = await this.engine.replace(newConversationId, 0n, "", "", () => ({ state: { ...state, forkedFrom }, mark: { forkedFrom } }));
      return { version: outcome.version, forkedFrom };
    } catch (error) {
      if (error instanceof ConnectError && error.code === Code.Aborted) throw exists();
      throw error;
    }
  }

  async recordUsage(tenant: string, conversationId: string, report: UsageReport, bounds: UsageLedgerBounds): Promise<RecordedUsage> {
    return this.usage.record(tenant, conversationId, report, bounds);
  }

  async readUsage(tenant: string, conversationId: string): Promise<ConversationUsageRecord> {
    return this.usage.read(tenant, conversationId);
  }

  async listTenantUsage(tenant: string, after: string, limit: number): Promise<TenantUsagePage> {
    return this.usage.list(tenant, after, limit);
  }

  get strictToolRounds(): boolean {
    return this.engine.strictToolRounds;
  }

  /** Commits this store planned on the stored tail (`CommitEngine.tailCommits`). */
  get tailCommits(): number {
    return this.engine.tailCommits;
  }

  /** The round trips of this store's commits (tail reads, whole reads, writes) and the commits planned on a kept tail with no read (`CommitEngine`). */
  get commitTraffic(): { tailReads: number; wholeReads: number; writes: number; keptTailCommits: number } {
    return { tailReads: this.engine.tailReads, wholeReads: this.engine.commitReads, writes: this.engine.commitWrites, keptTailCommits: this.engine.keptTailCommits };
  }

  idLookupsFor(conversationId: string, base: ConversationState): Pick<DeltaContext, "lineage" | "messageIds" | "toolCallIds"> {
    return this.engine.idLookupsFor(conversationId, base);
  }

  /** A commit starts after the catch-up a commit notice started, from its result, instead of reading too. */
  commit(...args: Parameters<ConversationStore["commit"]>): Promise<CommitOutcome> {
    const catchingUp = this.followed?.catchingUp(args[0]);
    return catchingUp === undefined ? this.engine.commit(...args) : catchingUp.then(() => this.engine.commit(...args));
  }

  /** The conversations followed for commit notices, and the catch-ups notices started and finished (followed-conversations.ts). */
  get prefetch(): { followed: number; catchUps: number; caughtUp: number } {
    return this.followed?.figures ?? { followed: 0, catchUps: 0, caughtUp: 0 };
  }

  clear(conversationId: string, expectedVersion: bigint | undefined): Promise<bigint> {
    return this.engine.clear(conversationId, expectedVersion);
  }
}

/** A retried commit's outcome: the recorded version, and the state only if it is that version's. */
function replayed(conversationId: string, key: string, fingerprint: string, record: RecordedCommit, current: ConversationState | undefined): CommitOutcome {
  if (record.fingerprint !== fingerprint) throw idempotencyKeyReused(conversationId, key);
  return { version: record.version, state: current?.version === record.version ? current : undefined, replayed: true };
}
