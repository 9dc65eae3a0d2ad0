import { Role, type Message } from "#gen/contextd/v1/message_pb";
import { utf8Head } from "../model/utf8-slice.js";
import { Bm25Ranking } from "./bm25-ranking.js";
import { recallText, recallToolName } from "./recall-text.js";
import type { TermCounts } from "./recall-terms.js";

/**
 * Why it exists: the two recalls (by id, by text) over one stored history, and the tool result
 * text a model reads from them, kept apart from where the history and the terms come from (the
 * application loads the one and keeps the other), so the rules are pure and tested here: which
 * messages are looked at, in what order, when a bound stops the look, what the model is shown.
 */

/** Most history messages one recall looks at. */
export const maxRecallMessages = 100_000;
/** Most UTF-8 bytes of one search hit's excerpt. */
export const maxExcerptBytes = 1_024;
/** Characters of a long text looked through for where the excerpt starts. */
const excerptSearchCharacters = 1024 * 1024;
/** How far before the first match an excerpt starts, in characters. */
const excerptLead = 160;

/** What stopped a look before the history's first message. */
export type RecallStop = "messages" | "scanned_bytes" | "deadline";

/** The terms of a message, and the UTF-8 bytes of text read to find them (0 when they were kept). */
export interface MessageTerms {
  terms: TermCounts;
  scannedBytes: number;
}

export interface HistorySearchOptions {
  /** The terms of a message, or undefined when reading it would pass the scan bound (the look stops). */
  termsOf: (message: Message) => MessageTerms | undefined;
  /** True when the look must stop now (the deadline, a cancelled call); asked every few messages. */
  expired: () => boolean;
  /**
   * A turn of the event loop when one is due (the caller keeps the slice's clock), else undefined:
   * asked as often as `expired`, so a long search does not hold other calls up.
   */
  turn?: () => Promise<void> | undefined;
  maxMessages?: number;
}

/** Units of work between two readings of the clock: a message is 1, and 1 more per KiB of text read. */
const unitsBetweenReadings = 32;

/** One hit: the message's position in the history and its score. */
export interface HistoryHit {
  position: number;
  score: number;
}

export interface HistoryLook {
  hits: HistoryHit[];
  examined: number;
  scannedBytes: number;
  stop?: RecallStop;
}

/** Consecutive messages of the history: `messages[0]` is at position `start`. */
export interface HistoryWindow {
  start: number;
  messages: readonly Message[];
}

/**
 * The best `maxResults` messages of the history for the query's terms, looking from the newest
 * back: `windows` yields the history's windows newest first (each looked at from its last message).
 * The clock is read (`expired`, `turn`) before the first message and then every 32 units of work,
 * so a search of a thousand short messages reads it about thirty times. No window is asked for
 * once a bound stops the look.
 */
export async function searchHistory(windows: AsyncIterable<HistoryWindow>, queryTerms: readonly string[], maxResults: number, options: HistorySearchOptions): Promise<HistoryLook> {
  const ranking = new Bm25Ranking(queryTerms);
  const maxMessages = options.maxMessages ?? maxRecallMessages;
  let scannedBytes = 0;
  let stop: RecallStop | undefined = options.expired() ? "deadline" : undefined;
  let units = 0;
  if (stop === undefined) {
    windows: for await (const window of windows) {
      for (let offset = window.messages.length - 1; offset >= 0; offset--) {
        if (ranking.size >= maxMessages) {
          stop = "messages";
          break windows;
        }
        const terms = options.termsOf(window.messages[offset]!);
        if (terms === undefined) {
          stop = "scanned_bytes";
          break windows;
        }
        scannedBytes += terms.scannedBytes;
        ranking.add(window.start + offset, terms.terms);
        units += 1 + (terms.scannedBytes >> 10);
        if (units >= unitsBetweenReadings) {
          units = 0;
          if (options.expired()) {
            stop = "deadline";
            break windows;
          }
          const turn = options.turn?.();
          if (turn) await turn;
        }
      }
    }
  }
  return { hits: ranking.top(maxResults).map((ranked) => ({ position: ranked.index, score: ranked.score })), examined: ranking.size, scannedBytes, stop };
}

/**
 * The positions of `ids` in the history (the newest message with each id), and the messages there,
 * looking from the newest back through `windows` until every id is found or `maxMessages` were looked at.
 */
export async function findHistoryIds(
  windows: AsyncIterable<HistoryWindow>,
  ids: readonly string[],
  maxMessages = maxRecallMessages,
): Promise<{ found: Map<string, { position: number; message: Message }>; examined: number; stop?: RecallStop }> {
  const wanted = new Set(ids);
  const found = new Map<string, { position: number; message: Message }>();
  let examined = 0;
  for await (const window of windows) {
    for (let offset = window.messages.length - 1; offset >= 0; offset--) {
      if (found.size === wanted.size) return { found, examined };
      if (examined >= maxMessages) return { found, examined, stop: "messages" };
      examined++;
      const message = window.messages[offset]!;
      if (wanted.has(message.id) && !found.has(message.id)) found.set(message.id, { position: window.start + offset, message });
    }
    if (found.size === wanted.size) break;
  }
  return { found, examined };
}

/** A hit as the model reads it. */
export interface ShownHit {
  position: number;
  score: number;
  message: Message;
  excerpt: string;
}

/** The header line of a shown message: its id, position, role and tool. */
export function hitHeader(message: Message, position: number): string {
  const tool = recallToolName(message);
  const role = (Role[message.role] ?? "unspecified").toLowerCase();
  return `--- message ${message.id} · position ${position} · ${role}${tool === "" ? "" : ` · ${tool}`}`;
}

/** The excerpt of a hit: up to `maxBytes` from a little before the first of `terms` found (rarest first). */
export function searchExcerpt(message: Message, terms: readonly string[], maxBytes: number): string {
  const text = recallText(message);
  const head = text.length > excerptSearchCharacters ? text.slice(0, excerptSearchCharacters) : text;
  const lowered = head.toLowerCase();
  let at = -1;
  for (const term of terms) {
    at = lowered.indexOf(term);
    if (at >= 0) break;
  }
  const start = at <= excerptLead ? 0 : at - excerptLead;
  const lead = start === 0 ? "" : "…";
  // "…" is 3 UTF-8 bytes: room is kept for one before and one after.
  const body = utf8Head(text.slice(start, start + maxBytes), Math.max(0, maxBytes - 6));
  const tail = start + body.text.length < text.length ? "…" : "";
  return lead + body.text + tail;
}

/** What the model is told when a bound stopped the look. */
export function stopNote(stop: RecallStop | undefined, examined: number, historyLength: number): string {
  if (stop === undefined) return "";
  const why = stop === "messages" ? "the per-request message limit" : stop === "scanned_bytes" ? "the per-request text limit" : "the time limit";
  return ` Searched the newest ${examined} of ${historyLength} messages (${why} was reached); older ones were not searched.`;
}
