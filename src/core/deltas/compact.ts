import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ProvenanceSchema, type Message } from "#gen/contextd/v1/message_pb";
import type { Compact, ConversationState } from "#gen/contextd/v1/state_pb";
import { analyzeToolRounds } from "../model/tool-rounds.js";
import type { DeltaContext } from "./delta-context.js";
import { remember } from "./experiences.js";
import { prepareMessages } from "./message-preparation.js";
import { withValidSegment } from "./segment-operations.js";
import { prefixError } from "../model/error-details.js";

/**
 * Replaces a history prefix (through `through_message_id`, inclusive; empty = everything before an
 * open round at the tail) with the summary, whose provenance lists every covered id. A summary that
 * covers an earlier summary replaces it: it inherits that one's covered ids (rolling summaries) and
 * lists it in `replaced_summary_ids`, never among its covered ids, so summaries never nest and the
 * record of what was condensed is never lost. The prefix must end on a unit boundary: a tool round is covered
 * whole or not at all, and an open round is never covered (its results are still to come).
 */
export function compact(state: ConversationState, delta: Compact, context: DeltaContext): ConversationState {
  if (!delta.summary) throw new ConnectError("summary is required", Code.InvalidArgument);
  assertSummaryContent(delta.summary, "summary");
  const history = state.history;
  const { units, openRound } = analyzeToolRounds(history, { allowOpenTail: true });
  let end: number;
  if (delta.throughMessageId === "") {
    end = openRound ? openRound.start : history.length;
  } else {
    const index = history.findIndex((message) => message.id === delta.throughMessageId);
    if (index < 0) throw new ConnectError(`through_message_id: no message "${delta.throughMessageId}" in history`, Code.InvalidArgument);
    const unit = units.find((candidate) => candidate.start <= index && index < candidate.end)!;
    if (unit.round?.open) {
      throw new ConnectError(
        `through_message_id: "${delta.throughMessageId}" is in the open tool round at history[${unit.start}] (missing results for ${unit.round.missingCallIds.join(", ")}); an open round cannot be summarised`,
        Code.InvalidArgument,
      );
    }
    if (index !== unit.end - 1) {
      throw new ConnectError(
        `through_message_id: "${delta.throughMessageId}" would cut the tool round at history[${unit.start}..${unit.end - 1}]; compact through "${history[unit.end - 1]!.id}" instead`,
        Code.InvalidArgument,
      );
    }
    end = index + 1;
  }
  if (end === 0) throw new ConnectError("history has nothing to compact", Code.InvalidArgument);

  const covered = history.slice(0, end);
  const remaining = history.slice(end);
  const summary = {
    ...delta.summary,
    provenance: create(ProvenanceSchema, { kind: { case: "summary", value: summaryCoverage(covered) } }),
  };
  const [prepared] = prepareMessages(state, [summary], context, "summary");
  let next = withValidSegment(state, "history", [prepared!, ...remaining], context);
  delta.remember.forEach((text, index) => {
    try {
      next = remember(next, text);
    } catch (error) {
      throw error instanceof ConnectError ? prefixError(error, `remember[${index}]`) : error;
    }
  });
  return next;
}

/** A summary stands in for whole units, so it may not itself open or answer a tool round. */
export function assertSummaryContent(summary: Message, where: string): void {
  if (summary.parts.some((part) => part.kind.case === "toolCall" || part.kind.case === "toolResult")) {
    throw new ConnectError(`${where}: a summary may not carry tool calls or tool results`, Code.InvalidArgument);
  }
}

/**
 * What a summary of `covered` stands for: the covered ids in history order, an earlier summary
 * contributing what it covered instead of itself, and the earlier summaries it replaces (with
 * those they had replaced), oldest first.
 */
export function summaryCoverage(covered: readonly Message[]): { coveredMessageIds: string[]; replacedSummaryIds: string[] } {
  const coveredMessageIds: string[] = [];
  const replacedSummaryIds: string[] = [];
  const seen = new Set<string>();
  const add = (ids: string[], id: string) => {
    if (!seen.has(id)) ids.push(id);
    seen.add(id);
  };
  for (const message of covered) {
    if (message.provenance?.kind.case !== "summary") {
      add(coveredMessageIds, message.id);
      continue;
    }
    const earlier = message.provenance.kind.value;
    for (const id of earlier.replacedSummaryIds) add(replacedSummaryIds, id);
    for (const id of earlier.coveredMessageIds) add(coveredMessageIds, id);
    add(replacedSummaryIds, message.id);
  }
  return { coveredMessageIds, replacedSummaryIds };
}
