import { Code, ConnectError } from "@connectrpc/connect";

/** The response trailer (gRPC) / header that carries the current version of an ABORTED commit. */
export const currentVersionTrailer = "contextd-current-version";

/**
 * A stale expected version. The current version is in the message for humans and in the
 * `contextd-current-version` metadata for clients that compare and retry.
 */
export function versionConflict(conversationId: string, expected: bigint, current: bigint): ConnectError {
  return new ConnectError(
    `conversation "${conversationId}": expected version ${expected} but the current version is ${current}`,
    Code.Aborted,
    { [currentVersionTrailer]: String(current) },
  );
}

/** The same idempotency key sent with a different batch: a client bug, never a retry. */
export function idempotencyKeyReused(conversationId: string, key: string): ConnectError {
  return new ConnectError(
    `idempotency_key "${key}" of conversation "${conversationId}" was already used with different deltas`,
    Code.InvalidArgument,
  );
}

/** A Watch resuming from a version whose following changes were trimmed from the change log. */
export function changesNotRetained(conversationId: string, fromVersion: bigint, oldestRetained: bigint): ConnectError {
  return new ConnectError(
    `conversation "${conversationId}": changes after version ${fromVersion} are no longer retained ` +
      `(oldest retained change is version ${oldestRetained}); reload with GetState and watch from its version`,
    Code.OutOfRange,
  );
}

/** Stored data that cannot be trusted; never answered as an empty conversation. */
export function corruptConversation(conversationId: string, detail: string): ConnectError {
  return new ConnectError(`conversation "${conversationId}" is corrupt in the store: ${detail}`, Code.Unavailable);
}
