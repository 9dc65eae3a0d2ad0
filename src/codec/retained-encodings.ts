import type { Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, type ConversationState } from "#gen/contextd/v1/state_pb";
import type { MessageListLineage } from "../core/model/message-list-lineage.js";

/**
 * Encodings that `protobuf-encoder.ts` keeps from one call to the next, for objects that can no
 * longer change: the message lists of a stored conversation state and their elements.
 *
 * Why it exists: a stateful compile answers with the stored messages themselves (the engine passes
 * unchanged messages, and unchanged lists, through as the same objects), so the bytes of a
 * 1,000-message conversation were re-encoded on every call although they cannot differ. States
 * returned by the store are read-only by contract (`conversation-store.ts`), so an encoding keyed
 * by such an object's identity stays exact for as long as the object lives.
 *
 * Only objects that cannot change are kept: those of states a store declared (`Codec.retainState`), and
 * conversation messages frozen all the way down (the request decoder hands out the same frozen
 * object for the same bytes, so a stateless compile resends them call after call). Anything else
 * (a list the engine builds, a message it edits) may change between calls and is encoded afresh
 * every time. A list of such messages that keeps coming back as fresh arrays (a stateless
 * request's history) is adopted: a frozen copy becomes its elements' home, so the next calls copy
 * runs of it like runs of a stored list. Keys are weak,
 * so encodings die with the state they came from; their total is bounded by `maxBytes`, beyond
 * which every mark and encoding is dropped at once, and states are marked again when next loaded
 * (the count cannot see what the garbage collector reclaimed, so it resets early, never late).
 */
export class RetainedEncodings {
  private messages = new WeakMap<object, RetainedMessage>();
  private lists = new WeakMap<object, RetainedList>();
  private states = new WeakSet<ConversationState>();
  /** Frozen objects found to hold something mutable (a non-empty bytes field, an unfrozen child). */
  private mutable = new WeakSet<object>();
  /** Frozen messages seen once, with the encoding call that saw them (see `frozenMessage`). */
  private seen = new WeakMap<object, number>();
  private call = 0;
  private bytes = 0;
  /** `encodingOf` calls and the ones that found a kept encoding (for metrics). */
  lookups = 0;
  hits = 0;

  constructor(readonly maxBytes: number) {}

  /**
   * Marks the message lists of `state` and their elements as immutable; cheap for a state seen
   * before. `lineage`, the store's record of appended lists, spares comparing a list with the one
   * it extends element by element.
   */
  retainStoredState(state: ConversationState, lineage?: MessageListLineage): void {
    if (this.states.has(state)) return;
    this.states.add(state);
    for (const name of stateListNames) {
      const list = state[name] as object[];
      if (list.length === 0) continue;
      // A list retained before had every element marked then (a fork's state holds its source's
      // lists): marking 100,000 again took ~8 ms of a fork.
      if (this.lists.has(list)) continue;
      if (this.truncateHome(list, lineage)) continue;
      const extended = this.extendHome(list, lineage);
      const home = extended?.home ?? new RetainedList(list, false);
      const from = extended?.from ?? 0;
      this.lists.set(list, home);
      for (let index = from; index < list.length; index++) {
        const element = list[index]!;
        const mark = this.messages.get(element);
        if (mark === undefined) {
          this.messages.set(element, { encoding: undefined, home, index });
        } else {
          // The newest list holding a message is the one responses are cut from; older ones may go.
          mark.home = home;
          mark.index = index;
        }
      }
    }
  }

  /**
   * When `list` extends the home of its first element (what every append makes of a stored
   * segment), that home becomes `list`'s: its elements' marks stay valid (same elements at the
   * same indexes), so only the new ones need marking, and the old list, which keeps a home of its
   * own for its whole-list encodings, is no longer held by any mark. Marking every element of a
   * 100,000-message history took ~7.5 ms per commit here (p50 of 30 appends), this ~0.33 ms
   * (0.16 → 0.011 ms at 10,000). Returns the home and the index from which `list`'s elements need marks.
   */
  private extendHome(list: readonly object[], lineage: MessageListLineage | undefined): { home: RetainedList; from: number } | undefined {
    const first = this.messages.get(list[0]!);
    const home = first?.home;
    if (home === undefined || first!.index !== 0) return undefined;
    const previous = home.list;
    if (previous === undefined) return undefined;
    // A removal from the home's list (then appends): every element is marked in a home of its own,
    // whose list the appends after it extend (marking only what they append). Marked from the
    // first removed message only, the first elements kept the old home, and each append after a
    // removal marked all messages past the removed one again (~16 ms at 100,000, CPU profile).
    if (lineage?.removalFrom(list as readonly Message[], previous as readonly Message[]) !== undefined) return { home: new RetainedList(list, false), from: 0 };
    // Known from the appends that made `list` (1 µs), or compared (~0.3 ms at 100,000 messages).
    if (previous.length > list.length || !lineage?.extends(list as readonly Message[], previous as readonly Message[])) {
      // A branch of the home's list (a fork's lists and its source's): the shared messages keep
      // their marks (the encoder compares runs by identity, so a run of them copies from the other
      // branch's encoding), and `list` becomes the home of the messages past them. Also when the
      // home's list is the longer one: the second fork of one source, appended to after the first
      // fork's commits made the home longer, marked its 100,000 messages again (~14 ms of its first
      // commit, CPU profile of bench/fork.ts's sequence on the memory store).
      const shared = lineage?.sharedPrefix(list as readonly Message[], previous as readonly Message[]) ?? 0;
      if (shared > 0 && shared < list.length) return { home: new RetainedList(list, false), from: shared };
      if (previous.length > list.length) return undefined;
      for (let index = 0; index < previous.length; index++) if (list[index] !== previous[index]) return undefined;
    }
    const own = new RetainedList(previous, false);
    own.encodings = home.encodings;
    this.lists.set(previous, own);
    home.point(list, false);
    home.encodings = undefined;
    return { home, from: previous.length };
  }

  /**
   * When `list` is known (per `lineage`) to be a head of the home of its first element (a rewind's
   * state, change-undo.ts), that home becomes `list`'s: its elements keep their marks (same
   * elements at the same indexes), the dropped ones are marked in the old list, which keeps a home
   * of its own with its whole-list encodings. Costs the dropped messages; marking the kept ones
   * again cost ~9 ms of a rewind at 100,000 messages (CPU profile of the memory store's rewind),
   * and the commit after it as much, the appended list extending no home then.
   */
  private truncateHome(list: readonly object[], lineage: MessageListLineage | undefined): boolean {
    const first = this.messages.get(list[0]!);
    const home = first?.home;
    if (lineage === undefined || home === undefined || first!.index !== 0) return false;
    const previous = home.list;
    if (previous === undefined || previous.length <= list.length || !lineage.extends(previous as readonly Message[], list as readonly Message[])) return false;
    const own = new RetainedList(previous, false);
    own.encodings = home.encodings;
    this.lists.set(previous, own);
    for (let index = list.length; index < previous.length; index++) {
      const mark = this.messages.get(previous[index]!);
      if (mark?.home === home) mark.home = own;
    }
    home.point(list, false);
    home.encodings = undefined;
    this.lists.set(list, home);
    return true;
  }

  /** The kept encoding of an immutable message (without tag and length), if it was encoded since marked. */
  encodingOf(message: object): Uint8Array | undefined {
    this.lookups++;
    const encoding = this.messages.get(message)?.encoding;
    if (encoding !== undefined) this.hits++;
    return encoding;
  }

  /** The mark of an immutable message, undefined for any other object. */
  message(message: object): RetainedMessage | undefined {
    return this.messages.get(message);
  }

  /** Called by the encoder once per response: tells a message that comes back from one seen before. */
  beginCall(): void {
    this.call++;
  }

  /**
   * The mark of a message frozen all the way down, made when it comes back in a later response;
   * undefined for any other object. Keeping a message's bytes costs a copy, which only pays when
   * the object is sent again: requests whose messages never repeat must not pay for it.
   */
  frozenMessage(message: object): RetainedMessage | undefined {
    const known = this.messages.get(message);
    if (known !== undefined || !Object.isFrozen(message) || this.mutable.has(message)) return known;
    const seenIn = this.seen.get(message);
    if (seenIn === undefined) this.seen.set(message, this.call);
    if (seenIn === undefined || seenIn === this.call) return undefined;
    if (!isDeeplyFrozen(message)) {
      this.mutable.add(message);
      return undefined;
    }
    const mark: RetainedMessage = { encoding: undefined, home: undefined, index: 0 };
    this.messages.set(message, mark);
    return mark;
  }

  /**
   * Makes a frozen copy of `list`, whose elements must all be marked, their home: later lists
   * holding runs of the same elements are then cut from its encoding.
   */
  adoptList(list: readonly object[]): void {
    const marks: RetainedMessage[] = [];
    for (const element of list) {
      const mark = this.messages.get(element);
      // Gone when the bound dropped every mark since the caller looked.
      if (mark === undefined) return;
      marks.push(mark);
    }
    const copy = Object.freeze([...list]);
    // Held: the copy is nobody else's, and its messages are the resent request's.
    const home = new RetainedList(copy, true);
    this.lists.set(copy, home);
    marks.forEach((mark, index) => {
      mark.home = home;
      mark.index = index;
    });
    this.count(list.length * 8);
  }

  /** The mark of an immutable list, undefined for any other object. */
  list(list: object): RetainedList | undefined {
    return this.lists.get(list);
  }

  /** Keeps a copy of the message's encoding (without tag and length). */
  keepMessage(mark: RetainedMessage, encoding: Uint8Array): void {
    mark.encoding = this.take(encoding);
  }

  /** Keeps a copy of the list's encoding as repeated field `fieldNumber`. */
  keepList(mark: RetainedList, fieldNumber: number, encoding: Uint8Array, offsets: Uint32Array): void {
    mark.encodings = { fieldNumber, bytes: this.take(encoding), offsets, next: mark.encodings };
    this.bytes += offsets.byteLength;
  }

  /** Bytes kept since the last reset (including encodings of objects already collected). */
  get keptBytes(): number {
    return this.bytes;
  }

  private take(encoding: Uint8Array): Uint8Array {
    this.count(encoding.byteLength);
    // A copy, since the encoder's buffer is handed out as the call's result; Buffer.from takes
    // small copies from a shared pool instead of allocating one ArrayBuffer each.
    return Buffer.from(encoding);
  }

  private count(bytes: number): void {
    this.bytes += bytes;
    if (this.bytes <= this.maxBytes) return;
    // Encodings already handed to marks of the old generation die with them.
    this.messages = new WeakMap();
    this.lists = new WeakMap();
    this.states = new WeakSet();
    this.mutable = new WeakSet();
    this.seen = new WeakMap();
    this.bytes = bytes;
  }
}

/** An element of a stored list. */
export interface RetainedMessage {
  /** The message's encoding without tag and length, once encoded. */
  encoding: Uint8Array | undefined;
  /** The newest stored (or adopted) list holding the message, and where; runs of a response list are cut from it. */
  home: RetainedList | undefined;
  index: number;
}

/**
 * A message list of a stored state (or an adopted copy), home of its elements' marks. A stored list
 * is held weakly: every mark of its elements points here, so holding it would keep the whole list
 * alive for as long as any one of its messages lives — a request message the codec keeps to hand
 * out again, once stored, kept its conversation's entire newest history alive (issue 30: 60
 * conversations of 1,000 messages held 150 MB past 21 MB of cache bounds). Once it is gone its
 * elements are written one by one.
 */
export class RetainedList {
  private weak: WeakRef<readonly object[]> | undefined;
  private strong: readonly object[] | undefined;
  encodings: ListEncoding | undefined = undefined;

  constructor(list: readonly object[], held: boolean) {
    this.point(list, held);
  }

  /** The list, or undefined once only this held it (weakly). */
  get list(): readonly object[] | undefined {
    return this.strong ?? this.weak?.deref();
  }

  /** Makes `list` the one this is the home of: `held` strongly (an adopted copy) or weakly (a stored list). */
  point(list: readonly object[], held: boolean): void {
    this.strong = held ? list : undefined;
    this.weak = held ? undefined : new WeakRef(list);
  }
}

/** The list encoded as one repeated field (tags and lengths included, so per field number). */
export interface ListEncoding {
  fieldNumber: number;
  bytes: Uint8Array;
  /** Where each element's tag starts in `bytes`, and the length of `bytes` at the end (list length + 1 entries). */
  offsets: Uint32Array;
  next: ListEncoding | undefined;
}

export function listEncodingFor(mark: RetainedList, fieldNumber: number): ListEncoding | undefined {
  for (let encoding = mark.encodings; encoding !== undefined; encoding = encoding.next) {
    if (encoding.fieldNumber === fieldNumber) return encoding;
  }
  return undefined;
}

/**
 * True when nothing reachable from `value` can change. Typed arrays cannot be frozen, so a message
 * holding a non-empty bytes field is never kept (an image part could be overwritten in place).
 */
function isDeeplyFrozen(value: object): boolean {
  if (ArrayBuffer.isView(value)) return value.byteLength === 0;
  if (!Object.isFrozen(value)) return false;
  for (const key of Object.keys(value)) {
    const child = (value as Record<string, unknown>)[key];
    if (typeof child === "object" && child !== null && !isDeeplyFrozen(child)) return false;
  }
  return true;
}

const stateListNames = ConversationStateSchema.fields
  .filter((field) => field.fieldKind === "list" && field.listKind === "message")
  .map((field) => field.localName as keyof ConversationState);
