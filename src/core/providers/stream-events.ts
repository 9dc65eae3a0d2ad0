import { Code, ConnectError } from "@connectrpc/connect";
import { prefixError } from "../model/error-details.js";
import { expectObject, malformed, parseJsonObject, type JsonObject } from "./json-reader.js";

/**
 * Why it exists: every provider streams a response as a sequence of JSON events, and the four
 * stream mergers (`<provider>/merge-stream.ts`) read them the same way: decoded one by one, each
 * error named by the event's index and the JSON path inside it, and the whole stream bounded.
 */

/**
 * The most events one stream may have. A long answer streams about one event per token, so this
 * is room for ~100k tokens of output; past it the delta is RESOURCE_EXHAUSTED before any event is
 * decoded. Each event costs one JSON parse and constant work per field, so merging is linear.
 */
export const maxStreamEvents = 100_000;

/** What a merger made of a stream. */
export interface MergedStream {
  /** The non-streaming response body the events stand for (only meaningful when `complete`). */
  readonly body: JsonObject;
  /** The stream reached its provider's end marker. */
  readonly complete: boolean;
  /** The model's visible text so far (no reasoning), for an interrupted stream. */
  readonly text: string;
  /** Why the stream is not complete when its events say so ("the stream reported error ..."), "" otherwise. */
  readonly failure: string;
}

/** A merger consumes decoded events in order, then says what they made. */
export interface StreamMerger {
  /** Reads one event; errors use paths inside the event ("delta.text"). */
  accept(event: JsonObject): void;
  finish(): MergedStream;
}

/**
 * Feeds `events` to `merger` in order. Chat Completions ends its SSE stream with the text
 * `[DONE]`, which is passed to `onDone` (when given) instead of being decoded. Errors are
 * prefixed with `events[i]`.
 */
export function mergeStreamEvents(events: readonly Uint8Array[], providerName: string, merger: StreamMerger, onDone?: () => void): MergedStream {
  if (events.length > maxStreamEvents) {
    throw new ConnectError(`events: ${events.length} events, more than the limit of ${maxStreamEvents} per stream`, Code.ResourceExhausted);
  }
  events.forEach((bytes, index) => {
    try {
      if (onDone !== undefined && isDoneMarker(bytes)) onDone();
      else merger.accept(parseJsonObject(bytes, `${providerName} stream event`));
    } catch (error) {
      throw error instanceof ConnectError ? prefixError(error, `events[${index}]`) : error;
    }
  });
  return merger.finish();
}

const doneMarker = "[DONE]";

function isDoneMarker(bytes: Uint8Array): boolean {
  if (bytes.length > 16) return false;
  return new TextDecoder().decode(bytes).trim() === doneMarker;
}

/**
 * An event's non-negative integer `index`-like field that must name an existing entry or the
 * next one (`count`): streams open blocks, items and calls in order, so a larger number is
 * malformed (and could not make a sparse array of a billion entries).
 */
export function expectStreamIndex(value: unknown, path: string, count: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0) throw malformed(path, `expected a non-negative integer, got ${JSON.stringify(value) ?? "nothing"}`);
  if (value > count) throw malformed(path, `index ${value} skips ahead: ${count} opened so far, so the next is ${count}`);
  return value;
}

/** The event's `type` ("content_block_delta"), for the mergers whose events carry one. */
export function eventType(event: JsonObject): string {
  const type = event["type"];
  if (typeof type !== "string") throw malformed("type", "expected the event type as a JSON string");
  return type;
}

/** The hint a non-streaming parser gives when it is handed one event of a stream. */
export function streamEventHint(what: string): string {
  return `this is a stream event (${what}), not a response body: send a stream's events in append_provider_stream`;
}

/** A nested object of an event, by key. */
export function eventObject(event: JsonObject, key: string, path = key): JsonObject {
  return expectObject(event[key], path);
}
