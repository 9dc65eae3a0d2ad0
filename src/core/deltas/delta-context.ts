import type { ConversationState } from "#gen/contextd/v1/state_pb";
import type { MessageListLineage } from "../model/message-list-lineage.js";
import type { SegmentField } from "../model/segments.js";

/** Answers whether a message id is taken (an index of a state's ids, or a view over one). */
export interface MessageIdLookup {
  has(id: string): boolean;
}

/**
 * What `applyDeltas` needs from outside the pure core. Ids for messages that arrive without one
 * are random in production, but core never reads a global random source: the store passes one in,
 * and tests pass a counter so results are reproducible.
 */
export interface DeltaContext {
  /** A new, unique message id. */
  newMessageId(): string;
  /**
   * The ids of every message of `state`, when the caller keeps an index of them (the stores do for
   * the state a batch starts from and the states the batch appends to it); undefined otherwise,
   * and the ids are looked for in place. Without it a one-message append to 100,000 messages
   * compared 100,000 ids (~2-17 ms).
   */
  messageIds?(state: ConversationState): MessageIdLookup | undefined;
  /**
   * The ids of the tool calls made by the ASSISTANT messages of `state`'s `segment`, when the
   * caller keeps them (beside `messageIds`); undefined otherwise, and they are looked for in place.
   * Call ids are unique only within their round, so this says whether some round made the call,
   * not which: `append_tool_result` asks it before walking history back to the latest round that
   * made the call (a result for a call never made is stored without that walk).
   */
  toolCallIds?(state: ConversationState, segment: SegmentField): MessageIdLookup | undefined;
  /**
   * For a state whose history holds only the tail of the stored one (a commit planned on the
   * stored tail, store/tail-commit.ts): the name of the latest call with `callId` made by an
   * ASSISTANT message of the history before that tail, undefined when none did. Asked by
   * `append_tool_result` only when no message of `state.history` made the call. Absent = the
   * history is whole.
   */
  headToolCallName?(state: ConversationState, callId: string): string | undefined;
  /**
   * Commit-time refusals of the pairing rules (`pairingRules` in tool-rounds.ts): an open round
   * only at the tail of history, every result with its call, nothing appended while a round is
   * open. Off by default (store what happened; the compile repairs for the provider); the server's
   * `--strict-tool-rounds` turns it on.
   */
  strictToolRounds?: boolean;
  /** Where the caller records which lists the batch made by appending (see `MessageListLineage`). */
  lineage?: MessageListLineage;
}
