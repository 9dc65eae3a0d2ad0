import { CompileResultPart, type CompileRequest } from "#gen/contextd/v1/compile_pb";
import { Role, type Message } from "#gen/contextd/v1/message_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import { analyzeToolRoundsFrom, toolResultsOf } from "../model/tool-rounds.js";
import type { ElidedHead } from "./elided-head.js";
import { headElisionAllowed } from "./history-head.js";

/**
 * What a store's entries say about the history up to and including one of them (written by the
 * commit that stored it; see the codec's `StoredTokenCounts`): valid while the segment's epoch is
 * the one it was written under.
 */
export interface StoredRunningFacts {
  /** Tokens of messages [0, i] under the stored estimator. */
  tokens: number;
  /** Text characters (`textCharacters`) of messages [0, i]. */
  characters: number;
  /** Whether the whole history as the commit that wrote the entry left it was clean (`HistoryFacts.clean`). */
  clean: boolean;
  epoch: bigint;
}

/** The tail of a stored history as a window read gives it (`ConversationStore.readWindow`). */
export interface StoredTail {
  /** Messages [start, length) of the history. */
  messages: readonly Message[];
  start: number;
  length: number;
  /** Parallel to `messages`. */
  running: readonly (StoredRunningFacts | undefined)[];
  /** The history's epoch at the window's version. */
  epoch: bigint;
  /** The history's first message (the window starts after it). */
  first: Message | undefined;
}

/**
 * The head `elideHistoryHead` would leave out of a compile of the whole stored history, planned
 * from its tail and what the tail's entries say about the head, so a compile on a process that has
 * never seen the conversation reads and counts only what its budget may keep. "wider" when the
 * window is too short to decide (the cut, or the latest user message, may lie before it: read more
 * of the tail); undefined when the compile must see the whole history (the head cannot be left out,
 * or the stored facts cannot say: read it all).
 *
 * Beyond `elideHistoryHead`'s own conditions, this one holds only where the head's part of them
 * follows from what the store guarantees and the entries record: no current turn, scratch,
 * artifacts, experiences or request segments (ids the store does not keep distinct from the
 * history's: the stored system, memory and tools ids are, since a commit refuses an id used
 * anywhere in the conversation), no part copying the history (source, snapshots), the estimator
 * the entries were counted with (`storedKey`), and running facts valid under the window's epoch at
 * the cut and at the end.
 */
export function planStoredHead(
  request: CompileRequest,
  parts: ReadonlySet<CompileResultPart>,
  state: ConversationState,
  tail: StoredTail,
  estimatorKey: string,
  storedKey: string | undefined,
  /** The stored count of a message of the tail under `storedKey`. */
  storedCount: (message: Message) => number | undefined,
  /** The budget's limit as the budget stage will apply it (`calibratedLimit`). */
  limit: number,
): { head: ElidedHead; tailFrom: number } | "wider" | undefined {
  if (!headElisionAllowed(request, parts) || storedKey !== estimatorKey) return undefined;
  if (parts.has(CompileResultPart.SOURCE) || parts.has(CompileResultPart.NORMALIZED_SNAPSHOT) || parts.has(CompileResultPart.WRITEBACK_SNAPSHOT)) return undefined;
  if (request.history || request.system || request.memory || request.tools || request.currentTurn || request.scratch.length > 0) return undefined;
  if (request.artifacts.length > 0 || state.artifacts.length > 0 || (request.experiences ? request.experiences.experiences : state.experiences).length > 0) return undefined;
  const { messages, start, length, running } = tail;
  if (length < 2 || start === 0 || tail.first === undefined || messages.length !== length - start) return undefined;
  const facts = (index: number) => {
    const entry = running[index - start];
    return entry !== undefined && entry.epoch === tail.epoch ? entry : undefined;
  };
  const last = facts(length - 1);
  if (!last || !last.clean) return undefined;
  const total = last.tokens;
  // Everything fits: the compile keeps (or trims inside) the whole history.
  if (total <= limit) return undefined;
  // A clean history's units start at every message that carries no tool result; the first such
  // message of the window starts one, and the analysis from it finds the others.
  let firstUnit = 0;
  while (firstUnit < messages.length && toolResultsOf(messages[firstUnit]!).length > 0) firstUnit++;
  if (firstUnit === messages.length) return "wider";
  const analysis = analyzeToolRoundsFrom(messages, firstUnit, { allowOpenTail: true });
  if (analysis.violations.length > 0) return undefined;
  const unitStarts = analysis.units.map((unit) => start + unit.start);
  // The last unit start whose tail has more tokens than the limit; only starts after the window's
  // first message have the facts of the message before them in the window.
  let cut = -1;
  for (let index = unitStarts.length - 1; index >= 0; index--) {
    const unitStart = unitStarts[index]!;
    if (unitStart === start) break;
    const before = facts(unitStart - 1);
    if (!before) return undefined;
    if (total - before.tokens > limit) {
      cut = unitStart;
      break;
    }
  }
  if (cut < 0) return "wider";
  if (!request.budget!.trimLatestUserMessage) {
    let lastUser = messages.length - 1;
    while (lastUser >= 0 && messages[lastUser]!.role !== Role.USER) lastUser--;
    if (lastUser < firstUnit) return "wider";
    let unitOfUser = 0;
    for (const unit of analysis.units) if (unit.start <= lastUser) unitOfUser = start + unit.start;
    cut = Math.min(cut, unitOfUser);
    if (cut <= start) return "wider";
  }
  const head = facts(cut - 1);
  if (!head) return undefined;
  const tailCounts: number[] = [];
  for (let index = cut - start; index < messages.length; index++) {
    const count = storedCount(messages[index]!);
    if (count === undefined) return undefined;
    tailCounts.push(count);
  }
  return {
    head: { firstId: tail.first.id, lastId: messages[cut - 1 - start]!.id, count: cut, tokens: head.tokens, characters: head.characters, tailCounts },
    tailFrom: cut - start,
  };
}
