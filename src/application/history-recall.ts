import { setImmediate as nextTurn } from "node:timers/promises";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { RecallHitSchema, RecallResponseSchema, type RecallHit, type RecallRequest, type RecallResponse } from "#gen/contextd/v1/conversation_service_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import { findHistoryIds, hitHeader, maxExcerptBytes, searchExcerpt, searchHistory, stopNote, type HistoryWindow } from "../core/recall/history-search.js";
import { recallText } from "../core/recall/recall-text.js";
import { distinctTerms } from "../core/recall/recall-terms.js";
import { defaultRecallResults, maxRecallIds, maxRecallResults, recallAskOfToolCall, recallMessageToolName, type RecallAsk } from "../core/recall/recall-tools.js";
import { defaultSliceMs } from "../core/compile/deadline.js";
import { utf8Head } from "../core/model/utf8-slice.js";
import type { ConversationStore } from "../store/conversation-store.js";
import type { SegmentWindow } from "../store/segment-window.js";
import type { RecallTermIndex } from "./recall-term-index.js";

/** Most UTF-8 bytes of a query, and most distinct terms in it. */
export const maxQueryBytes = 1_024;
export const maxQueryTerms = 32;
/** `max_bytes` when the request leaves it 0, and the largest allowed. */
export const defaultRecallBytes = 16_384;
export const maxRecallBytes = 262_144;
/** The longest one recall may take, whatever the call's own deadline. */
export const maxRecallMilliseconds = 2_000;
/** Message text one request may read and split into terms (`--recall-scan-bytes`). */
export const defaultRecallScanBytes = 64 * 1024 * 1024;
/** What the term index keeps (`--recall-index-bytes`). */
export const defaultRecallIndexBytes = 256 * 1024 * 1024;

export interface HistoryRecallOptions {
  /** UTF-8 bytes of message text one request may read and split into terms. */
  scanBytes: number;
  /** Gives the event loop a turn; `setImmediate` by default. */
  yieldToEventLoop?: () => Promise<void>;
  /** Clock in milliseconds; injectable for tests of the deadline. */
  now?: () => number;
}

/**
 * `ConversationService.Recall`: what the stored history holds, found by id or by a ranked lexical
 * search, told as a tool result for the model. Why it exists: a compile's budget, clearing and
 * previews leave the store untouched, but what they left out of the prompt was out of the model's
 * reach; this answers the recall tools a compile adds (`CompileRequest.recall_tools`), so the model
 * can fetch it back (see `RecallRequest` in conversation_service.proto
 * for what is searched and what one request may cost). The history is read in windows from the
 * newest back (`HistoryReader`); the search stops at the first bound it meets and ranks what it
 * looked at.
 */
export class HistoryRecall {
  private readonly now: () => number;
  private readonly yieldToEventLoop: () => Promise<void>;

  constructor(
    private readonly store: ConversationStore,
    private readonly index: RecallTermIndex,
    private readonly options: HistoryRecallOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.yieldToEventLoop = options.yieldToEventLoop ?? (() => nextTurn());
  }

  /**
   * Answers `request`; `timeoutMs` is what is left of the call's deadline, if it has one, and a
   * search stops, as at its deadline, once `signal` (the call's) is aborted.
   */
  async recall(request: RecallRequest, timeoutMs?: number, signal?: AbortSignal): Promise<RecallResponse> {
    const startedAt = this.now();
    if (request.conversationId === "") throw new ConnectError("conversation_id is required", Code.InvalidArgument);
    if (request.maxResults > maxRecallResults) throw new ConnectError(`max_results: at most ${maxRecallResults}, got ${request.maxResults}`, Code.InvalidArgument);
    if (request.maxBytes > maxRecallBytes) throw new ConnectError(`max_bytes: at most ${maxRecallBytes}, got ${request.maxBytes}`, Code.InvalidArgument);
    const ask = askOf(request);
    const maxBytes = request.maxBytes === 0 ? defaultRecallBytes : request.maxBytes;
    const budget = Math.min(maxRecallMilliseconds, timeoutMs ?? maxRecallMilliseconds);
    const history = new HistoryReader(this.store, request.conversationId);
    const first = await history.first();
    const answer = ask.kind === "ids" ? await recallByIds(history, ask.ids, maxBytes) : await this.search(history, ask, maxBytes, startedAt + budget, signal);
    return create(RecallResponseSchema, { ...answer, version: first.version, historyMessages: BigInt(first.length) });
  }

  private async search(history: HistoryReader, ask: { query: string; maxResults: number }, maxBytes: number, deadline: number, signal: AbortSignal | undefined): Promise<Answer> {
    const terms = queryTerms(ask.query, "query");
    let scanned = 0;
    let sliceStartedMs = this.now();
    const look = await searchHistory(history.windows(), terms, ask.maxResults === 0 ? defaultRecallResults : Math.min(ask.maxResults, maxRecallResults), {
      termsOf: (message) => {
        const found = this.index.termsOf(message, scanned, this.options.scanBytes);
        if (found) scanned += found.scannedBytes;
        return found;
      },
      expired: () => signal?.aborted === true || this.now() >= deadline,
      // Other calls get the event loop every ~20 ms of searching, as a compile gives it (docs/limits.md).
      turn: () => {
        const nowMs = this.now();
        if (nowMs - sliceStartedMs < defaultSliceMs && nowMs >= sliceStartedMs) return undefined;
        return this.yieldToEventLoop().then(() => {
          sliceStartedMs = this.now();
        });
      },
    });
    const length = (await history.first()).length;
    // The excerpt starts at the longest query term the message holds: a whole path before its parts.
    const longestFirst = [...terms].sort((a, b) => b.length - a.length);
    const hits: RecallHit[] = [];
    let text = "";
    for (const hit of look.hits) {
      const message = await history.at(hit.position);
      const header = hitHeader(message, hit.position);
      const room = maxBytes - Buffer.byteLength(text, "utf8") - Buffer.byteLength(header, "utf8") - 2;
      if (room < 64) break;
      const excerpt = searchExcerpt(message, longestFirst, Math.min(maxExcerptBytes, room));
      text += `${header}\n${excerpt}\n`;
      hits.push(create(RecallHitSchema, { messageId: message.id, position: BigInt(hit.position), score: hit.score, role: message.role, excerpt }));
    }
    const summary =
      look.hits.length === 0
        ? `No stored message matches ${JSON.stringify(ask.query)} (searched ${look.examined} messages).${stopNote(look.stop, look.examined, length)}`
        : `${hits.length} best of the stored messages matching ${JSON.stringify(ask.query)} (searched ${look.examined} messages; read one whole with ${recallMessageToolName}).${stopNote(look.stop, look.examined, length)}`;
    return { text: fitted(`${summary}\n${text}`, maxBytes), hits, examinedMessages: BigInt(look.examined), scannedBytes: BigInt(look.scannedBytes), complete: look.stop === undefined, missingIds: [] };
  }
}

interface Answer {
  text: string;
  hits: RecallHit[];
  examinedMessages: bigint;
  scannedBytes: bigint;
  complete: boolean;
  missingIds: string[];
}

/** The one ask of the request: INVALID_ARGUMENT unless exactly one of its three forms is set. */
function askOf(request: RecallRequest): RecallAsk {
  const forms = [request.messageIds.length > 0, request.query !== "", request.toolCall !== undefined].filter(Boolean).length;
  if (forms !== 1) throw new ConnectError(`a Recall request sets exactly one of message_ids, query and tool_call; it set ${forms}`, Code.InvalidArgument);
  let ask: RecallAsk;
  let where: string;
  if (request.toolCall) {
    ask = recallAskOfToolCall(request.toolCall.name, request.toolCall.arguments);
    where = ask.kind === "ids" ? "tool_call.arguments.message_ids" : "tool_call.arguments.query";
    if (ask.kind === "search" && ask.maxResults > maxRecallResults) {
      throw new ConnectError(`tool_call.arguments.max_results: at most ${maxRecallResults}, got ${ask.maxResults}`, Code.InvalidArgument);
    }
  } else if (request.messageIds.length > 0) {
    ask = { kind: "ids", ids: request.messageIds };
    where = "message_ids";
  } else {
    ask = { kind: "search", query: request.query, maxResults: request.maxResults };
    where = "query";
  }
  if (ask.kind === "ids") {
    if (ask.ids.length === 0 || ask.ids.length > maxRecallIds) throw new ConnectError(`${where}: 1 to ${maxRecallIds} ids, got ${ask.ids.length}`, Code.InvalidArgument);
    ask.ids.forEach((id, index) => {
      if (id === "") throw new ConnectError(`${where}[${index}]: an empty id`, Code.InvalidArgument);
      if (Buffer.byteLength(id, "utf8") > 1_024) throw new ConnectError(`${where}[${index}]: at most 1,024 UTF-8 bytes`, Code.InvalidArgument);
    });
  } else {
    queryTerms(ask.query, where);
  }
  return ask;
}

/** The query's distinct terms: INVALID_ARGUMENT naming `where` and the limit when it is too long or has none. */
function queryTerms(query: string, where: string): string[] {
  const bytes = Buffer.byteLength(query, "utf8");
  if (bytes > maxQueryBytes) throw new ConnectError(`${where}: at most ${maxQueryBytes} UTF-8 bytes, got ${bytes}`, Code.InvalidArgument);
  const terms = distinctTerms(query);
  if (terms.length === 0) throw new ConnectError(`${where}: ${JSON.stringify(query)} holds no word to search for (letters or digits)`, Code.InvalidArgument);
  if (terms.length > maxQueryTerms) throw new ConnectError(`${where}: at most ${maxQueryTerms} distinct terms, got ${terms.length}`, Code.InvalidArgument);
  return terms;
}

/** The messages of `ids`, in request order, their texts cut to what `maxBytes` leaves. */
async function recallByIds(history: HistoryReader, ids: readonly string[], maxBytes: number): Promise<Answer> {
  const lookup = await findHistoryIds(history.windows(), ids);
  const hits: RecallHit[] = [];
  const missingIds: string[] = [];
  let text = "";
  const seen = new Set<string>();
  for (const id of ids) {
    if (seen.has(id)) continue;
    seen.add(id);
    const found = lookup.found.get(id);
    if (found === undefined) {
      missingIds.push(id);
      continue;
    }
    const { message, position } = found;
    const header = hitHeader(message, position);
    const whole = recallText(message);
    const room = Math.max(0, maxBytes - Buffer.byteLength(text, "utf8") - Buffer.byteLength(header, "utf8") - 2 - 200);
    const head = utf8Head(whole, room);
    const left = head.totalBytes - head.bytes;
    const excerpt = left === 0 ? head.text : `${head.text}\n[${left} more bytes of this message not shown: ${readRestHint(message, position)}]`;
    text += `${header}\n${excerpt}\n`;
    hits.push(create(RecallHitSchema, { messageId: id, position: BigInt(position), score: 0, role: message.role, excerpt }));
  }
  if (missingIds.length > 0) text += `Not in the stored history${lookup.stop === undefined ? "" : ` (the newest ${lookup.examined} messages looked at)`}: ${missingIds.join(", ")}\n`;
  return { text: fitted(text, maxBytes), hits, examinedMessages: BigInt(lookup.examined), scannedBytes: 0n, complete: lookup.stop === undefined, missingIds };
}

/** Messages the history is read in, per window (`ConversationStore.readWindow`). */
export const recallWindowMessages = 1_000;

/**
 * The stored history, read in windows of `recallWindowMessages` from the newest back, every window
 * at the first one's version: a search that stops early reads no further, and a long history on
 * Redis or Postgres is never loaded whole for one request. A commit landing between two windows
 * makes the next read ABORTED (VERSION_CONFLICT, naming the current version).
 */
class HistoryReader {
  private firstWindow: Promise<SegmentWindow> | undefined;

  constructor(
    private readonly store: ConversationStore,
    private readonly conversationId: string,
  ) {}

  /** The newest window, read once: its version and the history's length. */
  async first(): Promise<{ version: bigint; length: number; window: SegmentWindow }> {
    this.firstWindow ??= this.store.readWindow(this.conversationId, { segment: "history", count: recallWindowMessages, withRest: false });
    const window = await this.firstWindow;
    return { version: window.state.version, length: window.length, window };
  }

  /** The windows, newest first. */
  async *windows(): AsyncGenerator<HistoryWindow> {
    const { version, window } = await this.first();
    yield { start: window.start, messages: window.state.history };
    let end = window.start;
    while (end > 0) {
      const older = await this.store.readWindow(this.conversationId, { segment: "history", end, count: recallWindowMessages, withRest: false, atVersion: version });
      yield { start: older.start, messages: older.state.history };
      end = older.start;
    }
  }

  /** The message at `position`, at the first window's version. */
  async at(position: number): Promise<Message> {
    const { version, window } = await this.first();
    if (position >= window.start) return window.state.history[position - window.start]!;
    const one = await this.store.readWindow(this.conversationId, { segment: "history", end: position + 1, count: 1, withRest: false, atVersion: version });
    return one.state.history[0]!;
  }
}

/** How the rest of a cut message is read: a tool result by its call id, anything else by its position. */
function readRestHint(message: Message, position: number): string {
  for (const part of message.parts) {
    if (part.kind.case === "toolResult") return `the whole result is readable with read_tool_result (tool_call_id "${part.kind.value.toolCallId}")`;
  }
  return `the whole message is readable with ReadMessages (start ${position})`;
}

/** `text` within `maxBytes`, cut at a character boundary (the parts above stay within it; this is the guarantee). */
function fitted(text: string, maxBytes: number): string {
  return utf8Head(text, maxBytes).text;
}

