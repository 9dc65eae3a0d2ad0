import type { Message } from "#gen/contextd/v1/message_pb";
import { ByteBoundedLru } from "../core/byte-bounded-lru.js";
import type { MessageTerms } from "../core/recall/history-search.js";
import { recallText } from "../core/recall/recall-text.js";
import { termCounts, type TermCounts } from "../core/recall/recall-terms.js";

/**
 * The terms of stored messages, split once and kept for the recalls that follow
 * (`ConversationService.Recall`). Why it exists: an agent searching its dropped history calls the
 * search tool several times in a row over the same thousands of messages, and splitting 5,000
 * coding messages (a third of them 20 KB tool outputs) into terms costs far more than looking the
 * query's terms up in their counts. Keyed by the message object: stored messages are immutable and
 * shared between the states a store hands out (a message replaced by a commit is another object),
 * so a later version of the conversation hits for every message it kept.
 *
 * Bounded by bytes (`--recall-index-bytes`): each entry counts its terms (2 bytes a character plus
 * 48 of map entry) and the text it was split from (the key keeps the message alive while the entry
 * lives), the least recently used entries leaving first; an entry larger than the bound alone is
 * used for its request and not kept. 0 keeps nothing: every search reads the texts again.
 */
export class RecallTermIndex {
  private readonly entries: ByteBoundedLru<Message, TermCounts>;

  constructor(maxBytes: number) {
    this.entries = new ByteBoundedLru({ maxBytes });
  }

  /**
   * The terms of `message`, or undefined when they are not kept and reading its text would take
   * `scanned` past `scanLimit` (UTF-8 bytes read so far by the caller's request, and its bound).
   */
  termsOf(message: Message, scanned: number, scanLimit: number): MessageTerms | undefined {
    const kept = this.entries.use(message);
    if (kept !== undefined) return { terms: kept, scannedBytes: 0 };
    const text = recallText(message);
    const textBytes = Buffer.byteLength(text, "utf8");
    if (scanned + textBytes > scanLimit) return undefined;
    const terms = termCounts(text);
    let bytes = 64 + textBytes;
    for (const term of terms.counts.keys()) bytes += 48 + 2 * term.length;
    this.entries.set(message, terms, bytes);
    return { terms, scannedBytes: textBytes };
  }

  /** Bytes kept now, as counted against the bound. */
  get size(): number {
    return this.entries.bytes;
  }

  /** Messages whose terms are kept now. */
  get messages(): number {
    return this.entries.size;
  }
}
