import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  ReadMessagesResponseSchema,
  SegmentSizesSchema,
  type ReadMessagesRequest,
  type ReadMessagesResponse,
} from "#gen/contextd/v1/conversation_service_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import { Segment, type ConversationState } from "#gen/contextd/v1/state_pb";
import type { ConversationStore } from "../store/conversation-store.js";
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

/** How long a state a page token points to stays readable after the page, and how many are kept. */
export const defaultPinMs = 60_000;
export const defaultMaxPinnedStates = 64;

export interface MessageWindowOptions {
  /** The sidecar's message limit (`--max-request-bytes`); pages stay below it (`maxPageBytesFor`). */
  messageLimitBytes: number;
  /** The encoded size of a stored message without tag and length (the codec's kept encoding). */
  messageBytes: (message: Message) => number;
  pinMs?: number;
  maxPinnedStates?: number;
  /** Clock, in milliseconds; injectable for tests. */
  now?: () => number;
}

/**
 * `ReadMessages`: a window of one segment at one version, in pages bounded in bytes.
 *
 * The state comes from `ConversationStore.load` (a cached decoded state for a conversation read
 * before), and a page is a slice of its segment: the work per page is the page's messages (their
 * sizes, from the codec's kept encodings), never the rest of the conversation. The slicing is all
 * here, so a store read of only the tail can replace `load` without touching the service.
 *
 * Pinning: every page of a window is read at the first page's version. The current state always
 * serves it; once the conversation has moved on, the state the token names is served from the
 * states kept here (each for `pinMs` after the last page that named it, at most `maxPinnedStates`,
 * the least recently used leaving first). A version neither current nor kept is ABORTED with the
 * current version, as a stale commit is.
 */
export class MessageWindows {
  private readonly pinned: PinnedStates;
  private readonly messageBytes: (message: Message) => number;
  private readonly maxPageBytes: number;

  constructor(
    private readonly store: ConversationStore,
    options: MessageWindowOptions,
  ) {
    this.messageBytes = options.messageBytes;
    this.maxPageBytes = maxPageBytesFor(options.messageLimitBytes);
    this.pinned = new PinnedStates(options.pinMs ?? defaultPinMs, options.maxPinnedStates ?? defaultMaxPinnedStates, options.now ?? Date.now);
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
    const state = await this.stateAt(request.conversationId, token?.version ?? fields.version);
    const segment = token ? token.segment : fields.segment === Segment.UNSPECIFIED ? Segment.HISTORY : fields.segment;
    const messages = segmentMessages(state, segment);
    const window = token ? { start: token.windowStart, end: token.windowEnd } : resolveWindow(fields, messages.length);
    if (window.end > messages.length) {
      // Only a forged token can get here: the state read is the token's version, whose segment was at least this long.
      throw new ConnectError(`page_token: names positions up to ${window.end}, but the segment holds ${messages.length} messages at version ${state.version}`, Code.InvalidArgument);
    }
    const from = token ? token.next : window.start;
    const page = this.pageFrom(messages, from, window.end, maxBytes);
    const to = from + page.count;
    let nextPageToken = "";
    if (to < window.end) {
      nextPageToken = encodeMessageWindowToken({ version: state.version, segment, next: to, windowStart: window.start, windowEnd: window.end, check: token?.check ?? windowCheck(fields) });
      this.pinned.keep(state);
    }
    return create(ReadMessagesResponseSchema, {
      messages: messages.slice(from, to),
      version: state.version,
      segment,
      position: BigInt(from),
      windowStart: BigInt(window.start),
      windowEnd: BigInt(window.end),
      segmentSizes: create(SegmentSizesSchema, {
        system: BigInt(state.system.length),
        history: BigInt(state.history.length),
        memory: BigInt(state.memory.length),
        tools: BigInt(state.tools.length),
      }),
      nextPageToken,
      pageBytes: BigInt(page.bytes),
    });
  }

  private pageBytes(requested: number): number {
    if (requested > this.maxPageBytes) {
      throw new ConnectError(`max_bytes: at most ${this.maxPageBytes} (15/16 of the message limit, --max-request-bytes), got ${requested}`, Code.InvalidArgument);
    }
    return requested === 0 ? Math.min(defaultPageBytes, this.maxPageBytes) : requested;
  }

  /** The state at `version` (undefined = current): the current one, or one kept for a page token. */
  private async stateAt(conversationId: string, version: bigint | undefined): Promise<ConversationState> {
    const current = await this.store.load(conversationId);
    if (version === undefined || version === current.version) return current;
    const kept = this.pinned.get(conversationId, version);
    if (kept) return kept;
    throw versionConflict(conversationId, version, current.version);
  }

  /** How many messages from `from` fit `maxBytes` (at least one), and their bytes on the wire. */
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

function segmentMessages(state: ConversationState, segment: number): readonly Message[] {
  switch (segment) {
    case Segment.SYSTEM:
      return state.system;
    case Segment.MEMORY:
      return state.memory;
    case Segment.TOOLS:
      return state.tools;
    default:
      return state.history;
  }
}

/**
 * States that page tokens point to, by conversation and version, each until `pinMs` after the last
 * page that named it, at most `maxStates` (least recently used out first). A kept state shares its
 * messages with the states after it, so what it holds on its own is its lists (8 bytes a message)
 * and the messages removed since.
 */
class PinnedStates {
  private readonly entries = new Map<string, { state: ConversationState; until: number }>();

  constructor(
    private readonly pinMs: number,
    private readonly maxStates: number,
    private readonly now: () => number,
  ) {}

  keep(state: ConversationState): void {
    const key = pinKey(state.conversationId, state.version);
    this.entries.delete(key);
    this.entries.set(key, { state, until: this.now() + this.pinMs });
    this.evict();
  }

  get(conversationId: string, version: bigint): ConversationState | undefined {
    this.evict();
    return this.entries.get(pinKey(conversationId, version))?.state;
  }

  private evict(): void {
    const now = this.now();
    for (const [key, entry] of this.entries) {
      // Oldest use first: stop at the first one still within its time once the count is right.
      if (entry.until > now && this.entries.size <= this.maxStates) break;
      this.entries.delete(key);
    }
  }
}

function pinKey(conversationId: string, version: bigint): string {
  return `${version}\u0000${conversationId}`;
}
