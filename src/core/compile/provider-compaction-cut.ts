import { TransformationAction, TransformationReason } from "#gen/contextd/v1/compile_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { cutAtLatestCompaction } from "../providers/provider-compaction.js";
import { ruleNamePrefixes } from "../providers/render.js";
import { setRecord, type CompileWork } from "./working-set.js";

/**
 * Why it exists: a provider compaction part (`ProviderCompactionPart`) stands for the history
 * before it, so what is before it is not sent, and the budget must not count it, trim for it or
 * ask for a summary of it. The render cuts the same way (`cutAtLatestCompaction`), so this stage
 * only moves the cut before the budget and records it: DROPPED / FORMATTED with reason
 * PROVIDER_COMPACTION. Without a render provider nothing is cut (the payload is provider-neutral).
 * The messages cut stay in `persistence`: the store keeps what happened.
 */
export function cutHistoryAtProviderCompaction(work: CompileWork, provider: Provider): void {
  const rulePrefix = ruleNamePrefixes[provider];
  if (rulePrefix === undefined) return;
  const history = work.segments.history;
  const cut = cutAtLatestCompaction(history, provider, rulePrefix);
  if (!cut) return;
  for (const id of cut.formatted) setRecord(work, id, TransformationAction.FORMATTED, TransformationReason.PROVIDER_COMPACTION, Segment.HISTORY);
  for (const id of cut.dropped) setRecord(work, id, TransformationAction.DROPPED, TransformationReason.PROVIDER_COMPACTION, Segment.HISTORY);
  // Counts the compile already has (an elided head's tail) stay valid for a plain prefix cut.
  const known = work.historyCounts?.history === history ? work.historyCounts : undefined;
  const prefix = history.length - cut.history.length;
  const plainPrefix = cut.formatted.length === 0 && cut.history.every((message, index) => message === history[prefix + index]);
  work.historyCounts = known && plainPrefix ? { history: cut.history, counts: known.counts.slice(prefix), offset: known.offset + prefix } : undefined;
  work.segments = { ...work.segments, history: cut.history };
}
