import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { MessageSchema, ProvenanceSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import type { ConversationState, PruneHistory } from "#gen/contextd/v1/state_pb";
import { analyzeToolRounds } from "../model/tool-rounds.js";
import { assertSummaryContent, summaryCoverage } from "./compact.js";
import type { DeltaContext } from "./delta-context.js";
import { prepareMessages } from "./message-preparation.js";
import { withValidSegment } from "./segment-operations.js";

/**
 * `Delta.prune_history`: retention by size. Why it exists apart from `compact`: a compaction is
 * told where to cut; a prune is told how much to keep and finds the cut itself, on a unit
 * boundary, walking back from the tail only as far as the kept messages reach (so measuring costs
 * what is kept, not the whole history). What it drops is never silently gone: one summary at the
 * head stands for it (the caller's, or a marker text), with the dropped ids in its provenance, as
 * a compaction's summary has, so a reader of the stored history sees where it was cut and what
 * was cut. Leading summaries are dropped with the head and their coverage carried over, so
 * summaries never nest.
 */
export function pruneHistory(state: ConversationState, delta: PruneHistory, context: DeltaContext): ConversationState {
  if (delta.maxMessages === 0 && delta.maxBytes === 0n) throw new ConnectError("set max_messages, max_bytes or both: a prune without a limit keeps everything", Code.InvalidArgument);
  if (delta.summary) assertSummaryContent(delta.summary, "summary");
  const history = state.history;
  const { units } = analyzeToolRounds(history, { allowOpenTail: true });
  const maxMessages = delta.maxMessages === 0 ? Infinity : delta.maxMessages;
  const maxBytes = delta.maxBytes === 0n ? Infinity : Number(delta.maxBytes);
  // The kept tail grows a unit at a time from the end; the newest unit and an open round are kept
  // whatever their size (a prune never drops the turn in progress).
  let keptFrom = history.length;
  let keptBytes = 0;
  for (let index = units.length - 1; index >= 0; index--) {
    const unit = units[index]!;
    if (isSummary(history[unit.start]!)) break;
    let bytes = 0;
    for (let at = unit.start; at < unit.end; at++) bytes += toBinary(MessageSchema, history[at]!).byteLength;
    const newest = index === units.length - 1 || unit.round?.open === true;
    if (!newest && (history.length - unit.start > maxMessages || keptBytes + bytes > maxBytes)) break;
    keptFrom = unit.start;
    keptBytes += bytes;
  }
  const dropped = history.slice(0, keptFrom);
  // Only summaries before the kept tail: they already are the boundary, nothing to prune.
  if (dropped.every(isSummary)) return state;
  const coverage = summaryCoverage(dropped);
  const text = `[${coverage.coveredMessageIds.length} earlier messages were pruned]`;
  const given = delta.summary ?? create(MessageSchema, { role: Role.ASSISTANT, parts: [{ kind: { case: "text", value: { text } } }] });
  const summary = { ...given, provenance: create(ProvenanceSchema, { kind: { case: "summary", value: coverage } }) };
  const [prepared] = prepareMessages(state, [summary], context, "summary");
  return withValidSegment(state, "history", [prepared!, ...history.slice(keptFrom)], context);
}

function isSummary(message: Message): boolean {
  return message.provenance?.kind.case === "summary";
}
