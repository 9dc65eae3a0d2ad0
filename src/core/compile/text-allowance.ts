import { Code, ConnectError } from "@connectrpc/connect";
import type { Message, Part } from "#gen/contextd/v1/message_pb";

/**
 * Why it exists: formatters, templates, `{{var}}` resolution and joins make text out of text, and
 * each can multiply it. Before this cap, 28 `{{content}}{{content}}` templates in a 1 KB request
 * doubled a message 28 times (heap exhaustion or INTERNAL), and one `{{v}}` repeated 1M times with
 * a 400-character value built a 400 MB string in 22 s. Every stage that produces text asks this
 * allowance first, with the length its output will have, so the big string is never built.
 *
 * Lengths are UTF-16 code units (JavaScript string length), which for ASCII text is its bytes.
 */

/** Default of `--max-compile-text-bytes`: the most text one compile may produce, whatever its request. */
export const defaultMaxCompileTextBytes = 64 * 1024 * 1024;
/** A compile may always produce this much text, however small its request. */
export const compileTextFloor = 1024 * 1024;
/** ...and this many times the text its request carries. */
export const compileTextFactor = 8;

/** The text a compile may still produce: min(max, floor + factor × the request's text). */
export class TextAllowance {
  readonly limit: number;
  private produced = 0;

  constructor(
    private readonly inputChars: number,
    private readonly max: number = defaultMaxCompileTextBytes,
  ) {
    this.limit = Math.min(max, compileTextFloor + compileTextFactor * inputChars);
  }

  /** Records `chars` more produced text for `where`; RESOURCE_EXHAUSTED, before anything is built, past the limit. */
  charge(chars: number, where: string): void {
    this.assertFits(chars, where);
    this.produced += chars;
  }

  /** `charge` without recording: for a producer that learns its output length as it goes. */
  assertFits(chars: number, where: string): void {
    const total = this.produced + chars;
    if (total > this.limit) {
      throw new ConnectError(
        `${where}: the compile's text would grow to ${total} characters, over its limit of ${this.limit} ` +
          `(${compileTextFloor} + ${compileTextFactor} × the ${this.inputChars} characters of text in the request, at most ${this.max}: --max-compile-text-bytes)`,
        Code.ResourceExhausted,
      );
    }
  }
}

/** Characters in the text parts of `messages` (tool results' nested text parts included). */
export function textCharacters(messages: readonly Message[]): number {
  let total = 0;
  for (const message of messages) total += partsTextCharacters(message.parts);
  return total;
}

function partsTextCharacters(parts: readonly Part[]): number {
  let total = 0;
  for (const part of parts) {
    const kind = part.kind;
    if (kind.case === "text") total += kind.value.text.length;
    else if (kind.case === "toolResult") total += partsTextCharacters(kind.value.contentParts);
  }
  return total;
}

/** Non-overlapping occurrences of `needle` in `text`, as `replaceAll` finds them. */
export function occurrences(text: string, needle: string): number {
  let count = 0;
  for (let at = text.indexOf(needle); at >= 0; at = text.indexOf(needle, at + needle.length)) count++;
  return count;
}
