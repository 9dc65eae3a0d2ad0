import { Role, type Message, type ToolResultPart } from "#gen/contextd/v1/message_pb";
import { TransformationAction, TransformationReason } from "#gen/contextd/v1/compile_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { cancelledToolResultMessage } from "../model/cancellation.js";
import { analyzeToolRounds, findOpenToolRound, toolCallsOf, toolResultsOf, type ToolRoundRule } from "../model/tool-rounds.js";
import { addWarning, setRecord, type CompileWork } from "./working-set.js";

/** The reason the default repair gives a call it closes (inside the cancelled-result text). */
export const noResultReason = "no result was recorded";

/** At most this many message ids are named per warning; the rest are counted. */
const namedPerWarning = 10;

/**
 * The default tool-round repair (`TOOL_ROUND_REPAIR_UNSPECIFIED`), run on history after the
 * persistence baseline is taken, so it changes the prompt only: stored history and the
 * `persistence` projection keep what the conversation did. A commit stores open rounds anywhere
 * and results without their call (semantics, "Tool rounds"); every provider needs a call's results
 * right after it (OpenAI Responses accepts that order too), so one repair serves all four:
 *
 * - a result pairs with the latest round that made its call and left it unanswered; one that came
 *   late (after other messages) is sent with that round (PASSED, reason TOOL_ROUND_REPAIR);
 * - a call still unanswered when another message follows its round is closed by a cancelled
 *   result (`noResultReason`), introduced but not persisted; the assistant is FORMATTED. The last
 *   round stays open when nothing follows it (the turn in progress; its results may be pending),
 *   unless pending starts with something other than a result, or the current turn comes next;
 * - a TOOL message whose results do not all answer open calls of one round, and messages no
 *   provider takes (see `unrenderable`), are left out of the prompt (DROPPED, reason
 *   TOOL_ROUND_REPAIR, listed in `work.keptDespiteDrop` so persistence keeps them).
 *
 * Each kind of change is one "tool_round_repaired" warning naming the messages (the first 10).
 * Linear in history: one pass, one map of open call ids.
 */
export function repairToolRoundsForPrompt(work: CompileWork, randomId: () => string): void {
  const history = work.segments.history;
  const pending = work.pending;
  const closesLastRound = pending.length > 0 ? !carriesResults(pending[0]!) : work.currentTurn !== undefined;
  // Stage 1 found nothing wrong with this history (then only its last round can need closing,
  // found by a walk back over that round alone); else one analysis says whether anything does.
  if (work.validToolRounds === history) {
    if (!closesLastRound || !findOpenToolRound(history)) return;
  } else {
    const analysis = analyzeToolRounds(history, { allowOpenTail: true });
    if (analysis.violations.length === 0 && !(closesLastRound && analysis.openRound)) return;
  }

  // With the stored head left out (history-head.ts), indices are named as in the whole history.
  const offset = work.historyCounts?.history === history ? work.historyCounts.offset : 0;
  const blocks: (Message | RoundBlock)[] = [];
  const openRoundByCallId = new Map<string, RoundBlock>();
  const dropped: { message: Message; index: number; rule: ToolRoundRule; detail: string }[] = [];
  const moved: { message: Message; index: number; round: RoundBlock }[] = [];
  for (let index = 0; index < history.length; index++) {
    const message = history[index]!;
    // Most messages carry no tool part: they pass with no allocation.
    if (message.role !== Role.TOOL && !hasToolPart(message)) {
      blocks.push(message);
      continue;
    }
    const drop = (rule: ToolRoundRule, detail: string) => void dropped.push({ message, index: offset + index, rule, detail });
    const calls = toolCallsOf(message);
    if (calls.length > 0) {
      const problem = unrenderable(message, calls.map((call) => call.id));
      if (problem) {
        drop(problem.rule, problem.detail);
        continue;
      }
      const round: RoundBlock = { assistant: message, index: offset + index, results: [], calls: calls.map((call) => ({ id: call.id, name: call.name })), unanswered: new Set(calls.map((call) => call.id)) };
      blocks.push(round);
      for (const call of calls) openRoundByCallId.set(call.id, round);
      continue;
    }
    const results = toolResultsOf(message);
    if (message.role !== Role.TOOL) {
      drop("tool_result_not_in_tool_message", `a ${Role[message.role] ?? message.role} message carries tool results`);
      continue;
    }
    if (results.length === 0) {
      drop("tool_message_without_result", "a TOOL message without a tool_result part");
      continue;
    }
    const round = roundAnsweredBy(results, openRoundByCallId);
    if (typeof round === "string") {
      drop("tool_result_without_call", round);
      continue;
    }
    for (const result of results) {
      round.unanswered.delete(result.toolCallId);
      openRoundByCallId.delete(result.toolCallId);
    }
    if (round !== blocks[blocks.length - 1]) moved.push({ message, index: offset + index, round });
    round.results.push(message);
  }

  const repaired: Message[] = [];
  const closed: { round: RoundBlock; callIds: string[] }[] = [];
  blocks.forEach((block, position) => {
    if (!isRound(block)) return void repaired.push(block);
    repaired.push(block.assistant, ...block.results);
    const last = position === blocks.length - 1;
    if (block.unanswered.size === 0 || (last && !closesLastRound)) return;
    const callIds = block.calls.filter((call) => block.unanswered.has(call.id)).map((call) => call.id);
    for (const call of block.calls) {
      if (!block.unanswered.has(call.id)) continue;
      const id = closingId(work, block.assistant.id, call.id, randomId);
      const message = { ...cancelledToolResultMessage(call.id, call.name, noResultReason), id };
      setRecord(work, id, TransformationAction.PASSED, TransformationReason.TOOL_ROUND_REPAIR, Segment.HISTORY);
      work.introduced.push({ $typeName: "contextd.v1.IntroducedMessage", segment: Segment.HISTORY, message });
      repaired.push(message);
    }
    setRecord(work, block.assistant.id, TransformationAction.FORMATTED, TransformationReason.TOOL_ROUND_REPAIR, Segment.HISTORY);
    closed.push({ round: block, callIds });
  });

  for (const { message } of moved) setRecord(work, message.id, TransformationAction.PASSED, TransformationReason.TOOL_ROUND_REPAIR, Segment.HISTORY);
  for (const { message } of dropped) {
    setRecord(work, message.id, TransformationAction.DROPPED, TransformationReason.TOOL_ROUND_REPAIR, Segment.HISTORY);
    (work.keptDespiteDrop ??= new Set()).add(message.id);
  }
  warn(work, closed, (count) => `closed the unanswered calls of ${count} round(s) with a "${noResultReason}" result`, ({ round, callIds }) => `history[${round.index}] (message "${round.assistant.id}": ${callIds.map((id) => `"${id}"`).join(", ")})`);
  warn(work, moved, (count) => `sent ${count} late result(s) with the round that made the call`, ({ message, index, round }) => `history[${index}] (message "${message.id}", to the round of "${round.assistant.id}")`);
  warn(work, dropped, (count) => `left ${count} message(s) out of the prompt`, ({ message, index, rule, detail }) => `history[${index}] (message "${message.id}", ${rule}: ${detail})`);
  work.segments = { ...work.segments, history: repaired };
}

/** A round as the repair rebuilds it: the assistant, the results that answer it, the calls left. */
interface RoundBlock {
  assistant: Message;
  /** Index of the assistant in history. */
  index: number;
  results: Message[];
  calls: { id: string; name: string }[];
  unanswered: Set<string>;
}

/**
 * The one round whose open calls `results` answer (each once), or why there is none: a call no
 * round left open, answered twice, or results answering two rounds.
 */
function roundAnsweredBy(results: readonly ToolResultPart[], openRoundByCallId: ReadonlyMap<string, RoundBlock>): RoundBlock | string {
  let round: RoundBlock | undefined;
  for (let index = 0; index < results.length; index++) {
    const callId = results[index]!.toolCallId;
    const candidate = openRoundByCallId.get(callId);
    let twice = false;
    for (let earlier = 0; earlier < index; earlier++) if (results[earlier]!.toolCallId === callId) twice = true;
    if (!candidate || twice || (round && candidate !== round)) {
      return `no round left call "${callId}" open${round && candidate && candidate !== round ? " beside the other results of this message" : ""}`;
    }
    round = candidate;
  }
  return round!;
}

function hasToolPart(message: Message): boolean {
  const parts = message.parts;
  for (let index = 0; index < parts.length; index++) {
    const kind = parts[index]!.kind.case;
    if (kind === "toolCall" || kind === "toolResult") return true;
  }
  return false;
}

function isRound(block: Message | RoundBlock): block is RoundBlock {
  return "assistant" in block;
}

function carriesResults(message: Message): boolean {
  return message.role === Role.TOOL || toolResultsOf(message).length > 0;
}

/** Why a message with tool calls cannot be sent to any provider, or undefined. */
function unrenderable(message: Message, callIds: readonly string[]): { rule: ToolRoundRule; detail: string } | undefined {
  if (message.role !== Role.ASSISTANT) return { rule: "tool_call_outside_assistant", detail: `a ${Role[message.role] ?? message.role} message carries a tool_call part` };
  const seen = new Set<string>();
  for (const id of callIds) {
    if (id === "") return { rule: "tool_call_without_id", detail: "a tool call has no id" };
    if (seen.has(id)) return { rule: "duplicate_tool_call_id", detail: `tool call id "${id}" is used more than once in this round` };
    seen.add(id);
  }
  return undefined;
}

/** `<assistant id>:no-result:<call id>`, or with a random suffix should a message already have that id. */
function closingId(work: CompileWork, assistantId: string, callId: string, randomId: () => string): string {
  const id = `${assistantId}:no-result:${callId}`;
  return work.records[id] === undefined ? id : `${id}:${randomId()}`;
}

/** One warning for a kind of change: what happened and where, naming the first `namedPerWarning`. */
function warn<T>(work: CompileWork, changes: readonly T[], summary: (count: number) => string, where: (change: T) => string): void {
  if (changes.length === 0) return;
  const named = changes.slice(0, namedPerWarning).map(where).join("; ");
  const more = changes.length > namedPerWarning ? `; and ${changes.length - namedPerWarning} more` : "";
  addWarning(work, "tool_round_repaired", `${summary(changes.length)}: ${named}${more}`);
}
