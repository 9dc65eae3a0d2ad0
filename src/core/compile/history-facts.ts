import { equals } from "@bufbuild/protobuf";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { firstInvalidToolCall } from "../model/tool-call-arguments.js";
import type { MessageListLineage } from "../model/message-list-lineage.js";
import { analyzeToolRoundsFrom } from "../model/tool-rounds.js";
import type { TokenEstimator } from "../tokens/estimator.js";
import type { TokenCountCache } from "../tokens/token-count-cache.js";
import type { DeadlineCheck } from "./deadline.js";
import { textCharacters } from "./text-allowance.js";

/**
 * Why it exists: a stateful compile used to normalise, validate, count and walk the whole stored
 * history every turn, although the budget kept only its last few dozen messages: 30 ms of a turn
 * at 10,000 messages, 1 s at 100,000. These are the facts about a stored history that stage 1 and
 * the budget establish by walking all of it, kept between compiles of one conversation and
 * extended by the messages a commit appended, so that `elideHistoryHead` can hand the stages only
 * the tail the budget may keep (see docs/incremental-compile.md).
 *
 * One owner at a time: the application's cache hands a conversation's facts to one compile and
 * takes them back after (a concurrent compile of the same conversation builds its own), so the
 * facts are extended in place.
 */
export class HistoryFacts {
  /**
   * The history these facts describe, held weakly: the facts must not keep a history alive that
   * the store has let go of (issue 30: 10,000 conversations' facts held their whole decoded
   * histories, counted at 8 bytes a message). Once it is gone, `line` still tells a later list
   * of the store's that extends it (`MessageListLineage.extendsLine`).
   */
  private historyRef: WeakRef<readonly Message[]> = new WeakRef(noMessages);
  /** The length of that history. */
  private length = 0;
  /** Its line in `lineage`, when the facts were given one. */
  private line: object | undefined;
  private lineage: MessageListLineage | undefined;
  /** UTF-16 code units of the ids `ids` holds, for `approximateBytes`. */
  private idCharacters = 0;
  /**
   * True while every message passes what stage 1 checks of a stored message (a known role, a
   * content variant per part), has an id, unique in the history, has tool calls whose arguments
   * are JSON objects, and the tool rounds are valid with an open round allowed at the tail. Once
   * false the facts are only rebuilt (a later extension cannot make the history clean again).
   */
  clean = true;
  /** Message id → index. */
  private readonly ids = new Map<string, number>();
  /** Start index of every history unit (a message, or a tool round with its results), ascending. */
  readonly unitStarts: number[] = [];
  /** Index of the last USER message, or -1. */
  lastUser = -1;
  /** characters[i]: text characters (as `textCharacters` counts them) of messages [0, i). */
  readonly characters: number[] = [0];
  /** Per estimator (`TokenEstimator.cacheKey`): prefix sums of per-message token counts, as far as counted. */
  private readonly tokenPrefixes = new Map<string, { counts: number[]; prefix: number[] }>();

  /** The facts of `history`: `previous` extended when `history` starts with its messages (the same objects), else built anew. */
  static of(history: readonly Message[], previous: HistoryFacts | undefined, lineage?: MessageListLineage): HistoryFacts {
    if (previous) {
      const known = previous.history;
      if (known === history) return previous;
      const extended = known
        ? (lineage?.extends(history, known) ?? false) || extends_(history, known)
        : lineage !== undefined && previous.line !== undefined && lineage.extendsLine(history, previous.line, previous.length);
      if (extended) {
        previous.lineage = lineage;
        previous.append(history);
        return previous;
      }
      // A head of the known history (a rewind): the facts drop what it cut.
      if (known !== undefined && previous.clean && lineage?.extends(known, history)) {
        previous.lineage = lineage;
        previous.truncate(known, history);
        return previous;
      }
    }
    const facts = new HistoryFacts();
    facts.lineage = lineage;
    facts.append(history);
    return facts;
  }

  /** The history these facts describe (compare by identity), or undefined once nothing else holds it. */
  get history(): readonly Message[] | undefined {
    return this.historyRef.deref();
  }

  /**
   * Moves the facts onto `history` when it holds the same messages as the history they describe,
   * the same objects except for at most `maxAdoptedCopies` equal copies: a compile-commit compiles
   * its deltas applied to the stored state, then the store applies them again and keeps its own
   * objects for the messages it gave ids. Without this the next turn's history would not extend
   * these facts and they would be built again from the whole history.
   */
  adopt(history: readonly Message[], knownShared = 0): void {
    const own = this.history;
    if (own === undefined || history === own || history.length !== own.length) return;
    let copies = 0;
    // `knownShared`: how many leading messages the caller knows both lists hold (the store's lineage).
    for (let index = history.length - 1; index >= knownShared; index--) {
      if (history[index] === own[index]) continue;
      if (++copies > maxAdoptedCopies || !equals(MessageSchema, history[index]!, own[index]!)) return;
    }
    this.describe(history);
  }

  /** Whether `id` is the id of a message of the history. */
  hasId(id: string): boolean {
    return this.ids.has(id);
  }

  /** The first message index of the unit containing message `index`. */
  unitStartOf(index: number): number {
    let low = 0;
    let high = this.unitStarts.length - 1;
    while (low < high) {
      const middle = (low + high + 1) >> 1;
      if (this.unitStarts[middle]! <= index) low = middle;
      else high = middle - 1;
    }
    return this.unitStarts[low]!;
  }

  /**
   * Per-message token counts of the history under `estimator` and their prefix sums (`prefix[i]`
   * = tokens of messages [0, i)), counting only the messages not counted before, with `clock`'s
   * pauses. The same numbers `TokenCountCache.countAll` gives: both count with `countMessage`.
   */
  async tokenPrefix(estimator: TokenEstimator, tokenCounts: TokenCountCache, clock: DeadlineCheck): Promise<{ counts: readonly number[]; prefix: readonly number[] }> {
    let column = this.tokenPrefixes.get(estimator.cacheKey);
    // The caller compiles this history, so it holds it.
    const history = this.history ?? noMessages;
    if (!column) {
      // The first count of a history is the full path's own (its list cache and recent lists).
      const counted = tokenCounts.countAll(estimator, history, clock);
      const counts = [...(counted instanceof Promise ? await counted : counted)];
      column = { counts, prefix: prefixSums(counts) };
    } else if (column.counts.length < history.length) {
      const counted = tokenCounts.countEach(estimator, history.slice(column.counts.length), clock);
      const fresh = counted instanceof Promise ? await counted : counted;
      // Counted first, appended after: an interrupted count (deadline) leaves the column as it was.
      for (const count of fresh) {
        column.counts.push(count);
        column.prefix.push(column.prefix[column.prefix.length - 1]! + count);
      }
    }
    this.tokenPrefixes.set(estimator.cacheKey, column);
    return column;
  }

  /**
   * Roughly what these facts hold in memory, for the cache's bound: map entries ~80 bytes plus the
   * ids' characters (the map keeps the id strings alive after the messages are gone), array slots
   * 8. The messages are not counted: the facts hold their history weakly.
   */
  get approximateBytes(): number {
    return 256 + this.ids.size * 80 + this.idCharacters * 2 + (this.unitStarts.length + this.characters.length) * 8 + this.tokenPrefixes.size * this.length * 16;
  }

  /** Makes `history` the one described (weakly held), with its line in the lineage. */
  private describe(history: readonly Message[]): void {
    this.historyRef = new WeakRef(history);
    this.length = history.length;
    this.line = this.lineage?.lineOf(history);
  }

  /**
   * Describes `history`, the first messages of `known` (the history described, clean), at the cost
   * of the messages dropped (and of the walk back to the previous USER message when the last one
   * was dropped). A head of a clean history is clean: its ids stay unique, and cutting a sequence
   * can only leave its last round open, which the check allows at the tail.
   */
  private truncate(known: readonly Message[], history: readonly Message[]): void {
    const kept = history.length;
    for (let index = kept; index < known.length; index++) {
      const id = known[index]!.id;
      if (this.ids.delete(id)) this.idCharacters -= id.length;
    }
    this.characters.length = kept + 1;
    while (this.unitStarts.length > 0 && this.unitStarts[this.unitStarts.length - 1]! >= kept) this.unitStarts.pop();
    if (this.lastUser >= kept) {
      let index = kept - 1;
      while (index >= 0 && history[index]!.role !== Role.USER) index--;
      this.lastUser = index;
    }
    for (const column of this.tokenPrefixes.values()) {
      if (column.counts.length <= kept) continue;
      column.counts.length = kept;
      column.prefix.length = kept + 1;
    }
    this.describe(history);
  }

  /** Takes in the messages of `history` past the current end (which `history` starts with). */
  private append(history: readonly Message[]): void {
    const from = this.length;
    this.describe(history);
    for (let index = from; index < history.length; index++) {
      const message = history[index]!;
      this.characters.push(this.characters[index]! + textCharacters([message]));
      if (message.role === Role.USER) this.lastUser = index;
      if (!this.clean) continue;
      if (!wellFormedStored(message) || message.id === "" || this.ids.has(message.id)) this.clean = false;
      else {
        this.ids.set(message.id, index);
        this.idCharacters += message.id.length;
      }
    }
    // Token counts are stale past `from` only in length: the column grows on the next `tokenPrefix`.
    if (!this.clean || from === history.length) return;
    // Units from the last one of the old history on: the new messages may continue its round.
    const start = this.unitStarts.length === 0 ? 0 : this.unitStarts.pop()!;
    // Call ids are unique per round, so nothing before `start` bears on the rounds from it on.
    const analysis = analyzeToolRoundsFrom(history, start, { allowOpenTail: true });
    if (analysis.violations.length > 0) {
      this.clean = false;
      return;
    }
    for (const unit of analysis.units) this.unitStarts.push(unit.start);
  }
}

const noMessages: readonly Message[] = Object.freeze([]);

/** Most messages `adopt` compares by content (a turn's deltas bring a few). */
const maxAdoptedCopies = 64;

/**
 * What `isWellFormedMessage` checks (stage 1 measures a stored message's JSON depth at commit,
 * not at compile), plus tool-call arguments that are JSON objects (else stage 1 repairs them).
 */
export function wellFormedStored(message: Message): boolean {
  if (message.role === Role.UNSPECIFIED || Role[message.role] === undefined) return false;
  for (const part of message.parts) if (part.kind.case === undefined) return false;
  return firstInvalidToolCall(message) === undefined;
}

/** Whether `history` starts with every message of `prefix`, the same objects in the same places. */
function extends_(history: readonly Message[], prefix: readonly Message[]): boolean {
  if (history.length < prefix.length) return false;
  for (let index = prefix.length - 1; index >= 0; index--) if (history[index] !== prefix[index]) return false;
  return true;
}

function prefixSums(counts: readonly number[]): number[] {
  const prefix = new Array<number>(counts.length + 1);
  prefix[0] = 0;
  for (let index = 0; index < counts.length; index++) prefix[index + 1] = prefix[index]! + counts[index]!;
  return prefix;
}
