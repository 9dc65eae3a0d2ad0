import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { MergePolicy } from "#gen/contextd/v1/artifact_pb";
import { IntroducedMessageSchema, TransformationAction, TransformationReason, type DeferredBlock } from "#gen/contextd/v1/compile_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import { segmentField } from "../model/segments.js";
import { mapTextParts } from "../model/message-text.js";
import type { DeadlineCheck } from "./deadline.js";
import { addWarning, recordPassed, setRecord, type CompileWork } from "./working-set.js";

const variablePattern = /\{\{([A-Za-z_][A-Za-z0-9_.-]*)\}\}/g;

/**
 * Resolves `{{name}}` placeholders in every text part from `variables`. Unknown names stay as
 * written and are passed to `onUnknown` (once per occurrence). `beforeBuilding` gets the length the
 * resolved texts will have (`final`), and before that the length so far every 1,024 placeholders,
 * before anything is built; it may throw to refuse.
 */
export function resolveVariables(
  message: Message,
  variables: Record<string, string>,
  onUnknown: (name: string) => void,
  beforeBuilding?: (length: number, final: boolean) => void,
): Message {
  if (beforeBuilding) {
    let length = 0;
    for (const part of message.parts) {
      if (part.kind.case !== "text") continue;
      const before = length;
      length += resolvedLength(part.kind.value.text, variables, (partLength) => beforeBuilding(before + partLength, false));
    }
    beforeBuilding(length, true);
  }
  return mapTextParts(message, (text) =>
    text.includes("{{")
      ? text.replace(variablePattern, (placeholder, name: string) => {
          if (Object.hasOwn(variables, name)) return variables[name]!;
          onUnknown(name);
          return placeholder;
        })
      : text,
  );
}

/**
 * The length of `text` once its known `{{name}}`s are replaced, without building it; `progress`
 * gets the length so far every 1,024 placeholders, so a refusal can come early.
 */
function resolvedLength(text: string, variables: Record<string, string>, progress: (length: number) => void): number {
  if (!text.includes("{{")) return text.length;
  let length = text.length;
  let seen = 0;
  for (const match of text.matchAll(variablePattern)) {
    const name = match[1]!;
    if (Object.hasOwn(variables, name)) length += variables[name]!.length - match[0].length;
    if ((++seen & 1023) === 0) progress(length);
  }
  return length;
}

/**
 * Texts longer than this resolve with turns of the event loop (`resolveVariablesPaced`): `{{v}}`
 * repeated over 16 MiB took 0.9 s in one piece.
 */
const pacedResolveLength = 65_536;

/**
 * `resolveVariables` for a message with a text longer than `pacedResolveLength`, giving the event
 * loop a turn every 2,048 placeholders when `clock` says one is due; the same result, warnings
 * and refusals in the same order.
 */
async function resolveVariablesPaced(
  message: Message,
  variables: Record<string, string>,
  onUnknown: (name: string) => void,
  beforeBuilding: (length: number, final: boolean) => void,
  clock: DeadlineCheck,
): Promise<Message> {
  let length = 0;
  for (const part of message.parts) {
    if (part.kind.case !== "text") continue;
    const text = part.kind.value.text;
    if (!text.includes("{{")) {
      length += text.length;
      continue;
    }
    length += text.length;
    let seen = 0;
    for (const match of text.matchAll(variablePattern)) {
      const name = match[1]!;
      if (Object.hasOwn(variables, name)) length += variables[name]!.length - match[0].length;
      if ((++seen & 1023) === 0) {
        beforeBuilding(length, false);
        if (clock.checkNow("deferred_blocks")) await clock.pause("deferred_blocks");
      }
    }
  }
  beforeBuilding(length, true);
  const resolved: string[] = [];
  for (const part of message.parts) {
    if (part.kind.case !== "text" || !part.kind.value.text.includes("{{")) continue;
    resolved.push(await resolveTextPaced(part.kind.value.text, variables, onUnknown, clock));
  }
  let next = 0;
  return mapTextParts(message, (text) => (text.includes("{{") ? resolved[next++]! : text));
}

/** `text.replace(variablePattern, ...)` built in batches, with turns of the event loop between them. */
async function resolveTextPaced(text: string, variables: Record<string, string>, onUnknown: (name: string) => void, clock: DeadlineCheck): Promise<string> {
  const batches: string[] = [];
  let batch: string[] = [];
  let copied = 0;
  for (const match of text.matchAll(variablePattern)) {
    const name = match[1]!;
    batch.push(text.slice(copied, match.index));
    if (Object.hasOwn(variables, name)) batch.push(variables[name]!);
    else {
      onUnknown(name);
      batch.push(match[0]);
    }
    copied = match.index + match[0].length;
    if (batch.length >= 4_096) {
      batches.push(batch.join(""));
      batch = [];
      if (clock.checkNow("deferred_blocks")) await clock.pause("deferred_blocks");
    }
  }
  batch.push(text.slice(copied));
  batches.push(batch.join(""));
  return batches.join("");
}

/**
 * Stage 4: deferred blocks in order, each merged into its segment (ids already assigned by stage 1).
 * APPEND appends; REPLACE_BY_ORIGIN first drops existing messages whose `origin.template_id` is one
 * an incoming message carries; DEDUPLICATE_BY_LAYER replaces, in place, an existing message with the
 * same template_id + layer_id. Dropped messages are `formatted/replaced_by_deferred`; incoming ones
 * are introduced (in their resolved, pre-hook form) and persisted. An incoming id already present
 * anywhere in the compile is INVALID_ARGUMENT.
 */
export async function applyDeferredBlocks(work: CompileWork, blocks: readonly DeferredBlock[]): Promise<void> {
  if (blocks.length === 0) return;
  const liveIds = new Map<string, string>();
  for (const field of ["system", "history", "memory", "tools"] as const) {
    work.segments[field].forEach((message, index) => liveIds.set(message.id, `${field}[${index}]`));
  }
  work.pending.forEach((message, index) => liveIds.set(message.id, `pending[${index}]`));
  const turnMessage = work.currentTurn?.promptSafe ?? work.currentTurn?.raw;
  if (turnMessage) liveIds.set(turnMessage.id, "current_turn");
  work.request.scratch.forEach((message, index) => message.id !== "" && liveIds.set(message.id, `scratch[${index}]`));

  for (const [blockIndex, block] of blocks.entries()) {
    if (MergePolicy[block.mergePolicy] === undefined) {
      throw new ConnectError(`deferred_blocks[${blockIndex}].merge_policy: unknown merge policy ${block.mergePolicy}`, Code.InvalidArgument);
    }
    const field = segmentField(block.segment, `deferred_blocks[${blockIndex}].segment`);
    const incoming: Message[] = [];
    for (const [index, message] of block.messages.entries()) {
      const where = `deferred_blocks[${blockIndex}].messages[${index}] (message "${message.id}")`;
      if (work.deadline.check("deferred_blocks")) await work.deadline.pause("deferred_blocks");
      const onUnknown = (name: string) => addWarning(work, "unknown_variable", `${where}: unknown variable {{${name}}} left as written`);
      const beforeBuilding = (length: number, final: boolean) => {
        if (final) return work.textAllowance.charge(length, `${where}: resolve_vars`);
        work.textAllowance.assertFits(length, `${where}: resolve_vars`);
        work.deadline.check("deferred_blocks", 8);
      };
      incoming.push(
        message.parts.some((part) => part.kind.case === "text" && part.kind.value.text.length > pacedResolveLength)
          ? await resolveVariablesPaced(message, work.request.resolveVars, onUnknown, beforeBuilding, work.deadline)
          : resolveVariables(message, work.request.resolveVars, onUnknown, beforeBuilding),
      );
    }
    let existing = work.segments[field];
    const removed: Message[] = [];
    const toAppend: Message[] = [];
    if (block.mergePolicy === MergePolicy.REPLACE_BY_ORIGIN) {
      const templates = new Set(incoming.map((message) => message.origin?.templateId ?? "").filter((id) => id !== ""));
      existing = existing.filter((message) => {
        const replaced = templates.has(message.origin?.templateId ?? "");
        if (replaced) removed.push(message);
        return !replaced;
      });
      toAppend.push(...incoming);
    } else if (block.mergePolicy === MergePolicy.DEDUPLICATE_BY_LAYER) {
      existing = [...existing];
      for (const message of incoming) {
        const key = layerKey(message);
        const at = key === undefined ? -1 : existing.findIndex((candidate) => layerKey(candidate) === key);
        if (at < 0) toAppend.push(message);
        else {
          removed.push(existing[at]!);
          existing[at] = message;
        }
      }
    } else {
      toAppend.push(...incoming);
    }
    for (const message of removed) {
      liveIds.delete(message.id);
      setRecord(work, message.id, TransformationAction.FORMATTED, TransformationReason.REPLACED_BY_DEFERRED, block.segment);
    }
    incoming.forEach((message, index) => {
      const earlier = liveIds.get(message.id);
      if (earlier !== undefined) {
        throw new ConnectError(
          `duplicate message id "${message.id}" at deferred_blocks[${blockIndex}].messages[${index}] (also at ${earlier})`,
          Code.InvalidArgument,
        );
      }
      liveIds.set(message.id, `deferred_blocks[${blockIndex}].messages[${index}]`);
      work.introduced.push(create(IntroducedMessageSchema, { segment: block.segment, message }));
      work.persistedIntroducedIds.add(message.id);
    });
    work.segments = { ...work.segments, [field]: [...existing, ...toAppend] };
    recordPassed(work, incoming, block.segment);
  }
}

function layerKey(message: Message): string | undefined {
  if (!message.origin || (message.origin.templateId === "" && message.origin.layerId === "")) return undefined;
  return `${message.origin.templateId}\u0000${message.origin.layerId}`;
}
