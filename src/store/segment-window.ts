import { Code, ConnectError } from "@connectrpc/connect";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import type { RunningFacts } from "../codec/stored-token-counts.js";
import { emptyConversationState } from "./commit-plan.js";
import { storedSegments, type StoredSegment } from "./segment-edits.js";

/**
 * What `ConversationStore.readWindow` reads: messages [end - count, end) of one segment (clamped
 * to the segment), at one version. General enough for "the last N messages", "N messages before
 * position P" (a page of a paged read, pinned with `atVersion`) and "the tail a compile's budget
 * may keep" (read back from the end in growing windows, each pinned to the first one's version).
 */
export interface WindowQuery {
  segment: StoredSegment;
  /** The index after the window's last message; unset = the segment's length (the tail). Past the length = the length. */
  end?: number;
  /** How many messages at most, counted back from `end`; 0 reads none (the version and length alone). */
  count: number;
  /** Also the rest of the state: the other three segments whole, artifacts, experiences, tool definitions. */
  withRest: boolean;
  /** The version the read must find; another (0 for a conversation never written) is ABORTED naming the current one. */
  atVersion?: bigint;
}

/** A window of one segment at one version (`ConversationStore.readWindow`). */
export interface SegmentWindow {
  /**
   * The state at its version, whose `query.segment` holds only the window; with `withRest` the
   * other segments and the rest are whole, else empty. A conversation never written is version 0
   * with everything empty. Shared with the store's caches: treat as immutable.
   */
  state: ConversationState;
  /** The index in the segment of the window's first message. */
  start: number;
  /** The segment's length at that version. */
  length: number;
  /**
   * Redis and Postgres: what their entries tell a reader of the tail about the head
   * (`RunningFacts`, valid where their epoch is `epoch`), parallel to the window's messages; the
   * segment's first message when the window starts after it. Absent in memory.
   */
  stored?: { running: (RunningFacts | undefined)[]; epoch: bigint; first: Message | undefined };
}

/** Most messages one window may ask for (a request for more is INVALID_ARGUMENT): the stores' per-call bound. */
export const maxWindowMessages = 1_000_000;

/** INVALID_ARGUMENT for a query no store can answer, naming the field and the bound. */
export function checkWindowQuery(query: WindowQuery): void {
  if (!storedSegments.includes(query.segment)) throw new ConnectError(`readWindow: segment "${String(query.segment)}" is not one of ${storedSegments.join(", ")}`, Code.InvalidArgument);
  if (!Number.isSafeInteger(query.count) || query.count < 0 || query.count > maxWindowMessages) {
    throw new ConnectError(`readWindow: count ${query.count} must be an integer from 0 to ${maxWindowMessages}`, Code.InvalidArgument);
  }
  if (query.end !== undefined && (!Number.isSafeInteger(query.end) || query.end < 0)) throw new ConnectError(`readWindow: end ${query.end} must be a non-negative integer`, Code.InvalidArgument);
  if (query.atVersion !== undefined && query.atVersion < 0n) throw new ConnectError(`readWindow: atVersion ${query.atVersion} must not be negative`, Code.InvalidArgument);
}

/** The window's bounds in a segment of `length` messages. */
export function windowBounds(query: WindowQuery, length: number): { start: number; stop: number } {
  const stop = query.end === undefined ? length : Math.min(query.end, length);
  return { start: Math.max(0, stop - query.count), stop };
}

/** ABORTED: the conversation is not at the version the read was pinned to. */
export function windowMoved(conversationId: string, atVersion: bigint, current: bigint): ConnectError {
  return new ConnectError(
    `conversation "${conversationId}" is at version ${current}, not at version ${atVersion} that this read is pinned to: read again without atVersion (from the tail) to get the current version`,
    Code.Aborted,
  );
}

/**
 * The window of a whole state the store holds (the in-memory store's, or a cached copy that is
 * current): the segment sliced, the rest shared or left out. The whole segment is its own list
 * (what was derived from it by identity is found again).
 */
export function windowOf(state: ConversationState, query: WindowQuery): SegmentWindow {
  if (query.atVersion !== undefined && query.atVersion !== state.version) throw windowMoved(state.conversationId, query.atVersion, state.version);
  const list = state[query.segment];
  const { start, stop } = windowBounds(query, list.length);
  const window = start === 0 && stop === list.length ? list : list.slice(start, stop);
  const base: ConversationState = query.withRest ? state : { ...emptyConversationState(state.conversationId), version: state.version };
  return { state: { ...base, [query.segment]: window }, start, length: list.length };
}
