import { Code, ConnectError } from "@connectrpc/connect";
import type { ConversationState, SetMetadata } from "#gen/contextd/v1/state_pb";

/**
 * A conversation's title and labels (`Delta.set_metadata`): what a chat list shows and what a
 * listing filters by. Why it exists: the limits are checked where the metadata is applied, once
 * for every store, and the same limits bound a listing's label filter (the server checks it with
 * `assertLabelFilter`), so a filter can never ask for a label no conversation may carry.
 *
 * Bounded because every store keeps the title and labels beside the conversation's header and
 * hands them out in every listing entry: a listing page is at most 1,000 entries.
 */
export const metadataLimits = {
  /** Labels per conversation, after the delta. */
  labels: 32,
  /** UTF-8 bytes of a label key (at least 1). */
  labelKeyBytes: 64,
  /** UTF-8 bytes of a label value. */
  labelValueBytes: 256,
  /** UTF-8 bytes of the title. */
  titleBytes: 512,
  /** The longest idle TTL (100 years, in ms); -1 = never and 0 = the tenant's default besides. */
  maxIdleTtlMs: 3_153_600_000_000,
} as const;

/** The state with `operation` applied: a new `labels` object only when a label changed, so stores see "unchanged" by identity. */
export function setMetadata(state: ConversationState, operation: SetMetadata): ConversationState {
  let next = state;
  if (operation.title !== undefined && operation.title !== state.title) {
    assertText("title", operation.title, metadataLimits.titleBytes);
    next = { ...next, title: operation.title };
  }
  if (operation.idleTtlMs !== undefined && operation.idleTtlMs !== state.idleTtlMs) {
    const ttl = operation.idleTtlMs;
    if (ttl < -1n || ttl > BigInt(metadataLimits.maxIdleTtlMs)) {
      throw new ConnectError(`idle_ttl_ms: ${ttl} is not -1 (never), 0 (the tenant's default) or 1 to ${metadataLimits.maxIdleTtlMs} ms`, Code.InvalidArgument);
    }
    next = { ...next, idleTtlMs: ttl };
  }
  const removed = new Set(operation.removeLabels);
  const setting = Object.entries(operation.labels);
  for (const [key, value] of setting) {
    if (removed.has(key)) throw new ConnectError(`label "${key}" is both set and removed`, Code.InvalidArgument);
    assertLabel(`labels["${key}"]`, key, value);
  }
  for (const key of removed) assertText(`remove_labels key "${key}"`, key, metadataLimits.labelKeyBytes);
  const changes = setting.some(([key, value]) => state.labels[key] !== value) || [...removed].some((key) => Object.hasOwn(state.labels, key));
  if (!changes) return next;
  // A Map and fromEntries: own properties even for a key such as "__proto__".
  const merged = new Map(Object.entries(state.labels));
  for (const key of removed) merged.delete(key);
  for (const [key, value] of setting) merged.set(key, value);
  const labels = Object.fromEntries(merged);
  const count = merged.size;
  if (count > metadataLimits.labels) {
    throw new ConnectError(`the conversation would have ${count} labels, more than the limit of ${metadataLimits.labels}`, Code.InvalidArgument);
  }
  return { ...next, labels };
}

/** INVALID_ARGUMENT unless `labels` (a listing's filter, at `field`) is within the labels' limits. */
export function assertLabelFilter(field: string, labels: Record<string, string>): void {
  const entries = Object.entries(labels);
  if (entries.length > metadataLimits.labels) {
    throw new ConnectError(`${field}: ${entries.length} labels, more than the limit of ${metadataLimits.labels}`, Code.InvalidArgument);
  }
  for (const [key, value] of entries) assertLabel(`${field}["${key}"]`, key, value);
}

function assertLabel(where: string, key: string, value: string): void {
  if (key === "") throw new ConnectError(`${where}: a label key must not be empty`, Code.InvalidArgument);
  assertText(`${where} key`, key, metadataLimits.labelKeyBytes);
  assertText(`${where} value`, value, metadataLimits.labelValueBytes);
}

/** In unicode mode a surrogate is matched only where it is not half of a pair. */
const loneSurrogate = /\p{Cs}/u;

function assertText(where: string, text: string, maxBytes: number): void {
  if (loneSurrogate.test(text)) throw new ConnectError(`${where} holds a lone surrogate, which no store can keep`, Code.InvalidArgument);
  // Postgres keeps them as text and jsonb, which cannot hold U+0000; refused on every store alike.
  if (text.includes("\u0000")) throw new ConnectError(`${where} holds a NUL character (U+0000), which the Postgres store cannot keep`, Code.InvalidArgument);
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes > maxBytes) throw new ConnectError(`${where} is ${bytes} UTF-8 bytes, more than the limit of ${maxBytes}`, Code.InvalidArgument);
}
