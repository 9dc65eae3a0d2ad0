import type { ToolPayload } from "#gen/contextd/v1/message_pb";
import { ByteBoundedLru } from "../core/byte-bounded-lru.js";
import { toolPayloadText } from "../core/model/payload-text.js";

/**
 * The UTF-8 text of stored tool results, encoded once and kept for the reads that follow
 * (`ConversationService.ReadToolResult`). Why it exists: every read used to compact the stored
 * JSON and encode the whole text again to cut one slice out of it, on the event loop: a 16-byte
 * read of a 12 MB result took 190 to 234 ms, and 8 readers at once held health checks for 1.1 to
 * 1.4 s (issue 29 #8). A reader pages through a result in order, so the encoding of the result it
 * reads is what the next read needs.
 *
 * Keyed by the payload object: stored messages are immutable and shared between the states a
 * store hands out, so the same result read at a later version hits, and a payload replaced by a
 * commit is a different object. Bounded by bytes, the least recently read forgotten first; a text
 * larger than the bound alone is encoded for its read and not kept.
 */
/** What `ToolResultTexts` keeps in the server (no flag). */
export const defaultToolResultTextBytes = 32 * 1024 * 1024;

export class ToolResultTexts {
  private readonly encoded: ByteBoundedLru<ToolPayload, Buffer>;

  constructor(maxBytes: number) {
    this.encoded = new ByteBoundedLru({ maxBytes });
  }

  /** The payload's text (`toolPayloadText`) as UTF-8. */
  of(payload: ToolPayload | undefined): Buffer {
    if (payload === undefined) return Buffer.alloc(0);
    const kept = this.encoded.use(payload);
    if (kept !== undefined) return kept;
    const text = Buffer.from(toolPayloadText(payload), "utf8");
    this.encoded.set(payload, text, text.length);
    return text;
  }

  /** Bytes kept now. */
  get size(): number {
    return this.encoded.bytes;
  }
}
