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

/**
 * Stored data that cannot be trusted: a state that does not decode, a version key that holds no
 * version, a key of the wrong type, a malformed change. DATA_LOSS, not UNAVAILABLE: retrying cannot
 * help until an operator repairs or deletes the conversation's keys. Never answered as an empty
 * conversation.
 */
export function corruptConversation(conversationId: string, detail: string): ConnectError {
  return new ConnectError(`conversation "${conversationId}" is corrupt in the store: ${detail}`, Code.DataLoss);
}

/** A token calibration record that does not hold a correction: DATA_LOSS naming where it is, as for a conversation. */
export function corruptCalibration(where: string, detail: string): ConnectError {
  return new ConnectError(`token calibration record ${where} is corrupt in the store: ${detail}`, Code.DataLoss);
}

/** A conversation id or idempotency key the store cannot name a key by (see `requireStorableText`). */
export function unstorableText(field: string, index: number): ConnectError {
  return new ConnectError(
    `${field} has a lone UTF-16 surrogate at index ${index}: it is not valid Unicode and cannot be stored (it would encode like other ids)`,
    Code.InvalidArgument,
  );
}

/** Lone surrogates: only they match a surrogate code point in a `u` regex (pairs match as one astral code point). */
const loneSurrogate = /[\uD800-\uDFFF]/u;

/**
 * Refuses text with lone surrogates (which JSON can carry as `\ud800`): stored as UTF-8 every one
 * of them becomes U+FFFD, so two different ids would share keys. Both stores refuse alike.
 */
export function requireStorableText(field: string, text: string): void {
  const match = loneSurrogate.exec(text);
  if (match) throw unstorableText(field, match.index);
}

/**
 * `requireStorableText`, and at most `maxBytes` UTF-8 bytes: a conversation id or idempotency key
 * names rows and keys in every store, and Postgres cannot index one over 2,704 bytes (it answered
 * INTERNAL "index row size ... exceeds btree"). The server refuses longer ones at the door
 * (core/model/string-limits.ts); each store refuses them too, alike, for embedders.
 */
export function requireStorableKey(field: string, text: string, maxBytes: number): void {
  requireStorableText(field, text);
  if (text.length * 3 <= maxBytes) return;
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes > maxBytes) throw new ConnectError(`${field} has ${bytes} bytes, over the limit of ${maxBytes} bytes the store keeps (docs/limits.md)`, Code.InvalidArgument);
}

/** Whether `requireStorableText` takes the text. */
export function isStorableText(text: string): boolean {
  return !loneSurrogate.test(text);
}

/**
 * Redis over `maxmemory` with `noeviction` refuses writes ("OOM command not allowed"). That is not
 * an outage (reads work, and a retry at once fails alike) but a full store: RESOURCE_EXHAUSTED,
 * with what to do about it. Health goes NOT_SERVING meanwhile (see `RedisConversationStore.ping`).
 */
export function storeOutOfMemory(what: string, redisMessage: string): ConnectError {
  return new ConnectError(
    `redis store is full while ${what}: Redis refuses writes at its maxmemory limit (${redisMessage.trim()}); ` +
      `reads still work; free memory or raise maxmemory, then retry`,
    Code.ResourceExhausted,
  );
}

/** The URL without a password, for error messages; `what` names the store when the URL does not parse. */
export function redactUrl(url: string, what: "redis" | "postgres"): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString();
  } catch {
    return `(unparsable ${what} url)`;
  }
}
