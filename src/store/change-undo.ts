import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ChangeUndoSchema, SegmentUndoSchema, type Change, type ChangeUndo, type SegmentUndo } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, Segment, type ConversationState } from "#gen/contextd/v1/state_pb";
import type { MessageListLineage } from "../core/model/message-list-lineage.js";
import { restDiffers, segmentEdit, storedSegments, type StoredSegment } from "./segment-edits.js";

/**
 * How a change is undone: recorded with it at commit (`Change.undo`), applied newest first to the
 * current state to read a past version. Why it exists: a past version rebuilt by applying the change
 * log forward from the conversation's first version cost what the whole conversation holds (974 ms
 * one version back at 100,000 messages, memory store) and needed the log to start at version 1, so
 * a conversation with more commits than `--history-retention-versions` could be read only at its
 * current version. Read backward, a version costs the changes since it and what they changed, and
 * any version among the logged changes is readable. What an undo holds is the reverse of the edit
 * a store writes (`segmentEdit`): for an append, "keep the old length", nothing else; the messages
 * a change removed or replaced; the state's rest before it when it changed. Bounded by
 * `maxUndoBytes`: past it the change records why it has no undo (`not_undoable`), and the versions
 * before it are left to the forward replay while the log still reaches back to the first version.
 */

const segmentEnums: Record<StoredSegment, Segment> = {
  system: Segment.SYSTEM,
  history: Segment.HISTORY,
  memory: Segment.MEMORY,
  tools: Segment.TOOLS,
};
/** The stored segment `segment` names, undefined for none. */
function segmentNamed(segment: Segment): StoredSegment | undefined {
  return storedSegments.find((name) => segmentEnums[name] === segment);
}

/** What a commit records to undo itself (`undoOf`). */
export interface UndoRecording {
  /** Bytes (protobuf) the undo of one change may hold at most (`--history-undo-bytes`); past it the change is not undoable. */
  maxBytes: number;
  /** The store's record of appended lists: an append's undo is then found in time proportional to what it appended. */
  lineage?: MessageListLineage;
  /** Where `before.history` starts in the stored history (a plan on the stored tail, tail-commit.ts); 0 = whole. */
  historyStart?: number;
}

/**
 * The undo of the change from `before` to `after`: per edited segment what restores it, the rest
 * before when it changed; or, when that would hold more than `recording.maxBytes`, a `not_undoable`
 * saying so. Costs what the undo holds (each message measured once, stopping at the bound) plus the
 * identity comparisons `segmentEdit` makes.
 */
export function undoOf(before: ConversationState, after: ConversationState, recording: UndoRecording): ChangeUndo {
  const segments: SegmentUndo[] = [];
  let bytes = 0;
  const tooLarge = (what: string) =>
    create(ChangeUndoSchema, {
      notUndoable: `its undo (${what}) would hold more than ${recording.maxBytes} bytes, the bound of one change's undo (--history-undo-bytes)`,
    });
  for (const segment of storedSegments) {
    const undo = segmentUndo(segment, before[segment], after[segment], recording);
    if (undo === undefined) continue;
    for (const message of undo.messages) {
      bytes += toBinary(MessageSchema, message).length;
      if (bytes > recording.maxBytes) return tooLarge(`the ${segment} messages the change removed or replaced`);
    }
    segments.push(undo);
  }
  if (!restDiffers(before, after)) return create(ChangeUndoSchema, { segments });
  // Only the fields the change altered (core shares what a batch left alone): a title set on a
  // conversation with many artifacts holds the old title, not the artifacts.
  const restBefore = create(ConversationStateSchema);
  const restFields: string[] = [];
  for (const field of restFieldsOf) {
    const key = field.localName as keyof ConversationState;
    if (before[key] === after[key]) continue;
    (restBefore as unknown as Record<string, unknown>)[key] = before[key];
    restFields.push(field.name);
  }
  bytes += toBinary(ConversationStateSchema, restBefore).length;
  if (bytes > recording.maxBytes) return tooLarge(`the state's ${restFields.join(", ")} before the change`);
  return create(ChangeUndoSchema, { segments, restBefore, restFields });
}

/** The fields of a state's rest: every field but the segments, the version and the conversation id. */
const restFieldsOf = ConversationStateSchema.fields.filter(
  (field) => !(storedSegments as readonly string[]).includes(field.localName) && field.localName !== "version" && field.localName !== "conversationId",
);

/** What restores `before` from `after` for one segment, undefined when the change left it alone. */
function segmentUndo(segment: StoredSegment, before: readonly Message[], after: readonly Message[], recording: UndoRecording): SegmentUndo | undefined {
  const edit = segmentEdit(before, after, recording.lineage);
  if (edit === undefined) return undefined;
  const start = segment === "history" ? (recording.historyStart ?? 0) : 0;
  const undo = (keepHead: boolean, keep: number, messages: Message[]) => create(SegmentUndoSchema, { segment: segmentEnums[segment], keepHead, keep, messages });
  // after = before[0, keep) + edit.messages: keep that head of after, the rest of before after it.
  if (edit.keepPrefix) return undo(true, start + edit.keep, before.slice(edit.keep));
  // after = edit.messages + before's last keep: keep that tail of after, before's head before it.
  if (start === 0) return undo(false, edit.keep, before.slice(0, before.length - edit.keep));
  // A plan on the stored tail does not hold the head of the history, so its undo keeps the head.
  let prefix = 0;
  while (prefix < before.length && prefix < after.length && after[prefix] === before[prefix]) prefix++;
  return undo(true, start + prefix, before.slice(prefix));
}

/**
 * One segment as undos reshape it: `head`, then messages [from, to) of the current segment, then
 * `tail`. Undos compose on it in time proportional to the messages they carry, so reading many
 * versions back copies the current segment once, at the end (`messages`).
 */
class UndoneSegment {
  private head: readonly Message[] = [];
  private tail: readonly Message[] = [];
  private from = 0;
  private to: number;

  constructor(private readonly current: readonly Message[]) {
    this.to = current.length;
  }

  get length(): number {
    return this.head.length + (this.to - this.from) + this.tail.length;
  }

  /** Keeps `keep` messages of the head (`keepHead`) or the tail, and puts `messages` after (head) or before (tail) them. */
  undo(keepHead: boolean, keep: number, messages: readonly Message[]): void {
    const middle = this.to - this.from;
    if (keepHead) {
      if (keep <= this.head.length) {
        this.head = [...this.head.slice(0, keep), ...messages];
        this.from = this.to = 0;
        this.tail = [];
      } else if (keep <= this.head.length + middle) {
        this.to = this.from + (keep - this.head.length);
        this.tail = messages;
      } else {
        this.tail = [...this.tail.slice(0, keep - this.head.length - middle), ...messages];
      }
      return;
    }
    if (keep <= this.tail.length) {
      this.head = [...messages, ...this.tail.slice(this.tail.length - keep)];
      this.from = this.to = 0;
      this.tail = [];
    } else if (keep <= this.tail.length + middle) {
      this.from = this.to - (keep - this.tail.length);
      this.head = messages;
    } else {
      this.head = [...messages, ...this.head.slice(this.head.length - (keep - this.tail.length - middle))];
    }
  }

  /**
   * The segment: the current array itself when the undos left it as it is. A head of it (undone
   * appends) is recorded in `lineage` as a prefix of it, and the whole of it followed by what the
   * undos brought back (an undone rewind or removal at the tail) as an append to it, so a rewind
   * to it writes, and the indexes kept beside the current state follow it, without comparing the
   * messages kept.
   */
  messages(lineage: MessageListLineage | undefined): readonly Message[] {
    if (this.head.length === 0 && this.tail.length === 0 && this.from === 0 && this.to === this.current.length) return this.current;
    if (this.head.length === 0 && this.from === 0 && this.to === this.current.length) {
      const extended = this.current.concat(this.tail);
      lineage?.appended(this.current, extended);
      return extended;
    }
    const middle = this.current.slice(this.from, this.to);
    if (this.head.length > 0 || this.tail.length > 0) return this.head.concat(middle, this.tail);
    if (this.from === 0) lineage?.truncated(this.current, middle);
    return middle;
  }
}

/** Whether `change` recorded an undo (a change of an older build, or one past the bound, did not). */
export function undoable(change: Change): boolean {
  return change.undo !== undefined && change.undo.notUndoable === "";
}

/** The messages undoing `change` brings back (what a read weighs against `--history-read-messages`; at least 1). */
export function undoMessages(change: Change): number {
  let messages = 1;
  for (const segment of change.undo?.segments ?? []) messages += segment.messages.length;
  return messages;
}

/**
 * The state at `version`: `current` with the undos of `changes` (versions `version` + 1 up to
 * `current.version`, in order, each `undoable`) applied newest first. DATA_LOSS when an undo does
 * not fit the state it undoes (a log written behind the store's back). `lineage`: where a segment
 * that is a head of the current one is recorded so (`UndoneSegment.messages`).
 */
export function undoneState(current: ConversationState, changes: readonly Change[], version: bigint, lineage?: MessageListLineage): ConversationState {
  const segments = new Map<StoredSegment, UndoneSegment>();
  let rest: ConversationState = current;
  for (let index = changes.length - 1; index >= 0; index--) {
    const change = changes[index]!;
    for (const undo of change.undo!.segments) {
      const name = segmentNamed(undo.segment);
      if (name === undefined) throw unfit(current.conversationId, change.version, `it names segment ${undo.segment}`);
      let segment = segments.get(name);
      if (segment === undefined) segments.set(name, (segment = new UndoneSegment(current[name])));
      if (undo.keep > segment.length) throw unfit(current.conversationId, change.version, `it keeps ${undo.keep} ${name} messages of ${segment.length}`);
      segment.undo(undo.keepHead, undo.keep, undo.messages);
    }
    const { restBefore, restFields } = change.undo!;
    if (restBefore === undefined) continue;
    rest = { ...rest };
    for (const name of restFields) {
      const field = restFieldsOf.find((candidate) => candidate.name === name);
      if (field === undefined) throw unfit(current.conversationId, change.version, `it names no field of the state's rest: "${name}"`);
      (rest as unknown as Record<string, unknown>)[field.localName] = (restBefore as unknown as Record<string, unknown>)[field.localName];
    }
  }
  const state: ConversationState = { ...rest, conversationId: current.conversationId, version };
  for (const name of storedSegments) {
    const segment = segments.get(name);
    state[name] = segment === undefined ? current[name] : (segment.messages(lineage) as Message[]);
  }
  return state;
}

function unfit(conversationId: string, version: bigint, why: string): ConnectError {
  return new ConnectError(`conversation "${conversationId}": the undo logged with version ${version} does not fit the state after it (${why})`, Code.DataLoss);
}
