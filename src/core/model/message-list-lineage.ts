import type { Message } from "#gen/contextd/v1/message_pb";

/**
 * Which message lists were made by appending to which, so that a caller can tell in constant time
 * that one list is another followed by more messages.
 *
 * Why it exists: the stores compare the segments of a commit's state with those of the state it
 * started from (to write only the new messages, to extend their id index, to keep encodings), and
 * proving that a 100,000-message history is a prefix of the next one by comparing its elements
 * cost ~0.3 ms per comparison, several per commit (bench:scale, store commit lines).
 *
 * Lists are never modified (states are immutable), so each list made by an append belongs to a
 * line: the lists of one line are all prefixes of its newest list (its tip). Appending to the tip
 * extends the line; appending to any other list (a second commit planned from the same base)
 * starts a new line from that list, which then leaves its old line. "Extends" is therefore only
 * ever answered true when it holds; false means "not known", and the caller compares elements.
 * A list made by truncating one of a line (a rewind to an earlier version keeps a prefix) is a
 * prefix of that line's tip too, so it joins the line without changing it; the next append to it
 * starts a line of its own, as any append to a list short of the tip does.
 * Keys are weak and a line holds no list, so nothing is kept alive by being recorded.
 */
/**
 * A line: the length of its tip, and for a line started by appending to a list short of another
 * line's tip (a fork's first commit, the source's next one, an append after a rewind), that line
 * and the length of the list it started from: every list of both starts with those messages.
 */
interface Line {
  tipLength: number;
  parent?: Line;
  /** The messages the lists of this line share with those of `parent`. */
  shared?: number;
  /** For a line started by a removal (`removed`): what was removed from which list. */
  removal?: Removal;
}

/** A removal a line started with: from the list of `fromLength` messages on `from`, the messages at `positions`, leaving `keptLength`. */
interface Removal {
  from: Line;
  fromLength: number;
  keptLength: number;
  positions: readonly number[];
}

/** Lines a chain keeps above its newest (`sharedPrefix` walks them): rewinds and forks of a long-lived conversation each branch a line. */
const maxLineDepth = 16;

export class MessageListLineage {
  private readonly lines = new WeakMap<readonly Message[], Line>();

  /** Records that `extended` is `base` followed by more messages. */
  appended(base: readonly Message[], extended: readonly Message[]): void {
    let line = this.lines.get(base);
    if (line === undefined || line.tipLength !== base.length) {
      // A branch: base keeps its place in the old line, the new line remembers what it shares with it.
      line = line === undefined ? { tipLength: base.length } : { tipLength: base.length, parent: line, shared: base.length };
      this.lines.set(base, line);
      // Only the nearest lines above are kept: the chain is cut past `maxLineDepth` (what an old
      // ancestor shared is then not known, and a caller compares elements instead, as before).
      let above: Line = line;
      for (let depth = 0; depth < maxLineDepth && above.parent !== undefined; depth++) above = above.parent;
      above.parent = undefined;
    }
    line.tipLength = extended.length;
    this.lines.set(extended, line);
  }

  /**
   * Records that `prefix` is the first `prefix.length` messages of `base` (the same objects), so
   * that `extends(base, prefix)` answers true in constant time: what lets a rewind's write and the
   * indexes kept beside a state follow a truncation at the cost of the messages it dropped.
   */
  truncated(base: readonly Message[], prefix: readonly Message[]): void {
    if (prefix === base || prefix.length > base.length) return;
    let line = this.lines.get(base);
    if (line === undefined) this.lines.set(base, (line = { tipLength: base.length }));
    this.lines.set(prefix, line);
  }

  /**
   * Records that `kept` is `base` without the messages at `positions` (ascending): `kept` starts a
   * line branched off `base`'s after the first removed message (what `sharedPrefix` answers), and
   * `removalFrom` tells it and the lists appended to it from `base` by those positions. A removal
   * of `base`'s last messages is a truncation (`truncated`). What lets the indexes kept beside a
   * state follow a removal at the cost of the removed messages.
   */
  removed(base: readonly Message[], kept: readonly Message[], positions: readonly number[]): void {
    const first = positions[0];
    if (first === undefined || (positions.at(-1) === base.length - 1 && positions.length === base.length - first)) {
      this.truncated(base, kept);
      return;
    }
    const from = this.lineOf(base) as Line;
    const line: Line = { tipLength: kept.length, parent: from, shared: first, removal: { from, fromLength: base.length, keptLength: kept.length, positions } };
    let above: Line = line;
    for (let depth = 0; depth < maxLineDepth && above.parent !== undefined; depth++) above = above.parent;
    above.parent = undefined;
    this.lines.set(kept, line);
  }

  /**
   * The positions removed from `base` when `list` is known to be `base` without them followed by
   * zero or more messages (`removed`, then appends); undefined when not known.
   */
  removalFrom(list: readonly Message[], base: readonly Message[]): readonly number[] | undefined {
    const removal = this.lines.get(list)?.removal;
    if (removal === undefined || list.length < removal.keptLength) return undefined;
    return this.lines.get(base) === removal.from && base.length === removal.fromLength ? removal.positions : undefined;
  }

  /**
   * The line `list` belongs to, started with `list` as its tip when it has none: a token that holds
   * no list, for `extendsLine` once the list itself may be gone.
   */
  lineOf(list: readonly Message[]): object {
    let line = this.lines.get(list);
    if (line === undefined) {
      line = { tipLength: list.length };
      this.lines.set(list, line);
    }
    return line;
  }

  /**
   * True when `list` is known to start with a list of `length` messages that belonged to `line`
   * (every list of a line is a prefix of its tip, and tips only grow), also when `list` is on a
   * line branched off `line` (or off one branched off it) after those messages: a fork's lists and
   * its source's, each appended to, still start with what they shared.
   */
  extendsLine(list: readonly Message[], line: object, length: number): boolean {
    let shared = list.length;
    for (let on = this.lines.get(list); on !== undefined; on = on.parent) {
      if (on === line) return shared >= length;
      shared = Math.min(shared, on.shared ?? 0);
    }
    return false;
  }

  /**
   * How many first messages `a` and `b` are known to share (the same objects): their common
   * length on one line, and across lines the part up to where one branched off a line the other
   * is on (or both off a common one); 0 when not known. Why: a fork and its source each append
   * to the lists they share, and an encoder's marks of 100,000 shared messages were made again
   * at every commit of either side (13 ms each, CPU profile of the memory store's fork commits).
   */
  sharedPrefix(a: readonly Message[], b: readonly Message[]): number {
    if (a === b) return a.length;
    const lineOfA = this.lines.get(a);
    const lineOfB = this.lines.get(b);
    if (lineOfA === undefined || lineOfB === undefined) return 0;
    // The lines above a, each with what a shares with its lists.
    const above = new Map<Line, number>();
    let shared = a.length;
    for (let line: Line | undefined = lineOfA; line !== undefined; line = line.parent) {
      above.set(line, shared);
      shared = Math.min(shared, line.shared ?? 0);
    }
    shared = b.length;
    for (let line: Line | undefined = lineOfB; line !== undefined; line = line.parent) {
      const ofA = above.get(line);
      if (ofA !== undefined) return Math.min(ofA, shared);
      shared = Math.min(shared, line.shared ?? 0);
    }
    return 0;
  }

  /** True when `list` is known to be `base` followed by zero or more messages. */
  extends(list: readonly Message[], base: readonly Message[]): boolean {
    if (list === base) return true;
    const line = this.lines.get(list);
    return line !== undefined && line === this.lines.get(base) && list.length >= base.length;
  }
}
