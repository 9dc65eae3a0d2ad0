import type { Message } from "#gen/contextd/v1/message_pb";
import type { RunningFacts, StoredTokenCounts } from "../codec/stored-token-counts.js";
import { wellFormedStored } from "../core/compile/history-facts.js";
import { textCharacters } from "../core/compile/text-allowance.js";
import { analyzeToolRoundsFrom, toolResultsOf } from "../core/model/tool-rounds.js";

/**
 * The running facts (`RunningFacts`) of the history entries a commit writes, in the order of
 * `edit.messages`, or undefined when it writes them without: what a reader of the tail needs to
 * know about the head. Computed from the state the commit holds, in time proportional to what it
 * writes (an append continues from the facts through the old last message; a whole rewrite counts
 * what it writes anyway). Left out, so that readers fall back to a whole read, when
 * - the edit keeps a suffix or part of the old list (its kept entries' facts are stale anyway);
 * - an append's old last message has no known facts under the segment's current epoch and they
 *   cannot be computed from the counts known (`factsFromCounts`);
 * - a message is stored without a token count (no estimator, or too long to count at commit).
 * `epoch` is the segment's `_at` after the write. The facts through the new last message are
 * remembered for `after`, which the next commit's base will be.
 */
export function runningFactsOfWrite(
  counts: StoredTokenCounts,
  before: readonly Message[],
  after: readonly Message[],
  edit: { keepPrefix: boolean; keep: number; messages: readonly Message[] },
  epoch: bigint,
): (RunningFacts | undefined)[] | undefined {
  if (!edit.keepPrefix || counts.estimator === undefined) return undefined;
  let previous: RunningFacts | undefined;
  if (edit.keep > 0) {
    if (edit.keep !== before.length) return undefined;
    previous = counts.runningOf(before);
    // Unknown (the list was rewritten, e.g. compacted): the appended entries' facts are computed
    // over the whole list once, from the counts already known (no message of the old list is
    // counted again here), so the facts resume after a rewrite.
    if (previous === undefined || previous.epoch !== epoch) previous = factsFromCounts(counts, before, epoch);
    if (previous === undefined) return undefined;
  }
  const from = edit.keep;
  // Whether the history stays clean: each new message well formed, and the tool rounds from the
  // old last unit on valid with an open round allowed at the tail (call ids are unique in a
  // segment: the store refuses duplicates, so nothing before that unit can clash).
  let clean = previous?.clean ?? true;
  if (clean) {
    for (let index = from; index < after.length && clean; index++) clean = wellFormedStored(after[index]!) && after[index]!.id !== "";
    if (clean) {
      let unitStart = from;
      while (unitStart > 0 && toolResultsOf(after[unitStart]!).length > 0 && unitStart > from - 64) unitStart--;
      // A round longer than 64 messages back is not looked for: the facts stop here (rare; readers read whole).
      if (unitStart > 0 && toolResultsOf(after[unitStart]!).length > 0) return undefined;
      clean = analyzeToolRoundsFrom(after, unitStart, { allowOpenTail: true }).violations.length === 0;
    }
  }
  const facts: RunningFacts[] = [];
  let tokens = previous?.tokens ?? 0;
  let characters = previous?.characters ?? 0;
  for (let index = from; index < after.length; index++) {
    const message = after[index]!;
    const count = counts.storedCount(message);
    if (count === undefined) return undefined;
    tokens += count;
    characters += textCharacters([message]);
    facts.push({ tokens, characters, clean, epoch });
  }
  counts.rememberRunning(after, facts[facts.length - 1] ?? previous);
  return facts;
}

/**
 * Messages of an old list `factsFromCounts` counts when their count is unknown (written by a
 * process with another `--stored-token-estimator`, or before counts were stored): a few are
 * counted once, a whole uncounted history is not (readers read it whole until it is rewritten).
 */
const maxRecountedMessages = 256;

/** The running facts through the last message of `list`, from known counts (and at most `maxRecountedMessages` counted now); undefined past that. */
function factsFromCounts(counts: StoredTokenCounts, list: readonly Message[], epoch: bigint): RunningFacts | undefined {
  const key = counts.cacheKey!;
  let tokens = 0;
  let characters = 0;
  let clean = true;
  let recounted = 0;
  for (const message of list) {
    let count = counts.countOf(message, key);
    if (count === undefined && ++recounted <= maxRecountedMessages) count = counts.storedCount(message);
    if (count === undefined) return undefined;
    tokens += count;
    characters += textCharacters([message]);
    if (clean && (!wellFormedStored(message) || message.id === "")) clean = false;
  }
  if (clean) clean = analyzeToolRoundsFrom(list, 0, { allowOpenTail: true }).violations.length === 0;
  return { tokens, characters, clean, epoch };
}

/**
 * The stored facts of a window of a history this process holds whole (a cached copy that is
 * current), as a window read would give them: the running facts of each window entry, derived
 * back from those through the last message (`StoredTokenCounts.runningOf`) and the messages'
 * counts; undefined when they are not known under `epoch`.
 */
export function heldWindowFacts(
  counts: StoredTokenCounts,
  history: readonly Message[],
  start: number,
  stop: number,
  epoch: bigint,
): { running: (RunningFacts | undefined)[]; epoch: bigint; first: Message | undefined } | undefined {
  const last = counts.runningOf(history);
  const key = counts.cacheKey;
  if (last === undefined || last.epoch !== epoch || key === undefined || stop === 0) return undefined;
  const running = new Array<RunningFacts | undefined>(stop - start);
  let { tokens, characters } = last;
  for (let index = history.length - 1; index >= start; index--) {
    if (index < stop) running[index - start] = { tokens, characters, clean: last.clean, epoch };
    const count = counts.countOf(history[index]!, key);
    if (count === undefined) return undefined;
    tokens -= count;
    characters -= textCharacters([history[index]!]);
  }
  return { running, epoch, first: start > 0 ? history[0] : undefined };
}
