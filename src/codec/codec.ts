import type { MessageListLineage } from "../core/model/message-list-lineage.js";
import type { DescMessage, MessageShape } from "@bufbuild/protobuf";
import type { WireType } from "@bufbuild/protobuf/wire";
import { MessageSchema, type Message } from "#gen/contextd/v1/message_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import { freezeConversationMessages } from "./immutability.js";
import { decodeMessage, type DecodedObjectReuse, type Fields } from "./protobuf-decoder.js";
import { ProtobufEncoder } from "./protobuf-encoder.js";
import { RecentMessages } from "./recent-messages.js";
import { RetainedEncodings } from "./retained-encodings.js";
import { encodeStateRest } from "./state-encoding.js";
import { StoredTokenCounts, type RunningFacts } from "./stored-token-counts.js";
import type { TokenEstimator } from "../core/tokens/estimator.js";

/** The codec's memory bounds; the server takes them from its configuration. */
export interface CodecLimits {
  /** Request messages kept to be handed out again, counted as encoding + 1 KiB each; 0 keeps none. */
  recentMessageBytes: number;
  /** Encodings of immutable messages and lists kept across calls; 0 keeps none. */
  retainedEncodingBytes: number;
}

export const defaultCodecLimits: CodecLimits = {
  // ~60,000 short messages: sixty agents resending 1,000-message conversations.
  recentMessageBytes: 64 * 1024 * 1024,
  // The encodings of a couple of hundred hot 1,000-message conversations.
  retainedEncodingBytes: 64 * 1024 * 1024,
};

/** What the codec holds, for the server's gauges. */
export interface CodecStats {
  recentMessageBytes: number;
  retainedEncodingBytes: number;
  /** Request messages looked up among the recent ones, and found. */
  recentMessageLookups: number;
  recentMessageHits: number;
  /** Stored messages whose encoding was asked for, and found kept. */
  retainedEncodingLookups: number;
  retainedEncodingHits: number;
}

/**
 * The one seam between protobuf wire bytes and message objects: every request the server decodes,
 * every response it encodes and every state a store writes goes through one instance, created per
 * server and injected into its store, so its caches have one owner and one bound.
 *
 * Why it is not plain `fromBinary`/`toBinary` (bench/codec.ts, @bufbuild/protobuf 2.17, same run):
 * - decoding hands out the object decoded last time for a conversation message seen before, so a
 *   resent 1,000-message history decodes in ~0.35 ms instead of ~0.76 ms, and everything the engine
 *   learnt by identity (token counts, interned ids, encodings) is found again;
 * - encoding writes back to front into one buffer, ~2x faster than `toBinary` for a fresh compile
 *   result, and keeps the bytes of immutable messages and lists, so a compile answering with a
 *   stored or resent history costs ~0.1 ms instead of ~3.6 ms at 1,000 messages.
 *
 * The immutability rule: an object may be shared across calls only if it cannot change. Request
 * messages are frozen all the way down (`immutability.ts`; JSON requests too, by the server); a stored state's lists are immutable
 * because the store says so (`retainState`, called by the stores for every state they hand out —
 * arrays are not frozen, since V8 copies frozen arrays ~10x slower). Nothing else is kept.
 */
export class Codec {
  private readonly reuse: DecodedObjectReuse | undefined;
  private readonly retained: RetainedEncodings | undefined;
  private readonly encoder: ProtobufEncoder;
  /** The token counts stored with segment messages (`StoredTokenCounts`); the server's token count cache reads them. */
  readonly storedTokenCounts: StoredTokenCounts;

  /** `storedTokenEstimator`: whose counts the stores keep with each message (`--stored-token-estimator`); none without it. */
  constructor(
    readonly limits: CodecLimits = defaultCodecLimits,
    storedTokenEstimator?: TokenEstimator,
  ) {
    this.storedTokenCounts = new StoredTokenCounts(storedTokenEstimator);
    this.reuse =
      limits.recentMessageBytes > 0
        ? { recentMessages: new RecentMessages<Fields>(limits.recentMessageBytes) }
        : undefined;
    this.retained = limits.retainedEncodingBytes > 0 ? new RetainedEncodings(limits.retainedEncodingBytes) : undefined;
    this.encoder = new ProtobufEncoder(this.retained);
  }

  /**
   * Decodes `bytes` exactly as `fromBinary` would (same values, same errors), reusing what it can;
   * every conversation message in the result is frozen all the way down (the immutability rule).
   */
  decode<Desc extends DescMessage>(schema: Desc, bytes: Uint8Array): MessageShape<Desc> {
    const message = decodeMessage(schema, bytes, this.reuse);
    freezeConversationMessages(message);
    return message;
  }

  /** Byte for byte what `toBinary` produces. */
  encode<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): Uint8Array {
    return this.encoder.encode(schema, message);
  }

  /** One uncompressed envelope (flags, length, message) in one buffer. */
  encodeEnveloped<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): Uint8Array {
    return this.encoder.encodeEnveloped(schema, message);
  }

  /** One uncompressed envelope (flags, length, message) as chunks to send in order; never modify them. */
  encodeEnvelopedChunks<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): Uint8Array[] {
    return this.encoder.encodeEnvelopedChunks(schema, message);
  }

  /** The encoding cut into top-level fields, the shape of `$unknown` (see pre-encoded-responses.ts). */
  encodeTopLevelFields<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): { no: number; wireType: WireType; data: Uint8Array }[] {
    return this.encoder.encodeTopLevelFields(schema, message);
  }

  /**
   * A stored segment message's encoding (without tag and length). The bytes kept for responses are
   * reused when the message has them (a replaced or compacted segment rewrites mostly messages the
   * responses already carried), so a stored message's bytes are kept once, not once for the store
   * and once for the responses.
   */
  encodeStoredMessage(message: Message): Uint8Array {
    return this.retained?.encodingOf(message) ?? this.encoder.encode(MessageSchema, message);
  }

  /**
   * A stored segment message's entry: `encodeStoredMessage` behind its token count record
   * (`StoredTokenCounts`), counted now unless known. What the Redis and Postgres stores write.
   */
  encodeStoredEntry(message: Message, running?: RunningFacts): Uint8Array {
    return this.storedTokenCounts.entryOf(message, this.encodeStoredMessage(message), running);
  }

  /** The message of an entry `encodeStoredEntry` wrote (or of a plain `Message` encoding); throws as `fromBinary` does. */
  decodeStoredEntry(entry: Uint8Array): Message {
    return this.storedTokenCounts.decodeEntry(entry);
  }

  /** A state's encoding without its segments and version (the Redis store's `rest`). */
  encodeStateRest(state: ConversationState): Uint8Array {
    return encodeStateRest(state);
  }

  /**
   * Declares `state`'s message lists and their elements immutable, so responses carrying them reuse
   * their encodings. Only a store calls this, for the states it hands out (its contract: they are
   * never modified); cheap for a state declared before.
   */
  retainState(state: ConversationState, lineage?: MessageListLineage): void {
    this.retained?.retainStoredState(state, lineage);
  }

  get stats(): CodecStats {
    return {
      recentMessageBytes: this.reuse?.recentMessages.keptBytes ?? 0,
      retainedEncodingBytes: this.retained?.keptBytes ?? 0,
      recentMessageLookups: this.reuse?.recentMessages.lookups ?? 0,
      recentMessageHits: this.reuse?.recentMessages.hits ?? 0,
      retainedEncodingLookups: this.retained?.lookups ?? 0,
      retainedEncodingHits: this.retained?.hits ?? 0,
    };
  }
}
