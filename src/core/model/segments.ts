import { Code, ConnectError } from "@connectrpc/connect";
import type { Message } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";

/**
 * Anything holding the four message segments under their field names: `ConversationState`,
 * `Snapshot`, `Persistence`, the compile's working set.
 */
export interface SegmentHolder {
  system: Message[];
  history: Message[];
  memory: Message[];
  tools: Message[];
}

/** The field name of a segment in state-like messages. */
export type SegmentField = keyof SegmentHolder;

/** Enumeration and validation order (semantics §1). */
export const segmentEnumerationOrder: readonly Segment[] = [Segment.SYSTEM, Segment.HISTORY, Segment.MEMORY, Segment.TOOLS];

/** Rendering order (semantics §1): memory after tools. */
export const segmentRenderingOrder: readonly Segment[] = [Segment.SYSTEM, Segment.HISTORY, Segment.TOOLS, Segment.MEMORY];

const fields: Record<number, SegmentField> = {
  [Segment.SYSTEM]: "system",
  [Segment.HISTORY]: "history",
  [Segment.MEMORY]: "memory",
  [Segment.TOOLS]: "tools",
};

/**
 * The field name for `segment`. UNSPECIFIED and unknown numbers are INVALID_ARGUMENT naming
 * `fieldPath` (for example "deltas[0].append_messages.segment").
 */
export function segmentField(segment: Segment, fieldPath: string): SegmentField {
  const field = fields[segment];
  if (!field) {
    throw new ConnectError(
      segment === Segment.UNSPECIFIED ? `${fieldPath}: a segment is required` : `${fieldPath}: unknown segment ${segment}`,
      Code.InvalidArgument,
    );
  }
  return field;
}

/** The lower-case segment name used in texts, ids and events ("system", "history", ...). */
export function segmentName(segment: Segment): string {
  return fields[segment] ?? `segment_${segment}`;
}

/** The messages of `segment` in `holder` (the array itself, not a copy). */
export function segmentMessages(holder: SegmentHolder, segment: Segment, fieldPath: string): Message[] {
  return holder[segmentField(segment, fieldPath)];
}

/** A shallow copy of `holder` with `segment` replaced by `messages`; the input is not mutated. */
export function withSegmentMessages<T extends SegmentHolder>(holder: T, segment: Segment, messages: Message[], fieldPath: string): T {
  return { ...holder, [segmentField(segment, fieldPath)]: messages };
}
