import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  ReadMessagesResponseSchema,
  SegmentSizesSchema,
  type ReadMessagesRequest,
  type ReadMessagesResponse,
} from "#gen/contextd/v1/conversation_service_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { ByteBoundedLru } from "../core/byte-bounded-lru.js";
import type { ConversationStore } from "../store/conversation-store.js";
import type { StoredSegment } from "../store/segment-edits.js";
import { maxWindowMessages, windowBounds, type SegmentWindow } from "../store/segment-window.js";
import { versionConflict } from "../store/store-errors.js";
import { decodeMessageWindowToken, encodeMessageWindowToken, tokenFits, windowCheck, type WindowFields } from "./message-window-token.js";

/** `max_bytes` when the request leaves it 0 (or the largest allowed, when smaller). */
export const defaultPageBytes = 4 * 1024 * 1024;

/**
 * The largest `max_bytes` for a message limit: 15/16 of it (15 MiB of the default 16 MiB), leaving
 * room for the response's other fields and for a page that ends with a message of up to the bound.
 */
export function maxPageBytesFor(messageLimitBytes: number): number {
  return Math.floor((messageLimitBytes / 16) * 15);
}

/** How long a window a page token points to stays readable after the page, and how many are kept. */
export const defaultPinMs = 60_000;
export const defaultMaxPinnedStates = 64;
/** Bytes of messages the kept windows hold together (`--read-pin-bytes`). */
export const defaultPinBytes = 256 * 1024 * 1024;

export interface MessageWindowOptions {
  /** The sidecar's message limit (`--max-request-bytes`); pages stay below it (`maxPageBytesFor`). */
  messageLimitBytes: number;
  /** The encoded size of a stored message without tag and length (the codec's kept encoding). */
  messageBytes: (message: Message) => number;
  pinMs?: number;
  maxPinnedStates?: number;
  /** Bytes of messages the kept windows may hold together; a window larger alone is not kept. */
  maxPinnedBytes?: number;
  /** Clock, in milliseconds; injectable for tests. */
  now?: () => number;
}

/** Messages [from, from + messages.length) of one segment at one version, and every segment's size there. */
interface HeldWindow {
  conversationId: string;
  version: bigint;
  segment: Segment;
  from: number;
  messages: readonly Message[];
  sizes: { system: number; history: number; memory: number; tools: number };
}

/**
 * `ReadMessages`: a window of one segment at one version, in pages bounded in bytes.
 *
 * The messages come from `ConversationStore.readWindow`: the first page reads the window the
 * request names (the last 10 of 100,000 messages read 10, on a sidecar that never loaded the
 * conversation too; a cached state answers from memory), a later page the rest of its window at
 * the token's version. The work per page is the window read and the page's sizes, never the rest
 * of the conversation. The history's window comes with the other segments whole (their sizes are
 * part of every answer); a read of another segment reads that segment whole, the history none.
 *
 * Pinning: every page of a window is read at the first page's version. While that version is
 * current the store serves it; a window with pages to come is also kept here (each for `pinMs`
 * after the last page that used it, at most `maxPinnedStates` windows holding at most
 * `maxPinnedBytes` of messages together, the least recently used leaving first), so it stays
 * readable once the conversation moves on. A version neither current nor kept is ABORTED with the
 * current version, as a stale commit is.
 */
export class MessageWindows {
  private readonly pinned: PinnedWindows;
  private readonly messageBytes: (message: Message) => number;
  private readonly maxPageBytes: number;

  constructor(
    private readonly store: ConversationStore,
    options: MessageWindowOptions,
  ) {
    this.messageBytes = options.messageBytes;
    this.maxPageBytes = maxPageBytesFor(options.messageLimitBytes);
    this.pinned = new PinnedWindows(
      options.pinMs ?? defaultPinMs,
      options.maxPinnedStates ?? defaultMaxPinnedStates,
      options.maxPinnedBytes ?? defaultPinBytes,
      options.now ?? Date.now,
    );
  }

  async read(request: ReadMessagesRequest): Promise<ReadMessagesResponse> {
    const fields = windowFields(request);
    const maxBytes = this.pageBytes(request.maxBytes);
    const token = request.pageToken === "" ? undefined : decodeMessageWindowToken(request.pageToken);
    if (token && !tokenFits(token, fields)) {
      throw new ConnectError(
        "page_token: was issued for another conversation or window; leave segment, last, start, end and version unset on later pages, or repeat the first request's",
        Code.InvalidArgument,
      );
    }
    if (token && (token.segment === Segment.UNSPECIFIED || Segment[token.segment] === undefined)) {
      throw new ConnectError(`page_token: names no segment (${token.segment}); it is not a token from a ReadMessages response`, Code.InvalidArgument);
    }
    const segment = token ? token.segment : fields.segment === Segment.UNSPECIFIED ? Segment.HISTORY : fields.segment;
    let held: HeldWindow;
    let window: { start: number; end: number };
    let from: number;
    if (token) {
      window = { start: token.windowStart, end: token.windowEnd };
      from = token.next;
      held = await this.heldAt(request.conversationId, token.version, segment, from, window.end);
    } else {
      held = await this.firstWindow(request.conversationId, segment, fields);
      window = resolveWindow(fields, held.sizes[segmentName(segment)]);
      from = window.start;
    }
    const length = held.sizes[segmentName(segment)];
    if (window.end > length) {
      // Only a forged token can get here: the version read is the token's, whose segment was at least this long.
      throw new ConnectError(`page_token: names positions up to ${window.end}, but the segment holds ${length} messages at version ${held.version}`, Code.InvalidArgument);
    }
    const heldEnd = Math.min(window.end, held.from + held.messages.length);
    const page = this.pageFrom(held.messages, from - held.from, heldEnd - held.from, maxBytes);
    const to = from + page.count;
    let nextPageToken = "";
    if (to < window.end) {
      nextPageToken = encodeMessageWindowToken({ version: held.version, segment, next: to, windowStart: window.start, windowEnd: window.end, check: token?.check ?? windowCheck(fields) });
      this.pinned.keep(held, () => held.messages.reduce((sum, message) => sum + repeatedFieldBytes(this.messageBytes(message)), 0));
    }
    return create(ReadMessagesResponseSchema, {
      messages: held.messages.slice(from - held.from, to - held.from),
      version: held.version,
      segment,
      position: BigInt(from),
      windowStart: BigInt(window.start),
      windowEnd: BigInt(window.end),
      segmentSizes: create(SegmentSizesSchema, {
        system: BigInt(held.sizes.system),
        history: BigInt(held.sizes.history),
        memory: BigInt(held.sizes.memory),
        tools: BigInt(held.sizes.tools),
      }),
      nextPageToken,
      pageBytes: BigInt(page.bytes),
    });
  }

  /** Bytes of messages the windows kept for page tokens hold (at most `maxPinnedBytes`). */
  get pinnedBytes(): number {
    return this.pinned.heldBytes;
  }

  private pageBytes(requested: number): number {
    if (requested > this.maxPageBytes) {
      throw new ConnectError(`max_bytes: at most ${this.maxPageBytes} (15/16 of the message limit, --max-request-bytes), got ${requested}`, Code.InvalidArgument);
    }
    return requested === 0 ? Math.min(defaultPageBytes, this.maxPageBytes) : requested;
  }

  /** The first page's window: kept (an explicit version no longer current) or read from the store. */
  private async firstWindow(conversationId: string, segment: Segment, fields: WindowFields): Promise<HeldWindow> {
    const version = fields.version;
    if (version !== undefined) {
      const kept = this.pinned.find(conversationId, version, segment, (sizes) => resolveWindow(fields, sizes[segmentName(segment)]));
      if (kept) return kept;
    }
    if (fields.last !== 0 && fields.last <= maxWindowMessages) return this.fromStore(conversationId, segment, { count: fields.last }, version);
    if (fields.last === 0 && fields.end !== undefined) return this.fromStore(conversationId, segment, rangeQuery(fields.start, fields.end), version);
    if (fields.last === 0 && fields.start === 0n) {
      const whole = await this.fromStore(conversationId, segment, { count: maxWindowMessages }, version);
      if (whole.from === 0) return whole;
      // Over the per-read bound: its first part, at that version; later pages read on.
      return this.fromStore(conversationId, segment, rangeQuery(0n, BigInt(maxWindowMessages)), whole.version);
    }
    // A window whose bounds need the segment's length: the length first (no messages), then the window at that version.
    // Without a version asked for, a commit landing between the two reads is read again (a few times).
    for (let attempt = 1; ; attempt++) {
      const probe = await this.fromStore(conversationId, segment, { count: 0 }, version);
      const window = resolveWindow(fields, probe.sizes[segmentName(segment)]);
      try {
        return await this.fromStore(conversationId, segment, rangeQuery(BigInt(window.start), BigInt(window.end)), probe.version);
      } catch (error) {
        if (version !== undefined || attempt === 3 || !(error instanceof ConnectError && error.code === Code.Aborted)) throw error;
      }
    }
  }

  /** A later page's messages: a kept window holding position `from`, else the store at `version`. */
  private async heldAt(conversationId: string, version: bigint, segment: Segment, from: number, end: number): Promise<HeldWindow> {
    const kept = this.pinned.find(conversationId, version, segment, () => ({ start: from, end: Math.max(end, from + 1) }));
    if (kept) return kept;
    return this.fromStore(conversationId, segment, rangeQuery(BigInt(from), BigInt(end)), version);
  }

  /**
   * Messages [end - count, end) of `segment` (`end` unset = its length) at `version` (unset = the
   * current one), with the other segments' sizes. ABORTED with the current version when the
   * conversation is no longer at `version`.
   */
  private async fromStore(conversationId: string, segment: Segment, range: { end?: number; count: number }, version: bigint | undefined): Promise<HeldWindow> {
    const name = segmentName(segment);
    let read: SegmentWindow;
    try {
      read =
        name === "history"
          ? await this.store.readWindow(conversationId, { segment: "history", ...range, withRest: true, atVersion: version })
          : await this.store.readWindow(conversationId, { segment: "history", count: 0, withRest: true, atVersion: version });
    } catch (error) {
      if (version !== undefined && error instanceof ConnectError && error.code === Code.Aborted) {
        throw versionConflict(conversationId, version, await this.store.currentVersion(conversationId));
      }
      throw error;
    }
    const { state } = read;
    const sizes = { system: state.system.length, history: read.length, memory: state.memory.length, tools: state.tools.length };
    if (name === "history") return { conversationId, version: state.version, segment, from: read.start, messages: state.history, sizes };
    const whole = state[name];
    const { start, stop } = windowBounds({ segment: name, ...range, withRest: false }, whole.length);
    return { conversationId, version: state.version, segment, from: start, messages: start === 0 && stop === whole.length ? whole : whole.slice(start, stop), sizes };
  }

  /** How many messages from index `from` of `messages` fit `maxBytes` (at least one), and their bytes on the wire. */
  private pageFrom(messages: readonly Message[], from: number, end: number, maxBytes: number): { count: number; bytes: number } {
    let bytes = 0;
    let index = from;
    while (index < end) {
      const size = repeatedFieldBytes(this.messageBytes(messages[index]!));
      if (index > from && bytes + size > maxBytes) break;
      bytes += size;
      index++;
      if (bytes >= maxBytes) break;
    }
    return { count: index - from, bytes };
  }
}

/** The store query for positions [start, end): at most the per-read bound, from `start`. */
function rangeQuery(start: bigint, end: bigint): { end: number; count: number } {
  const bounded = end - start > BigInt(maxWindowMessages) ? start + BigInt(maxWindowMessages) : end;
  const safe = bounded > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(bounded);
  return { end: safe, count: Math.min(maxWindowMessages, Math.max(0, safe - (start > BigInt(safe) ? safe : Number(start)))) };
}

function segmentName(segment: Segment): StoredSegment {
  switch (segment) {
    case Segment.SYSTEM:
      return "system";
    case Segment.MEMORY:
      return "memory";
    case Segment.TOOLS:
      return "tools";
    default:
      return "history";
  }
}

/** Bytes of one element of `ReadMessagesResponse.messages` (field 140: a two-byte tag), length prefix included. */
function repeatedFieldBytes(encodedLength: number): number {
  return 2 + varintBytes(encodedLength) + encodedLength;
}

export function varintBytes(value: number): number {
  let bytes = 1;
  while (value >= 0x80) {
    value = Math.floor(value / 0x80);
    bytes++;
  }
  return bytes;
}

function windowFields(request: ReadMessagesRequest): WindowFields {
  if (request.conversationId === "") throw new ConnectError("conversation_id is required", Code.InvalidArgument);
  if (Segment[request.segment] === undefined) throw new ConnectError(`segment: unknown segment ${request.segment}`, Code.InvalidArgument);
  if (request.last !== 0 && (request.start !== 0n || request.end !== undefined)) {
    throw new ConnectError(`last: set to ${request.last} together with start or end; a window is either the last N messages or a range`, Code.InvalidArgument);
  }
  if (request.end !== undefined && request.end < request.start) {
    throw new ConnectError(`end: ${request.end} is before start ${request.start}`, Code.InvalidArgument);
  }
  if (request.version !== undefined && request.version < 0n) throw new ConnectError(`version: must not be negative, got ${request.version}`, Code.InvalidArgument);
  return { conversationId: request.conversationId, segment: request.segment, last: request.last, start: request.start, end: request.end, version: request.version };
}

function resolveWindow(fields: WindowFields, length: number): { start: number; end: number } {
  if (fields.last !== 0) return { start: Math.max(0, length - fields.last), end: length };
  const clamp = (position: bigint) => (position > BigInt(length) ? length : Number(position));
  const start = clamp(fields.start);
  return { start, end: fields.end === undefined ? length : Math.max(start, clamp(fields.end)) };
}

/**
 * Windows that page tokens point to, each until `pinMs` after the last page that used it, at most
 * `maxWindows` holding at most `maxBytes` of messages together (counted as on the wire), the least
 * recently used out first. A kept window shares its messages with the store's caches while they
 * hold the same version, so the bytes counted are an upper bound of what the windows keep alive.
 */
class PinnedWindows {
  /** Each window's deadline; use order is deadline order (`pinMs` is one), so the expired ones are the oldest. */
  private readonly entries: ByteBoundedLru<HeldWindow, number>;

  constructor(
    private readonly pinMs: number,
    maxWindows: number,
    maxBytes: number,
    private readonly now: () => number,
  ) {
    this.entries = new ByteBoundedLru({ maxBytes, maxEntries: maxWindows });
  }

  /** Keeps `window` (its bytes counted once, by `bytesOf`); a window larger than the bound alone is not kept. */
  keep(window: HeldWindow, bytesOf: () => number): void {
    const bytes = this.entries.bytesOf(window) ?? bytesOf();
    this.entries.set(window, this.now() + this.pinMs, bytes);
    this.expire();
  }

  /** A kept window of (conversation, version, segment) holding the first position of `wanted` (given the segments' sizes), or all of an empty `wanted`. */
  find(conversationId: string, version: bigint, segment: Segment, wanted: (sizes: HeldWindow["sizes"]) => { start: number; end: number }): HeldWindow | undefined {
    this.expire();
    for (const [window] of this.entries.oldestFirst()) {
      if (window.conversationId !== conversationId || window.version !== version || window.segment !== segment) continue;
      const { start, end } = wanted(window.sizes);
      const heldEnd = window.from + window.messages.length;
      if (start >= window.from && (start < heldEnd || (start === end && start <= heldEnd))) return window;
    }
    return undefined;
  }

  get heldBytes(): number {
    return this.entries.bytes;
  }

  private expire(): void {
    const now = this.now();
    for (const [window, until] of this.entries.oldestFirst()) {
      // Oldest use first: the count and bytes bounds are kept by `entries`, so the first one still within its time ends it.
      if (until > now) break;
      this.entries.delete(window);
    }
  }
}
