import { Code, ConnectError } from "@connectrpc/connect";
import { ToolRoundRepair, TransformationAction, TransformationReason } from "#gen/contextd/v1/compile_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { cancelledToolResultMessage } from "../model/cancellation.js";
import { analyzeToolRounds, toolRoundError, type ToolRoundViolation } from "../model/tool-rounds.js";
import { addWarning, setRecord, type CompileWork } from "./working-set.js";

/**
 * Validates the tool rounds of history followed by pending (one chronological sequence; an open
 * round may only be its last unit) and applies the requested repair to history. Violations inside
 * pending are always rejected: pending is this turn's protected input, not ours to rewrite.
 *
 * UNSPECIFIED (the default) leaves history to `repairToolRoundsForPrompt`, which the compile runs
 * after the persistence baseline (the repair changes the prompt only). REJECT refuses the first
 * violation.
 *
 * DROP_INCOMPLETE drops every unit with a violation (DROPPED, tool_round_repair).
 * CLOSE_AS_CANCELLED closes a round whose only problem is missing results by inserting a cancelled
 * result per missing call after its last result (the assistant is FORMATTED, tool_round_repair;
 * the inserted messages are introduced and persisted so the stored history heals); other invalid
 * units are dropped as with DROP_INCOMPLETE.
 */
export function validateAndRepairToolRounds(work: CompileWork, repair: ToolRoundRepair, randomId: () => string): void {
  if (ToolRoundRepair[repair] === undefined) throw new ConnectError(`repair: unknown tool round repair ${repair}`, Code.InvalidArgument);
  const history = work.segments.history;
  const sequence = work.pending.length === 0 ? history : [...history, ...work.pending];
  const analysis = analyzeToolRounds(sequence, { allowOpenTail: true });
  if (analysis.violations.length === 0) {
    if (sequence === history) work.historyRounds = { history, analysis };
    work.validToolRounds = history;
    return;
  }

  const located = (violation: ToolRoundViolation) =>
    violation.index < history.length
      ? toolRoundError(violation, "history")
      : toolRoundError({ ...violation, index: violation.index - history.length }, "pending");
  const inPending = analysis.violations.find((violation) => analysis.units[violation.unitIndex]!.end > history.length);
  if (inPending) throw located(inPending);
  if (repair === ToolRoundRepair.UNSPECIFIED) return;
  if (repair === ToolRoundRepair.REJECT) throw located(analysis.violations[0]!);

  const violationsByUnit = new Map<number, ToolRoundViolation[]>();
  for (const violation of analysis.violations) {
    const list = violationsByUnit.get(violation.unitIndex) ?? [];
    list.push(violation);
    violationsByUnit.set(violation.unitIndex, list);
  }
  const repaired: Message[] = [];
  analysis.units.forEach((unit, unitIndex) => {
    const messages = history.slice(unit.start, unit.end);
    const violations = violationsByUnit.get(unitIndex);
    if (!violations) {
      repaired.push(...messages);
      return;
    }
    const onlyMissing = violations.every((violation) => violation.rule === "incomplete_tool_round");
    if (repair === ToolRoundRepair.CLOSE_AS_CANCELLED && onlyMissing && unit.round) {
      const closing = unit.round.missingCallIds.map((callId) => ({
        ...cancelledToolResultMessage(callId, unit.round!.callNames.get(callId) ?? "", "repaired by compile"),
        id: `repair:${callId}:${randomId()}`,
      }));
      setRecord(work, messages[0]!.id, TransformationAction.FORMATTED, TransformationReason.TOOL_ROUND_REPAIR, Segment.HISTORY);
      for (const message of closing) {
        setRecord(work, message.id, TransformationAction.PASSED, TransformationReason.TOOL_ROUND_REPAIR, Segment.HISTORY);
        work.introduced.push({ $typeName: "contextd.v1.IntroducedMessage", segment: Segment.HISTORY, message });
        work.persistedIntroducedIds.add(message.id);
      }
      repaired.push(...messages, ...closing);
      addWarning(work, "tool_round_repaired", `history[${unit.start}] (message "${messages[0]!.id}"): closed ${closing.length} missing result(s) as cancelled`);
      return;
    }
    for (const message of messages) {
      setRecord(work, message.id, TransformationAction.DROPPED, TransformationReason.TOOL_ROUND_REPAIR, Segment.HISTORY);
    }
    addWarning(
      work,
      "tool_round_repaired",
      `history[${unit.start}..${unit.end - 1}]: dropped ${messages.length} message(s) (${[...new Set(violations.map((v) => v.rule))].join(", ")})`,
    );
  });
  work.segments = { ...work.segments, history: repaired };
}
