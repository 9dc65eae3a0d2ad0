import type { Message } from "#gen/contextd/v1/message_pb";

/**
 * The head of a stored history that the budget is certain to drop, left out of the stages: they
 * see only the tail (see `HistoryFacts` for why). What the head would have contributed to the
 * result is added back from these figures, so the result is the one the whole history gives.
 */
export interface ElidedHead {
  /**
   * The whole stored history; the stages see `history.slice(count)`. Absent when the head was
   * planned from the stored tail (`planStoredHead`): then no part that copies the history is built.
   */
  history?: readonly Message[];
  /** The ids of the history's first message and of the head's last (the `history_head_dropped` event). */
  firstId: string;
  lastId: string;
  /** Messages left out: `history[0, count)`, whole units. */
  count: number;
  /** Their tokens under the compile's estimator. */
  tokens: number;
  /** Their text characters (the text allowance is relative to the whole request). */
  characters: number;
  /** Token counts of the tail, in order (the budget's own counts of it). */
  tailCounts: readonly number[];
}
