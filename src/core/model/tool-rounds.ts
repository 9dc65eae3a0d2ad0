import { Code, ConnectError } from "@connectrpc/connect";
import { Role, type Message, type ToolCallPart, type ToolResultPart } from "#gen/contextd/v1/message_pb";
import { ErrorReason, withErrorDetails } from "./error-details.js";

/**
 * The rules of a valid tool round (semantics §1), as named in errors and repair records.
 * - `tool_call_outside_assistant`: a tool_call part in a message whose role is not ASSISTANT.
 * - `tool_call_without_id`: a call with an empty id.
 * - `duplicate_tool_call_id`: a call id used twice in one round (ids need be unique only within
 *   their round: servers that answer `call_0` on every turn are normal, semantics §1).
 * - `tool_result_not_in_tool_message`: a message carrying tool_result parts whose role is not TOOL.
 * - `tool_message_without_result`: a TOOL message without any tool_result part.
 * - `tool_result_without_call`: a TOOL message that does not follow a tool round ("no calls").
 * - `tool_result_empty_call_id`, `tool_result_unknown_call_id`, `tool_result_duplicate_call_id`:
 *   a result whose call id is empty, not a call of its round, or already answered.
 * - `incomplete_tool_round`: a round followed by another message before every call was answered.
 * - `open_tool_round_not_last`: an open round (results still missing) in a sequence that does not
 *   allow one at its tail.
 */
export type ToolRoundRule =
  | "tool_call_outside_assistant"
  | "tool_call_without_id"
  | "duplicate_tool_call_id"
  | "tool_result_not_in_tool_message"
  | "tool_message_without_result"
  | "tool_result_without_call"
  | "tool_result_empty_call_id"
  | "tool_result_unknown_call_id"
  | "tool_result_duplicate_call_id"
  | "incomplete_tool_round"
  | "open_tool_round_not_last";

/**
 * The rules about how results pair with calls, as opposed to the shape of a message. A conversation
 * breaks them in normal flows (a user message while an approval is pending, a detached resume whose
 * result never arrives here, a result stored without its call), so a commit stores them and the
 * compile repairs them for the provider it renders (`prompt-tool-round-repair.ts`); in strict mode
 * (`--strict-tool-rounds`) a commit refuses them as before.
 */
export const pairingRules: ReadonlySet<ToolRoundRule> = new Set<ToolRoundRule>([
  "tool_result_without_call",
  "tool_result_empty_call_id",
  "tool_result_unknown_call_id",
  "tool_result_duplicate_call_id",
  "incomplete_tool_round",
  "open_tool_round_not_last",
]);

/**
 * What a check refuses: `allowOpenTail` lets the last unit be an open round; `tolerated` names rules
 * that are not refused (the pairing rules for a lenient history).
 */
export interface ToolRoundCheck {
  allowOpenTail: boolean;
  tolerated?: ReadonlySet<ToolRoundRule>;
}

/** One broken rule, located by message index (in the analysed sequence) and id. */
export interface ToolRoundViolation {
  rule: ToolRoundRule;
  /** Index of the offending message in the analysed sequence. */
  index: number;
  /** Id of the offending message ("" when it has none yet). */
  messageId: string;
  /** What exactly is wrong, for the error message. */
  detail: string;
  /** Index into `ToolRoundAnalysis.units` of the unit containing the offending message. */
  unitIndex: number;
}

/**
 * A unit of history: the smallest run of messages that may be kept or dropped on its own. A plain
 * message is a unit of one; a tool round (the ASSISTANT message with calls plus the TOOL messages
 * directly after it) is one unit, so budgeting and removal never separate calls from results.
 */
export interface HistoryUnit {
  /** Index of the first message (inclusive). */
  start: number;
  /** Index after the last message (exclusive). */
  end: number;
  /** Set when the unit is a tool round. */
  round?: ToolRoundShape;
}

/** The calls of a tool round and which of them were answered. */
export interface ToolRoundShape {
  /** The call ids in the order the assistant made them (empty ids included as ""). */
  readonly callIds: readonly string[];
  /** Call names by id (the last call with an id names it), for cancellation texts and repair. */
  readonly callNames: ReadonlyMap<string, string>;
  /** Call ids without a result, in call order. */
  missingCallIds: string[];
  /** True when results are missing and the round is the last unit of the sequence. */
  open: boolean;
}

/** The outcome of `analyzeToolRounds`. */
export interface ToolRoundAnalysis {
  units: HistoryUnit[];
  /** Every broken rule, in message order. Empty when the sequence is valid. */
  violations: ToolRoundViolation[];
  /** The open round at the tail, if any (allowed only where the caller says so). */
  openRound?: HistoryUnit & { round: ToolRoundShape };
}

/** The tool_call parts of a message, in order. */
export function toolCallsOf(message: Message): ToolCallPart[] {
  const calls: ToolCallPart[] = [];
  for (const part of message.parts) if (part.kind.case === "toolCall") calls.push(part.kind.value);
  return calls;
}

/** The tool_result parts of a message, in order. */
export function toolResultsOf(message: Message): ToolResultPart[] {
  const results: ToolResultPart[] = [];
  for (const part of message.parts) if (part.kind.case === "toolResult") results.push(part.kind.value);
  return results;
}

/** True for an ASSISTANT message with at least one tool call: the start of a tool round. */
export function opensToolRound(message: Message): boolean {
  return message.role === Role.ASSISTANT && hasPartOfKind(message, "toolCall");
}

function carriesToolResults(message: Message): boolean {
  return message.role === Role.TOOL || hasPartOfKind(message, "toolResult");
}

// A plain loop: `parts.some(callback)` allocates a closure per call, and the analysis asks this
// several times for every message of a history at every compile.
function hasPartOfKind(message: Message, kind: "toolCall" | "toolResult"): boolean {
  const parts = message.parts;
  for (let index = 0; index < parts.length; index++) if (parts[index]!.kind.case === kind) return true;
  return false;
}

/**
 * Splits a message sequence (history, or history followed by pending) into units and checks every
 * tool-round rule of semantics §1. Never throws: callers decide between rejecting
 * (`assertValidToolRounds`) and repairing. An open round at the tail is reported in `openRound`,
 * and as an `open_tool_round_not_last` violation only when `allowOpenTail` is false.
 */
export function analyzeToolRounds(messages: readonly Message[], options: { allowOpenTail: boolean }): ToolRoundAnalysis {
  return analyzeToolRoundsFrom(messages, 0, options);
}

/**
 * `analyzeToolRounds` from the unit starting at `from`, through the unit starting at or before
 * `until` that the scan reaches last (to the end by default). Units and violations carry indices into
 * `messages`; `unitIndex` counts from the first unit scanned. Call ids are unique per round, so
 * nothing before `from` can make a call after it a duplicate.
 */
export function analyzeToolRoundsFrom(messages: readonly Message[], from: number, options: { allowOpenTail: boolean }, until = Number.POSITIVE_INFINITY): ToolRoundAnalysis {
  const units: HistoryUnit[] = [];
  const violations: ToolRoundViolation[] = [];
  let openRound: ToolRoundAnalysis["openRound"];
  const report = (rule: ToolRoundRule, index: number, detail: string) =>
    violations.push({ rule, index, messageId: messages[index]!.id, detail, unitIndex: units.length });

  let index = from;
  while (index < messages.length && index <= until) {
    const message = messages[index]!;
    const hasCalls = hasPartOfKind(message, "toolCall");
    if (message.role !== Role.ASSISTANT && hasCalls) {
      report("tool_call_outside_assistant", index, `a ${Role[message.role] ?? message.role} message carries a tool_call part`);
    }
    if (message.role !== Role.ASSISTANT || !hasCalls) {
      if (carriesToolResults(message)) {
        report("tool_result_without_call", index, "a tool result that does not follow an assistant message with tool calls");
      }
      units.push({ start: index, end: index + 1 });
      index++;
      continue;
    }

    const calls = new RoundCalls();
    for (const part of message.parts) {
      if (part.kind.case !== "toolCall") continue;
      const call = part.kind.value;
      if (call.id === "") report("tool_call_without_id", index, `tool call "${call.name}" has no id`);
      else if (calls.indexOf(call.id) >= 0) report("duplicate_tool_call_id", index, `tool call id "${call.id}" is used more than once in this round`);
      calls.add(call.id, call.name);
    }
    let next = index + 1;
    while (next < messages.length && carriesToolResults(messages[next]!) && !opensToolRound(messages[next]!)) {
      const result = messages[next]!;
      if (result.role !== Role.TOOL) {
        report("tool_result_not_in_tool_message", next, `tool results must be in a TOOL message, not ${Role[result.role] ?? result.role}`);
      }
      let results = 0;
      for (const resultPart of result.parts) {
        if (resultPart.kind.case !== "toolResult") continue;
        results++;
        const part = resultPart.kind.value;
        const call = part.toolCallId === "" ? -1 : calls.indexOf(part.toolCallId);
        if (part.toolCallId === "") report("tool_result_empty_call_id", next, "a tool result with an empty tool_call_id");
        else if (call < 0) {
          report("tool_result_unknown_call_id", next, `tool result for "${part.toolCallId}", which is not a call of the round opened by message ${index}`);
        } else if (!calls.answer(call)) {
          report("tool_result_duplicate_call_id", next, `tool call "${part.toolCallId}" is answered more than once`);
        }
      }
      if (results === 0) report("tool_message_without_result", next, "a TOOL message without a tool_result part");
      next++;
    }
    const missingCallIds = calls.unanswered();
    const atTail = next === messages.length;
    const round: ToolRoundShape = new RoundShape(calls, missingCallIds, missingCallIds.length > 0 && atTail);
    if (missingCallIds.length > 0) {
      if (!atTail) {
        report("incomplete_tool_round", index, `tool calls ${quoteList(missingCallIds)} have no result before message ${next}`);
      } else if (!options.allowOpenTail) {
        report("open_tool_round_not_last", index, `tool calls ${quoteList(missingCallIds)} are still open`);
      }
    }
    const unit = { start: index, end: next, round };
    if (round.open) openRound = unit;
    units.push(unit);
    index = next;
  }
  return { units, violations, openRound };
}

/**
 * Throws INVALID_ARGUMENT for the first broken tool-round rule that `check` refuses, naming the
 * rule, the field path with the index, and the message id: `invalid tool round
 * (duplicate_tool_call_id) at history[3] (message "m4"): ...`. `fieldPath` names the analysed
 * sequence, for example "history" or "deltas[2].messages".
 */
export function assertValidToolRounds(messages: readonly Message[], fieldPath: string, check: ToolRoundCheck): ToolRoundAnalysis {
  const analysis = analyzeToolRounds(messages, check);
  const violation = firstRefused(analysis.violations, check);
  if (violation) throw toolRoundError(violation, fieldPath);
  return analysis;
}

/** The first violation `check` does not tolerate. */
function firstRefused(violations: readonly ToolRoundViolation[], check: ToolRoundCheck): ToolRoundViolation | undefined {
  const tolerated = check.tolerated;
  if (!tolerated) return violations[0];
  for (const violation of violations) if (!tolerated.has(violation.rule)) return violation;
  return undefined;
}

/**
 * Sequences known to pass `assertValidToolRounds`, per check (whether it allowed an open round at
 * the tail, and which rules it tolerated). Sequences are never modified (states are immutable), so
 * the fact holds for as long as the array lives.
 */
const validSequences = new Map<string, WeakSet<readonly Message[]>>();

function validSequencesFor(check: ToolRoundCheck): WeakSet<readonly Message[]> {
  const key = `${check.allowOpenTail}:${check.tolerated ? [...check.tolerated].join(",") : ""}`;
  let sequences = validSequences.get(key);
  if (!sequences) validSequences.set(key, (sequences = new WeakSet()));
  return sequences;
}

/**
 * `assertValidToolRounds(messages, …)` where `messages` starts with the elements of `prefix`: the
 * same error, or none. When `prefix` passed this check before (with the same check), only its last
 * unit — which the new messages may continue — and what follows are analysed again: call ids are
 * unique per round, so nothing before that unit bears on the new messages. A commit appends one
 * or two messages to a long history, and analysing all of it cost ~25 µs per commit at 1,000
 * messages.
 */
export function assertValidExtension(prefix: readonly Message[], messages: readonly Message[], fieldPath: string, check: ToolRoundCheck): void {
  const valid = validSequencesFor(check);
  if (prefix.length > 0 && !valid.has(prefix)) {
    assertValidToolRounds(messages, fieldPath, check);
    valid.add(messages);
    return;
  }
  // The last unit of `prefix` starts at its last message that is not a result continuing a round.
  let from = prefix.length - 1;
  while (from > 0 && carriesToolResults(prefix[from]!) && !opensToolRound(prefix[from]!)) from--;
  from = Math.max(from, 0);
  const violation = firstRefused(analyzeToolRoundsFrom(messages, from, check).violations, check);
  if (violation) throw toolRoundError(violation, fieldPath);
  valid.add(messages);
}

/**
 * Checks `kept`, which is `base` without the messages at `positions` (ascending, whole units as
 * `removeMessages` takes them), against `check`, and records it as passing. When `base` passed
 * before, only the units around each place messages were taken from are analysed: the rest are
 * the units they were, and what followed a gap may now continue the round before it (a TOOL
 * message standing alone after a plain message joins the round before that message once it goes,
 * and is then held to a round's rules). Otherwise all of `kept` is.
 */
export function assertValidRemoval(base: readonly Message[], kept: readonly Message[], positions: readonly number[], fieldPath: string, check: ToolRoundCheck): void {
  const valid = validSequencesFor(check);
  if (!valid.has(base)) {
    assertValidToolRounds(kept, fieldPath, check);
    valid.add(kept);
    return;
  }
  // Every unit before `checkedTo` was analysed; no walk goes back past it.
  let checkedTo = 0;
  let previousGap = -1;
  for (let index = 0; index < positions.length; index++) {
    const gap = positions[index]! - index;
    if (gap === previousGap || gap < checkedTo) continue;
    previousGap = gap;
    // From the unit before the gap, unless the last analysis ended at the gap (then it is a boundary).
    let from = Math.max(gap - 1, checkedTo);
    while (from > checkedTo && continuesRound(kept[from]!)) from--;
    const analysis = analyzeToolRoundsFrom(kept, from, check, gap);
    const violation = firstRefused(analysis.violations, check);
    if (violation) throw toolRoundError(violation, fieldPath);
    checkedTo = analysis.units.at(-1)?.end ?? from;
  }
  valid.add(kept);
}

/**
 * The units of `messages` holding a message at one of `positions` (ascending), in order, each
 * once: from each position back to where its unit starts (the nearest message that continues no
 * round, which always starts one) and forward to the unit's end. Costs the units walked, never
 * going back past the unit found before, not the whole sequence.
 */
export function unitsHolding(messages: readonly Message[], positions: readonly number[]): HistoryUnit[] {
  const units: HistoryUnit[] = [];
  let walkedTo = 0;
  for (const position of positions) {
    if (position < walkedTo) continue;
    let start = position;
    while (start > walkedTo && continuesRound(messages[start]!)) start--;
    let unit = unitAt(messages, start);
    while (unit.end <= position) unit = unitAt(messages, unit.end);
    units.push(unit);
    walkedTo = unit.end;
  }
  return units;
}

/** The unit starting at `start`: a round through the results that continue it, else the message alone (as `analyzeToolRoundsFrom` splits them). */
function unitAt(messages: readonly Message[], start: number): HistoryUnit {
  if (!opensToolRound(messages[start]!)) return { start, end: start + 1 };
  let end = start + 1;
  while (end < messages.length && continuesRound(messages[end]!)) end++;
  return { start, end };
}

/** Whether `message` belongs to the round before it when one is open there: it carries results and opens no round. */
function continuesRound(message: Message): boolean {
  return carriesToolResults(message) && !opensToolRound(message);
}

/**
 * Records that `prefix`, a head of `messages` (the same elements), passes `check` when `messages`
 * is known to and `check` allows an open round at the tail: cutting a sequence can leave only its
 * last round open, so such a check holds for every head of what it passed. What lets the commit
 * after a rewind check only what it appends (the whole 100,000-message history was analysed again).
 */
export function trustHead(messages: readonly Message[], prefix: readonly Message[], check: ToolRoundCheck): void {
  if (!check.allowOpenTail || prefix.length > messages.length) return;
  const valid = validSequencesFor(check);
  if (valid.has(messages)) valid.add(prefix);
}

/** The INVALID_ARGUMENT error for one violation (shared by rejecting callers so wording is uniform). */
export function toolRoundError(violation: ToolRoundViolation, fieldPath: string): ConnectError {
  const id = violation.messageId === "" ? "" : ` (message "${violation.messageId}")`;
  const message = `invalid tool round (${violation.rule}) at ${fieldPath}[${violation.index}]${id}: ${violation.detail}`;
  return withErrorDetails(new ConnectError(message, Code.InvalidArgument), ErrorReason.toolRoundInvalid, {
    metadata: { rule: violation.rule },
    fieldViolations: [{ field: `${fieldPath}[${violation.index}]`, description: message }],
  });
}

/**
 * Checks that `assistant` followed by `results` is one complete tool round (for
 * `append_tool_round`): the assistant opens a round, every result message belongs to it, and every
 * call is answered exactly once. Throws INVALID_ARGUMENT naming the rule.
 */
export function assertCompleteToolRound(assistant: Message, results: readonly Message[], fieldPath: string): void {
  if (!opensToolRound(assistant)) {
    const message = `invalid tool round (tool_round_without_calls) at ${fieldPath}.assistant: an ASSISTANT message with at least one tool call is required`;
    throw withErrorDetails(new ConnectError(message, Code.InvalidArgument), ErrorReason.toolRoundInvalid, {
      metadata: { rule: "tool_round_without_calls" },
      fieldViolations: [{ field: `${fieldPath}.assistant`, description: message }],
    });
  }
  const analysis = assertValidToolRounds([assistant, ...results], fieldPath, { allowOpenTail: false });
  if (analysis.units.length !== 1) {
    const stray = analysis.units[1]!;
    const message = `invalid tool round (tool_result_without_call) at ${fieldPath}.results[${stray.start - 1}]: the message is not a result of this round`;
    throw withErrorDetails(new ConnectError(message, Code.InvalidArgument), ErrorReason.toolRoundInvalid, {
      metadata: { rule: "tool_result_without_call" },
      fieldViolations: [{ field: `${fieldPath}.results[${stray.start - 1}]`, description: message }],
    });
  }
}

/**
 * The open round at the end of `messages` (an ASSISTANT message whose calls are not all answered
 * yet), or undefined. Used by `append_tool_result`, `append_user` and `cancel_tool_calls`.
 */
export function findOpenToolRound(messages: readonly Message[]): (HistoryUnit & { round: ToolRoundShape }) | undefined {
  // Only the last unit can be open, so scan back to the last round start instead of the whole list.
  let start = messages.length - 1;
  while (start >= 0 && !opensToolRound(messages[start]!)) {
    if (!carriesToolResults(messages[start]!)) return undefined;
    start--;
  }
  if (start < 0) return undefined;
  const analysis = analyzeToolRounds(messages.slice(start), { allowOpenTail: true });
  const open = analysis.openRound;
  if (!open || analysis.units.length !== 1) return undefined;
  return { ...open, start: open.start + start, end: open.end + start };
}

/**
 * The calls of one round: ids and names in call order, which of them were answered, and lookup of
 * the first call with an id. Rounds have a handful of calls, so lookup scans the ids until there
 * are many; per round that is cheaper than the Sets and Map it replaces, and a 1,000-message
 * history has hundreds of rounds.
 */
class RoundCalls {
  /** Past this many calls, lookup goes through a Map. */
  private static readonly scanLimit = 16;
  readonly ids: string[] = [];
  readonly names: string[] = [];
  /** Per call index; only first calls with an id are ever marked. */
  private readonly answered: boolean[] = [];
  private byId?: Map<string, number>;

  add(id: string, name: string): void {
    const index = this.ids.push(id) - 1;
    this.names.push(name);
    this.answered.push(false);
    if (this.byId) {
      if (!this.byId.has(id)) this.byId.set(id, index);
    } else if (this.ids.length > RoundCalls.scanLimit) {
      this.byId = new Map();
      // Backwards, so the first call of an id is what the map keeps.
      for (let at = this.ids.length - 1; at >= 0; at--) this.byId.set(this.ids[at]!, at);
    }
  }

  /** Index of the first call with `id` (non-empty), or -1. */
  indexOf(id: string): number {
    if (this.byId) return this.byId.get(id) ?? -1;
    return this.ids.indexOf(id);
  }

  /** Marks call `index` answered; false when it already was. */
  answer(index: number): boolean {
    if (this.answered[index]) return false;
    this.answered[index] = true;
    return true;
  }

  /** The non-empty ids without a result, each once, in first-call order. */
  unanswered(): string[] {
    const missing: string[] = [];
    for (let index = 0; index < this.ids.length; index++) {
      const id = this.ids[index]!;
      if (id !== "" && !this.answered[index] && this.indexOf(id) === index) missing.push(id);
    }
    return missing;
  }
}

// The names map is built on first use: only repair and the open-round mutations ask for it.
class RoundShape implements ToolRoundShape {
  readonly callIds: readonly string[];
  private names?: Map<string, string>;

  constructor(
    private readonly calls: RoundCalls,
    readonly missingCallIds: string[],
    readonly open: boolean,
  ) {
    this.callIds = calls.ids;
  }

  get callNames(): ReadonlyMap<string, string> {
    if (!this.names) {
      this.names = new Map();
      for (let index = 0; index < this.calls.ids.length; index++) this.names.set(this.calls.ids[index]!, this.calls.names[index]!);
    }
    return this.names;
  }
}

function quoteList(ids: readonly string[]): string {
  return ids.map((id) => `"${id}"`).join(", ");
}
