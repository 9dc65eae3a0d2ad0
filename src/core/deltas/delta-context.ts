/**
 * What `applyDeltas` needs from outside the pure core. Ids for messages that arrive without one
 * are random in production, but core never reads a global random source: the store passes one in,
 * and tests pass a counter so results are reproducible.
 */
export interface DeltaContext {
  /** A new, unique message id. */
  newMessageId(): string;
}
