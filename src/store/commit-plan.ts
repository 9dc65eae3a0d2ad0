import { create, toBinary } from "@bufbuild/protobuf";
import { createHash } from "node:crypto";
import { ChangeSchema, type Change } from "#gen/contextd/v1/conversation_service_pb";
import { ConversationStateSchema, DeltaSchema, type ConversationState, type Delta } from "#gen/contextd/v1/state_pb";
import { applyDelta, applyDeltas } from "../core/deltas/apply-deltas.js";
import type { DeltaContext } from "../core/deltas/delta-context.js";
import type { MessageListLineage } from "../core/model/message-list-lineage.js";
import type { Message } from "#gen/contextd/v1/message_pb";
import { undoOf, type UndoRecording } from "./change-undo.js";
import type { ConversationExpiry } from "./conversation-expiry.js";
import type { HistoryBound } from "./history-bound.js";
import type { MessageIdIndex } from "./message-id-index.js";

/** The state of a conversation never written (or unknown): empty, version 0. */
export function emptyConversationState(conversationId: string): ConversationState {
  return create(ConversationStateSchema, { conversationId });
}

/**
 * What a store keeps beside a conversation's header for listings (`ConversationSummary`): the
 * commit time of its latest version, and its title and labels (also in the state's rest, which a
 * listing does not decode).
 */
export interface ListedMetadata {
  /** `Change.committed_at_unix_ms` of the version; a first commit is also the creation time. */
  updatedAtUnixMs: bigint;
  title: string;
  labels: Record<string, string>;
  /** The title or labels differ from the base's (always on a first commit): a store rewrites them only then. */
  changed: boolean;
  /** When the conversation expires unless committed to again (Unix ms, `ConversationExpiry`); 0n = never. */
  expiresAtUnixMs: bigint;
  /** The base had an expiry and this version has none: a store drops what it kept for the old one. */
  expiryDropped: boolean;
}

/** What a commit writes: the next state (version + 1), the change record published to Watch, and what listings read. */
export interface CommitPlan {
  state: ConversationState;
  change: Change;
  metadata: ListedMetadata;
}

export interface CommitPlanOptions {
  /** Ids for messages that arrive without one. */
  deltaContext: DeltaContext;
  /** The store's record of appended lists: the batch's appends are recorded in it. */
  lineage?: MessageListLineage;
  /**
   * The index of the base state's message ids, when the store keeps one (see `MessageIdIndex`):
   * asked for once, when the batch first brings a message (a removal never builds one).
   */
  idIndex?: () => MessageIdIndex | undefined;
  /** Lookups to apply the batch with instead of `idIndex`'s (a plan on the stored tail: `tailLookups`). */
  lookups?: Pick<DeltaContext, "lineage" | "messageIds" | "toolCallIds" | "headToolCallName">;
  idempotencyKey: string;
  /** Commit time in Unix milliseconds (the store's clock; core never reads one). */
  committedAtUnixMs: bigint;
  /** True for `Clear`, so watchers can tell a clear from a batch that happens to clear. */
  cleared: boolean;
  /** The idle TTLs the store's conversations expire by; none = never. */
  expiry?: ConversationExpiry;
  /** The default prune the store's conversations are kept within (`HistoryBound`), and how a message's bytes are measured for it. */
  historyBound?: { bound: HistoryBound; sizeOf: (message: Message) => number };
  /** How the change records its undo (change-undo.ts); none = it records none (reads of past versions replay forward). */
  undo?: UndoRecording;
}

/** The batch a `Clear` commits (with `cleared` set, so watchers can tell it from a batch that clears). */
export const clearStateDeltas: readonly Delta[] = [create(DeltaSchema, { operation: { case: "clearState", value: {} } })];

/**
 * What a batch applied to a state of the store looks ids up in: the store's index of the base
 * state (asked for once, when the batch first brings a message) and the states the batch appends
 * to it (per `lineage`, where the batch's appends are recorded too).
 */
export function indexedLookups(lineage: MessageListLineage, idIndex: (() => MessageIdIndex | undefined) | undefined): Required<Pick<DeltaContext, "lineage" | "messageIds" | "toolCallIds">> {
  let ids: MessageIdIndex | undefined | null = null;
  return {
    lineage,
    messageIds: (state) => (ids === null ? (ids = idIndex?.()) : ids)?.lookupFor(state, lineage),
    toolCallIds: (state, segment) => (ids === null ? (ids = idIndex?.()) : ids)?.toolCallLookupFor(state, segment, lineage),
  };
}

/** Both stores compute a commit the same way; they differ only in how they make it atomic. */
export function planCommit(base: ConversationState, deltas: Delta[], options: CommitPlanOptions): CommitPlan {
  const { lineage, idIndex, deltaContext, lookups } = options;
  // The ids given to messages that came without one go into the change, so the log rebuilds the
  // state exactly (version-history.ts).
  const assignedMessageIds: string[] = [];
  const newMessageId = () => {
    const id = deltaContext.newMessageId();
    assignedMessageIds.push(id);
    return id;
  };
  const context: DeltaContext =
    lineage === undefined && lookups === undefined
      ? { ...deltaContext, newMessageId }
      : { newMessageId, strictToolRounds: deltaContext.strictToolRounds, ...(lookups ?? indexedLookups(lineage!, idIndex)) };
  let applied = applyDeltas(base, deltas, context);
  let committed = deltas;
  // The tenant's default prune: one more delta of the batch, in its change (so the change log
  // rebuilds this version), only when it drops something.
  const prune = options.historyBound?.bound.pruneFor(base.conversationId, applied, options.historyBound.sizeOf);
  if (prune !== undefined) {
    const pruned = applyDelta(applied, prune, context, deltas.length);
    if (pruned.history !== applied.history) {
      applied = pruned;
      committed = [...deltas, prune];
    }
  }
  const version = base.version + 1n;
  const state = { ...applied, conversationId: base.conversationId, version };
  const change = create(ChangeSchema, {
    conversationId: base.conversationId,
    version,
    deltas: committed,
    idempotencyKey: options.idempotencyKey,
    committedAtUnixMs: options.committedAtUnixMs,
    cleared: options.cleared,
    assignedMessageIds,
  });
  // Version 0 is the empty state: nothing reads back to it through an undo.
  if (options.undo !== undefined && base.version > 0n) change.undo = undoOf(base, state, options.undo);
  return withMetadata(base, state, change, options.expiry);
}

/**
 * A commit that sets the whole state instead of applying deltas: a `Rewind` (`rewoundToVersion`)
 * or a fork's first version (`forkedFrom`). Its change carries no deltas, only that mark.
 */
export function planReplacement(
  base: ConversationState,
  next: ConversationState,
  mark: Pick<Change, "rewoundToVersion" | "forkedFrom">,
  options: Pick<CommitPlanOptions, "idempotencyKey" | "committedAtUnixMs" | "expiry" | "undo">,
): CommitPlan {
  const version = base.version + 1n;
  const state = { ...next, conversationId: base.conversationId, version };
  const change = create(ChangeSchema, {
    conversationId: base.conversationId,
    version,
    idempotencyKey: options.idempotencyKey,
    committedAtUnixMs: options.committedAtUnixMs,
    ...mark,
  });
  // A fork's first version replaces the empty state, which needs no undo to be read.
  if (options.undo !== undefined && base.version > 0n && mark.forkedFrom === undefined) change.undo = undoOf(base, state, options.undo);
  return withMetadata(base, state, change, options.expiry);
}

function withMetadata(base: ConversationState, state: ConversationState, change: Change, expiry: ConversationExpiry | undefined): CommitPlan {
  const options = { committedAtUnixMs: change.committedAtUnixMs };
  const expiresAtUnixMs = expiry?.expiresAt(base.conversationId, state, options.committedAtUnixMs) ?? 0n;
  const metadata: ListedMetadata = {
    updatedAtUnixMs: options.committedAtUnixMs,
    title: state.title,
    labels: state.labels,
    changed: base.version === 0n || state.title !== base.title || state.labels !== base.labels,
    expiresAtUnixMs,
    expiryDropped: expiresAtUnixMs === 0n && base.version > 0n && (expiry?.ttlOf(base.conversationId, base) ?? 0) > 0,
  };
  return { state, change, metadata };
}

/**
 * An id source that hands out `ids` in order, then falls back to `fallback`. A store makes one per
 * plan, so a plan retried on a re-read base of the same version draws the same ids again.
 */
export function presetMessageIds(ids: readonly string[], fallback: DeltaContext): DeltaContext {
  let next = 0;
  return { newMessageId: () => (next < ids.length ? ids[next++]! : fallback.newMessageId()), strictToolRounds: fallback.strictToolRounds };
}

/**
 * Identifies a batch for idempotency: a retry must carry the same deltas. Protobuf binary of the
 * same field values is the same bytes whichever client language sent them, since the server
 * re-encodes what it decoded.
 */
export function deltasFingerprint(deltas: readonly Delta[]): string {
  const hash = createHash("sha256");
  for (const delta of deltas) {
    const bytes = toBinary(DeltaSchema, delta);
    hash.update(String(bytes.length) + ":");
    hash.update(bytes);
  }
  return hash.digest("hex");
}
