import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ToolArgumentsRepair, TransformationAction, TransformationReason } from "#gen/contextd/v1/compile_pb";
import { ToolPayloadSchema, type Message, type Part } from "#gen/contextd/v1/message_pb";
import { segmentEnumerationOrder, segmentField, segmentName } from "../model/segments.js";
import { assertToolArgumentsAreObjects, firstInvalidToolCall, toolArgumentsProblem, toolArgumentsText } from "../model/tool-call-arguments.js";
import { analyzeToolRounds } from "../model/tool-rounds.js";
import type { NormalizedExtras } from "./normalize.js";
import type { CompileInputs } from "./request-inputs.js";
import { addWarning, setRecord, type CompileWork } from "./working-set.js";

/**
 * Why it exists: commits check tool-call arguments now, but conversations stored before that may
 * hold calls like `"city=Oslo"`, which Anthropic and Gemini cannot take; without a repair every
 * later compile of such a conversation failed. Request messages are the caller's to fix, so
 * they are rejected; stored ones are repaired by `CompileRequest.tool_arguments_repair`.
 */

/** The key a repaired call's arguments are sent under (AS_STRING). */
export const rawArgumentsKey = "raw_arguments";

/**
 * Stage 1, after normalize: INVALID_ARGUMENT for a tool call whose arguments are not a JSON
 * object in any message of the request (segments it gives, pending, the current turn, deferred
 * blocks, scratch). Stored messages with such calls are repaired: DROP_ROUND evicts the whole
 * round (its results with it) now, so the budget never counts it; AS_STRING (the default) marks
 * them for `showToolArgumentsAsString` in the presentation stages, so storage keeps the originals.
 */
export function checkToolArguments(work: CompileWork, inputs: CompileInputs, extras: NormalizedExtras, repair: ToolArgumentsRepair): void {
  if (ToolArgumentsRepair[repair] === undefined) {
    throw new ConnectError(`tool_arguments_repair: unknown repair ${repair}`, Code.InvalidArgument);
  }
  const storedInvalid: { field: ReturnType<typeof segmentField>; index: number }[] = [];
  for (const segment of segmentEnumerationOrder) {
    const field = segmentField(segment, "segment");
    const messages = work.segments[field];
    const stored = inputs.storedSegments.has(field);
    for (let index = 0; index < messages.length; index++) {
      const message = messages[index]!;
      // Paths are built only for a message that fails: one per message would cost more than the check.
      if (!firstInvalidToolCall(message)) continue;
      if (!stored) assertToolArgumentsAreObjects(message, `${segmentName(segment)}[${index}]`);
      storedInvalid.push({ field, index });
    }
  }
  work.pending.forEach((message, index) => assertToolArgumentsAreObjects(message, `pending[${index}]`));
  if (work.currentTurn?.raw) assertToolArgumentsAreObjects(work.currentTurn.raw, "current_turn.raw");
  if (work.currentTurn?.promptSafe) assertToolArgumentsAreObjects(work.currentTurn.promptSafe, "current_turn.prompt_safe");
  extras.deferredBlocks.forEach((block, blockIndex) =>
    block.messages.forEach((message, index) => assertToolArgumentsAreObjects(message, `deferred_blocks[${blockIndex}].messages[${index}]`)),
  );
  extras.scratch.forEach((message, index) => assertToolArgumentsAreObjects(message, `scratch[${index}]`));
  if (storedInvalid.length === 0) return;

  if (repair !== ToolArgumentsRepair.DROP_ROUND) {
    work.argumentsShownAsString = new Set(storedInvalid.map(({ field, index }) => work.segments[field][index]!.id));
    return;
  }
  const segments = { ...work.segments };
  for (const segment of segmentEnumerationOrder) {
    const field = segmentField(segment, "segment");
    const invalid = new Set(storedInvalid.filter((entry) => entry.field === field).map((entry) => entry.index));
    if (invalid.size === 0) continue;
    const messages = work.segments[field];
    // In history a call takes its results with it: the round is the unit; elsewhere the message.
    const units = field === "history" ? analyzeToolRounds(messages, { allowOpenTail: true }).units : messages.map((_, index) => ({ start: index, end: index + 1 }));
    const kept: Message[] = [];
    for (const unit of units) {
      let drop = false;
      for (let at = unit.start; at < unit.end && !drop; at++) drop = invalid.has(at);
      if (!drop) {
        for (let at = unit.start; at < unit.end; at++) kept.push(messages[at]!);
        continue;
      }
      const dropped = messages.slice(unit.start, unit.end);
      for (const message of dropped) setRecord(work, message.id, TransformationAction.DROPPED, TransformationReason.TOOL_ARGUMENTS_REPAIR, segment);
      addWarning(
        work,
        "tool_arguments_repaired",
        `${segmentName(segment)}[${unit.start}] (message "${dropped[0]!.id}"): ${describeInvalid(dropped)}; dropped ${dropped.length} message(s) of its round (tool_arguments_repair DROP_ROUND)`,
      );
    }
    segments[field] = kept;
  }
  work.segments = segments;
}

/**
 * Presentation (after the deferred stage, so persistence keeps the originals): the stored calls
 * `checkToolArguments` marked are sent with `{"raw_arguments": "<stored text>"}` as arguments,
 * FORMATTED with reason TOOL_ARGUMENTS_REPAIR and a warning per message.
 */
export function showToolArgumentsAsString(work: CompileWork): void {
  const marked = work.argumentsShownAsString;
  if (!marked || marked.size === 0) return;
  const segments = { ...work.segments };
  for (const segment of segmentEnumerationOrder) {
    const field = segmentField(segment, "segment");
    const messages = work.segments[field];
    let changed: Message[] | undefined;
    messages.forEach((message, index) => {
      if (!marked.has(message.id)) return;
      const described = describeInvalid([message]);
      const parts = message.parts.map((part): Part => {
        if (part.kind.case !== "toolCall" || toolArgumentsProblem(part.kind.value) === undefined) return part;
        const call = part.kind.value;
        const data = JSON.stringify({ [rawArgumentsKey]: toolArgumentsText(call) });
        return { ...part, kind: { case: "toolCall", value: { ...call, arguments: create(ToolPayloadSchema, { ...call.arguments, text: "", data }) } } };
      });
      changed ??= [...messages];
      changed[index] = { ...message, parts };
      setRecord(work, message.id, TransformationAction.FORMATTED, TransformationReason.TOOL_ARGUMENTS_REPAIR, segment);
      addWarning(work, "tool_arguments_repaired", `${segmentName(segment)}[${index}] (message "${message.id}"): ${described}; sent as {"${rawArgumentsKey}": "<the stored text>"} (tool_arguments_repair AS_STRING)`);
    });
    if (changed) segments[field] = changed;
  }
  work.segments = segments;
}

function describeInvalid(messages: readonly Message[]): string {
  const calls: string[] = [];
  for (const message of messages) {
    for (const part of message.parts) {
      if (part.kind.case !== "toolCall") continue;
      const problem = toolArgumentsProblem(part.kind.value);
      if (problem !== undefined) calls.push(`"${part.kind.value.id}" (${problem})`);
    }
  }
  return `the arguments of tool call ${calls.join(", ")} are not a JSON object`;
}
