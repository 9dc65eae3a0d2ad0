import { fromBinary } from "@bufbuild/protobuf";
import { MessageSchema, type Message } from "#gen/contextd/v1/message_pb";
import type { TokenEstimator } from "../core/tokens/estimator.js";
import type { KnownTokenCounts } from "../core/tokens/token-count-cache.js";
import type { StoredRunningFacts } from "../core/compile/stored-head.js";
import { varintLength, writeVarint } from "./varint.js";
import { toolPayloadText } from "../core/model/payload-text.js";
import type { Part } from "#gen/contextd/v1/message_pb";

/**
 * Why it exists: a sidecar that has never seen a conversation used to count its whole history
 * with the compile's tokenizer on its first compile (419-719 ms at 10,000 messages with o200k,
 * issue 30), although the count of every stored message never changes. The Redis and Postgres
 * stores now keep each message's count beside its encoding, written once when the commit stores
 * the message (O(delta)); a process reading the message back gets the count with it.
 *
 * The stored entry of a segment message is its `Message` encoding, preceded by one record in the
 * slot of `Message` field 180 (reserved in message.proto for it):
 *
 *     0xA2 0x0B  varint(length)  [0x0A varint(n) estimator-cache-key]  [0x10 varint(tokens)]
 *       and for a history entry, optionally: [0x18 running tokens] [0x20 running characters]
 *       [0x28 epoch] [0x30 clean] (`RunningFacts`)
 *
 * — a length-delimited field 180 holding the `TokenEstimator.cacheKey` the count is for and the
 * count. Because a `Message` never has field 180, an entry without a record (written before, or
 * by a process counting nothing) is a plain `Message` encoding, and a reader tells the two apart
 * by the first two bytes. The record is cut off before the message is decoded, so it never
 * reaches a message object (it would be an unknown field, written back to clients).
 *
 * The counts of one estimator configuration are kept (`--stored-token-estimator`): the one most
 * compiles use. A compile with another estimator counts as before (its counts are the same numbers
 * either way: `countMessage` of the same estimator configuration); a record for another cache key
 * than the configured one is ignored. Messages whose texts total more than `maxCountedCharacters`
 * are stored without a count: counting them takes milliseconds the commit would spend
 * synchronously, and the compile counts them with pauses (`countLongTexts`).
 */
/** What a history entry's record may also carry (see `StoredRunningFacts`, docs/incremental-compile.md "A cold compile"). */
export type RunningFacts = StoredRunningFacts;

export class StoredTokenCounts implements KnownTokenCounts {
  /** The running facts through the last message of a history list this process wrote or read (`RunningFacts`). */
  private readonly lastRunning = new WeakMap<readonly Message[], RunningFacts>();
  /** Counts by message object, for the configured estimator: those decoded from entries, and those counted for entries written. */
  private readonly counts = new WeakMap<Message, number>();
  private readonly keyBytes: Uint8Array;

  constructor(readonly estimator: TokenEstimator | undefined) {
    this.keyBytes = new TextEncoder().encode(estimator?.cacheKey ?? "");
  }

  get cacheKey(): string | undefined {
    return this.estimator?.cacheKey;
  }

  /** The stored count of `message` under the estimator with `cacheKey`, if one was read or written. */
  countOf(message: Message, cacheKey: string): number | undefined {
    if (this.estimator === undefined || cacheKey !== this.estimator.cacheKey) return undefined;
    return this.counts.get(message);
  }

  /**
   * The stored entry of `message`, given its `Message` encoding: the encoding behind a count
   * record, or the encoding alone without a configured estimator or for a message too long to
   * count here.
   */
  entryOf(message: Message, encoding: Uint8Array, running?: RunningFacts): Uint8Array {
    const tokens = this.countFor(message);
    if (tokens === undefined) return encoding;
    const runningBytes = running ? 4 + varintLength(running.tokens) + varintLength(running.characters) + varintLength(Number(running.epoch)) + 1 : 0;
    const inner = 1 + varintLength(this.keyBytes.length) + this.keyBytes.length + 1 + varintLength(tokens) + runningBytes;
    const entry = new Uint8Array(2 + varintLength(inner) + inner + encoding.length);
    entry[0] = 0xa2;
    entry[1] = 0x0b;
    let offset = writeVarint(entry, 2, inner);
    entry[offset++] = 0x0a;
    offset = writeVarint(entry, offset, this.keyBytes.length);
    entry.set(this.keyBytes, offset);
    offset += this.keyBytes.length;
    entry[offset++] = 0x10;
    offset = writeVarint(entry, offset, tokens);
    if (running) {
      entry[offset++] = 0x18;
      offset = writeVarint(entry, offset, running.tokens);
      entry[offset++] = 0x20;
      offset = writeVarint(entry, offset, running.characters);
      entry[offset++] = 0x28;
      offset = writeVarint(entry, offset, Number(running.epoch));
      entry[offset++] = 0x30;
      entry[offset++] = running.clean ? 1 : 0;
    }
    entry.set(encoding, offset);
    return entry;
  }

  /**
   * The message of a stored entry, its count remembered when the record is for the configured
   * estimator. Throws (as `fromBinary` does) on bytes that are neither form.
   */
  decodeEntry(entry: Uint8Array): Message {
    return this.decodeEntryWithFacts(entry).message;
  }

  /** `decodeEntry`, and the entry's running facts when its record has them for the configured estimator. */
  decodeEntryWithFacts(entry: Uint8Array): { message: Message; running?: RunningFacts } {
    if (entry.length < 2 || entry[0] !== 0xa2 || entry[1] !== 0x0b) {
      return { message: fromBinary(MessageSchema, entry) };
    }
    const record = readRecord(entry);
    const message = fromBinary(MessageSchema, entry.subarray(record.end));
    if (this.estimator !== undefined && sameBytes(record.key, this.keyBytes)) {
      this.counts.set(message, record.tokens);
      return { message, running: record.running };
    }
    return { message };
  }

  /**
   * `decodeEntryWithFacts` for an entry whose message this process already holds as `message`
   * (the same stored entry, read again): only the count record is read, not the message.
   */
  factsOfEntry(entry: Uint8Array, message: Message): RunningFacts | undefined {
    if (entry.length < 2 || entry[0] !== 0xa2 || entry[1] !== 0x0b) return undefined;
    const record = readRecord(entry);
    if (this.estimator === undefined || !sameBytes(record.key, this.keyBytes)) return undefined;
    this.counts.set(message, record.tokens);
    return record.running;
  }

  /** The running facts through the last message of `history`, if this process wrote or read them. */
  runningOf(history: readonly Message[]): RunningFacts | undefined {
    return this.lastRunning.get(history);
  }

  /** Remembers the running facts through the last message of `history` (what the next commit's facts continue from). */
  rememberRunning(history: readonly Message[], running: RunningFacts | undefined): void {
    if (running) this.lastRunning.set(history, running);
  }

  /** The count `entryOf` writes for `message` (counted now unless known), undefined when it writes none. */
  storedCount(message: Message): number | undefined {
    return this.countFor(message);
  }

  /**
   * Records the count of a message the store keeps as an object (the in-memory store), counted now
   * unless known: a compile that finds the conversation's history facts forgotten takes the counts
   * from here instead of counting the history again.
   */
  note(message: Message): void {
    this.countFor(message);
  }

  private countFor(message: Message): number | undefined {
    const estimator = this.estimator;
    if (estimator === undefined) return undefined;
    const known = this.counts.get(message);
    if (known !== undefined) return known;
    if (countedCharacters(message.parts) > maxCountedCharacters) return undefined;
    const tokens = estimator.countMessage(message);
    this.counts.set(message, tokens);
    return tokens;
  }
}

/** Longest text (characters, all parts together) a commit counts synchronously: ~1-3 ms of BPE. */
export const maxCountedCharacters = 64 * 1024;

function readRecord(entry: Uint8Array): { key: Uint8Array; tokens: number; end: number; running?: RunningFacts } {
  let offset = 2;
  const [length, afterLength] = readVarint(entry, offset);
  offset = afterLength;
  const end = offset + length;
  if (end > entry.length) throw new Error("the token count record runs past the entry");
  let key: Uint8Array | undefined;
  let tokens: number | undefined;
  const running: Partial<RunningFacts> = {};
  let runningFields = 0;
  while (offset < end) {
    const tag = entry[offset++];
    if (tag === 0x0a) {
      const [keyLength, afterKeyLength] = readVarint(entry, offset);
      if (afterKeyLength + keyLength > end) throw new Error("the token count record's estimator runs past the record");
      key = entry.subarray(afterKeyLength, afterKeyLength + keyLength);
      offset = afterKeyLength + keyLength;
    } else if (tag === 0x10) {
      [tokens, offset] = readVarint(entry, offset);
    } else if (tag === 0x18 || tag === 0x20 || tag === 0x28 || tag === 0x30) {
      let value: number;
      [value, offset] = readVarint(entry, offset);
      if (tag === 0x18) running.tokens = value;
      else if (tag === 0x20) running.characters = value;
      else if (tag === 0x28) running.epoch = BigInt(value);
      else running.clean = value === 1;
      runningFields++;
    } else {
      throw new Error(`the token count record has an unknown field tag ${tag}`);
    }
  }
  if (offset !== end || key === undefined || tokens === undefined || (runningFields !== 0 && runningFields !== 4)) throw new Error("the token count record is incomplete");
  return { key, tokens, end, running: runningFields === 4 ? (running as RunningFacts) : undefined };
}

function readVarint(bytes: Uint8Array, offset: number): [number, number] {
  let value = 0;
  let scale = 1;
  for (let index = 0; index < 8; index++) {
    if (offset >= bytes.length) throw new Error("the token count record ends inside a varint");
    const byte = bytes[offset++]!;
    value += (byte & 0x7f) * scale;
    if (byte < 0x80) return [value, offset];
    scale *= 128;
  }
  throw new Error("the token count record has a varint longer than 8 bytes");
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let index = 0; index < a.length; index++) if (a[index] !== b[index]) return false;
  return true;
}

/** Characters BPE would walk in `parts`: texts, reasoning, tool names, arguments and payloads. */
function countedCharacters(parts: readonly Part[]): number {
  let total = 0;
  for (const part of parts) {
    const kind = part.kind;
    if (kind.case === "text" || kind.case === "reasoning") total += kind.value.text.length;
    else if (kind.case === "toolCall") total += kind.value.name.length + toolPayloadText(kind.value.arguments).length;
    else if (kind.case === "toolResult") total += kind.value.name.length + toolPayloadText(kind.value.payload).length + countedCharacters(kind.value.contentParts);
  }
  return total;
}
