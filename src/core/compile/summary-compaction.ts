import { Code, ConnectError } from "@connectrpc/connect";
import { TransformationReason, type CompileResult } from "#gen/contextd/v1/compile_pb";
import { Segment, type Delta } from "#gen/contextd/v1/state_pb";

/**
 * The `compact` delta that stores a compile's summary (SUMMARIZE / auto_compact over
 * `CompileSession`) after its writeback: the summarised messages are a prefix of the written-back
 * history, so the delta compacts through the last of them and the stored summary covers exactly
 * what the compiled one did (previous summaries included). `remember` carries the caller's facts.
 * Undefined when the compile produced no summary.
 */
export function summaryCompaction(result: CompileResult, remember: readonly string[]): Delta | undefined {
  const summary = result.introduced.find((introduced) => introduced.segment === Segment.HISTORY && introduced.message?.provenance?.kind.case === "summary")?.message;
  if (!summary) return undefined;
  const history = result.writeback!.snapshot!.history;
  const summarised = (id: string) => result.transformations[id]?.reason === TransformationReason.SUMMARIZED;
  let through = -1;
  history.forEach((message, index) => summarised(message.id) && (through = index));
  const gap = history.slice(0, through + 1).find((message) => !summarised(message.id));
  if (through < 0 || gap) {
    // Only stages that restructure history (formatters joining it, deferred blocks replacing in
    // it, the default tool-round repair sending a late result with its round, before messages
    // stored ahead of it) can make the summarised messages differ from a stored prefix.
    throw new ConnectError(
      `commit: the summary "${summary.id}" does not stand for a prefix of the stored history${gap ? ` ("${gap.id}" sits among the summarised messages unsummarised)` : ""}; compile without history formatters or deferred history blocks to commit a summary (a late tool result the default repair sent with its round also does this when the summary ends between them)`,
      Code.FailedPrecondition,
    );
  }
  return {
    $typeName: "contextd.v1.Delta",
    operation: {
      case: "compact",
      value: { $typeName: "contextd.v1.Compact", summary, throughMessageId: history[through]!.id, remember: [...remember] },
    },
  };
}
