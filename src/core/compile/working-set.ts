import { create } from "@bufbuild/protobuf";
import {
  CurrentTurnPersistence,
  TransformationAction,
  TransformationReason,
  WarningSchema,
  type CompileRequest,
  type IntroducedMessage,
  type Transformation,
  type Warning,
  type WritebackMessage,
} from "#gen/contextd/v1/compile_pb";
import type { Artifact } from "#gen/contextd/v1/artifact_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import { Segment, type Experience, type ToolDefinition } from "#gen/contextd/v1/state_pb";
import type { SegmentHolder } from "../model/segments.js";
import type { ToolRoundAnalysis } from "../model/tool-rounds.js";
import type { TokenEstimator } from "../tokens/estimator.js";
import type { DeadlineCheck } from "./deadline.js";
import type { TextAllowance } from "./text-allowance.js";

/** The current turn after normalisation: both forms share one id. */
export interface NormalizedCurrentTurn {
  raw?: Message;
  promptSafe?: Message;
  persistence: CurrentTurnPersistence;
}

/**
 * The state a compile carries from stage to stage. Messages are never mutated: a stage that
 * changes one puts a new object in its place, so the frozen `source` can share the originals.
 */
export interface CompileWork {
  readonly request: CompileRequest;
  readonly estimator: TokenEstimator;
  /** What text the stages may still produce; shared by the main payload and every target. */
  readonly textAllowance: TextAllowance;
  readonly deadline: DeadlineCheck;
  /** The payload segments as the stages shape them. History gains pending and the current turn in the budget stage. */
  segments: SegmentHolder;
  pending: Message[];
  currentTurn?: NormalizedCurrentTurn;
  /** Request artifacts merged over stored ones. */
  artifacts: Artifact[];
  experiences: Experience[];
  toolDefinitions: ToolDefinition[];
  /**
   * Message id → final record. Later stages overwrite earlier records of the same id. A
   * prototype-less object (see `newRecords`) that becomes `CompileResult.transformations` as is.
   */
  records: Record<string, Transformation>;
  introduced: IntroducedMessage[];
  /** Ids of payload-born messages that the host should persist (deferred messages, summaries, repairs). */
  persistedIntroducedIds: Set<string>;
  /** Segments right after the deferred stage: the originals the persistence projection saves. */
  baseline?: SegmentHolder;
  /** Ids visible artifacts were rendered for. */
  visibleArtifactIds: string[];
  warnings: Warning[];
  writebackMessages: WritebackMessage[];
  /**
   * The tool-round analysis stage 1 made of `history` (when pending was empty and it found nothing
   * to repair). The budget reuses it while history is still that array instead of analysing again.
   */
  historyRounds?: { history: readonly Message[]; analysis: ToolRoundAnalysis };
  /** The history stage 1 found without a broken tool-round rule (with pending after it). */
  validToolRounds?: readonly Message[];
  /**
   * Token counts of `history` known before the budget stage (the tail `elideHistoryHead` left), so
   * the budget does not count it again; and how many stored messages precede it (for the indices
   * its errors name).
   */
  historyCounts?: { history: readonly Message[]; counts: readonly number[]; offset: number };
  /** Ids of stored messages whose tool-call arguments the presentation shows as a string (AS_STRING). */
  argumentsShownAsString?: ReadonlySet<string>;
  /**
   * Ids given a DROPPED record, in order (a later record may replace one): what the
   * message_dropped events are emitted from without walking every record of a large compile.
   */
  droppedIds?: string[];
  /**
   * Ids the default tool-round repair left out of the prompt (DROPPED) that persistence keeps: that
   * repair changes the prompt only (prompt-tool-round-repair.ts).
   */
  keptDespiteDrop?: Set<string>;
  /**
   * Message id → the tokens the budget counted for it (`CompileResult.message_tokens`), filled by
   * the budget stage only when the caller asked for it: one entry per message is a cost a compile
   * should not pay by default. Prototype-less, like `records`.
   */
  messageTokens?: Record<string, bigint>;
}

export function setRecord(work: CompileWork, id: string, action: TransformationAction, reason: TransformationReason, segment: Segment): void {
  work.records[id] = sharedRecord(action, reason, segment);
  if (action === TransformationAction.DROPPED) (work.droppedIds ??= []).push(id);
}

const sharedRecords = new Map<number, Transformation>();

/**
 * The one record object for (action, reason, segment). Records are replaced, never mutated, so
 * messages with the same outcome share one, across compiles: a thousand identical objects per
 * compile would only be garbage to collect. A literal with every field set equals create(TransformationSchema, ...)
 * without its reflection.
 */
function sharedRecord(action: TransformationAction, reason: TransformationReason, segment: Segment): Transformation {
  const key = (action * 1_000 + reason) * 1_000 + segment;
  let record = sharedRecords.get(key);
  if (!record) {
    // Frozen: a consumer mutating a shared record would change every compile's results.
    record = Object.freeze<Transformation>({ $typeName: "contextd.v1.Transformation", action, reason, segment });
    sharedRecords.set(key, record);
  }
  return record;
}

/**
 * An empty record table. Without a prototype, any id (even "__proto__") is an own key, and the
 * object is a hash table from the start: building a Map and converting it with
 * `Object.fromEntries` cost a millisecond per thousand messages.
 */
export function newRecords(): Record<string, Transformation> {
  return Object.create(null) as Record<string, Transformation>;
}

/** The record of a message that passed `segment` unchanged. */
export function passedRecord(segment: Segment): Transformation {
  return sharedRecord(TransformationAction.PASSED, TransformationReason.UNCHANGED, segment);
}

export function recordPassed(work: CompileWork, messages: readonly Message[], segment: Segment): void {
  const passed = passedRecord(segment);
  for (const message of messages) work.records[message.id] = passed;
}

/** Warnings are text the compile produces too: one per `{{name}}` occurrence could be millions. */
export function addWarning(work: CompileWork, code: string, message: string): void {
  work.textAllowance.charge(message.length, `warnings (${code})`);
  work.warnings.push(create(WarningSchema, { code, message }));
}

/**
 * True when the record says the message must not be persisted: dropped by the budget or a repair,
 * replaced by a deferred block, or summarised. Presentation (hooks, formatters, role projection,
 * text replacements), the system-prompt assembly and the cut at a provider compaction never change
 * what is stored, so those records do not count.
 */
export function isRemovedFromPersistence(record: Transformation | undefined): boolean {
  if (!record) return false;
  return (
    (record.action === TransformationAction.DROPPED &&
      record.reason !== TransformationReason.SYSTEM_PROMPT_ASSEMBLY &&
      record.reason !== TransformationReason.PROVIDER_COMPACTION) ||
    record.reason === TransformationReason.REPLACED_BY_DEFERRED ||
    record.reason === TransformationReason.SUMMARIZED
  );
}
