import { Provider, Role } from "#gen/contextd/v1/message_pb";
import type { CompiledPayload } from "#gen/contextd/v1/compile_pb";
import type { BodyOrigin } from "../body-origin.js";
import { checkOpaquePassthrough } from "../opaque-passthrough.js";
import { messagesInRenderingOrder } from "../rendering-order.js";
import { atMessage, providerRuleViolation } from "../rule-violation.js";
import { checkToolNames } from "../tool-definitions.js";
import { openAIToolNamePattern } from "../openai-chat/validate.js";
import { toolResultsOf } from "../../model/tool-rounds.js";
import type { OpenAIResponsesBody } from "./body.js";
import { instructionsSeparator } from "./render.js";
import { CallIdAssignment, callIdRules } from "../rendered-ids.js";
import { responsesPairs } from "./reasoning-pairs.js";
import { compactsHistory } from "../provider-compaction.js";

/** The longest `function_call_output` the Responses API accepts, in characters. */
export const responsesMaxOutputCharacters = 256_000;

/**
 * Checks a Responses body against providers.md. `origins[i]` is the payload message of
 * `body.input[i]`. Throws FAILED_PRECONDITION naming the rule and the message id.
 */
export function validateOpenAIResponses(body: OpenAIResponsesBody, origins: readonly BodyOrigin[], payload: CompiledPayload): void {
  if (body.input.length === 0) throw providerRuleViolation("openai_responses.input_non_empty", "request", "there is no input item to send");
  const calls = new Map<string, { answered: boolean; index: number }>();
  // The message of the latest reasoning item, for the pairing of item ids (linear, not a scan back).
  let lastReasoningOf: string | undefined;
  // For each input index, the index of the first item after it that is not reasoning (or the length).
  const nextItem: number[] = new Array<number>(body.input.length);
  for (let index = body.input.length - 1, next = body.input.length; index >= 0; index--) {
    nextItem[index] = next;
    if (body.input[index]!.type !== "reasoning") next = index;
  }

  body.input.forEach((item, index) => {
    const origin = origins[index]!;
    const where = atMessage(origin.messageId);
    switch (item.type) {
      case "message":
        if ((origin.role === Role.SYSTEM && item.role !== "system") || (origin.role === Role.DEVELOPER && item.role !== "developer")) {
          throw providerRuleViolation("openai_responses.system_slot", where, `a ${Role[origin.role]} message was rendered as "${item.role}"`);
        }
        return;
      case "function_call":
        if (item.call_id.length > callIdRules.openai_responses.maxLength) {
          throw providerRuleViolation("openai_responses.call_id_length", where, `call_id "${item.call_id}" has ${item.call_id.length} characters; the limit is ${callIdRules.openai_responses.maxLength}`);
        }
        if (item.id !== undefined && lastReasoningOf !== origin.messageId) {
          throw providerRuleViolation("openai_responses.reasoning_pair", where, `function_call "${item.call_id}" carries item id "${item.id}" without the reasoning item it was produced with`);
        }
        if (item.call_id === "" || calls.has(item.call_id)) {
          throw providerRuleViolation("openai_responses.call_result_pairing", where, `function_call call_id "${item.call_id}" is empty or used twice`);
        }
        calls.set(item.call_id, { answered: false, index });
        return;
      case "function_call_output": {
        const call = calls.get(item.call_id);
        if (!call || call.answered) {
          throw providerRuleViolation("openai_responses.call_result_pairing", where, `function_call_output for "${item.call_id}" has no earlier function_call, or answers it twice`);
        }
        call.answered = true;
        const length = outputLength(item.output);
        if (length > responsesMaxOutputCharacters) {
          throw providerRuleViolation("openai_responses.output_length", where, `the output for "${item.call_id}" has ${length} characters; the limit is ${responsesMaxOutputCharacters}`);
        }
        return;
      }
      case "reasoning": {
        if (item.id === "") throw providerRuleViolation("openai_responses.reasoning_item_id", where, "a reasoning item without its id cannot be sent back");
        lastReasoningOf = origin.messageId;
        const next = nextItem[index]!;
        if (next === body.input.length || origins[next]!.messageId !== origin.messageId) {
          throw providerRuleViolation("openai_responses.reasoning_pair", where, `reasoning item "${item.id}" is not followed by an item of its own assistant turn`);
        }
        return;
      }
    }
  });

  // An unanswered call may only be followed by items of its own assistant turn and tool results.
  for (const [callId, call] of calls) {
    if (call.answered) continue;
    const turn = origins[call.index]!.messageId;
    for (let index = call.index + 1; index < body.input.length; index++) {
      const origin = origins[index]!;
      if (origin.messageId !== turn && origin.role !== Role.TOOL) {
        throw providerRuleViolation(
          "openai_responses.open_call_position",
          atMessage(turn),
          `function call "${callId}" has no output, and message "${origin.messageId}" follows; an open call may only be the last assistant turn`,
        );
      }
    }
  }

  checkToolNames(body.tools?.map((tool) => tool.name) ?? [], openAIToolNamePattern, "openai_responses");

  const expectedInstructions: string[] = [];
  const expectedOpaque: string[] = [];
  const ids = new CallIdAssignment(callIdRules.openai_responses);
  for (const { message, segment } of messagesInRenderingOrder(payload)) {
    const pairs = message.role === Role.ASSISTANT ? responsesPairs(message) : undefined;
    if (segment === "system" && message.role === Role.SYSTEM) {
      for (const part of message.parts) if (part.kind.case === "text" && part.kind.value.text !== "") expectedInstructions.push(part.kind.value.text);
    }
    message.parts.forEach((part, index) => {
      if (part.kind.case === "reasoning" && part.kind.value.provider === Provider.OPENAI_RESPONSES && pairs?.reasoning.has(index)) {
        expectedOpaque.push(`reasoning:${part.kind.value.itemId}:${part.kind.value.redactedData}`);
      }
      if (part.kind.case === "providerCompaction" && part.kind.value.provider === Provider.OPENAI_RESPONSES && compactsHistory(part.kind.value)) {
        expectedOpaque.push(`compaction:${part.kind.value.itemId}:${part.kind.value.encryptedContent ?? ""}`);
      }
      if (part.kind.case === "toolCall") expectedOpaque.push(`call:${ids.call(message.id, part.kind.value.id)}:${pairs?.itemIds.has(index) ? part.kind.value.itemId : ""}`);
    });
    for (const result of toolResultsOf(message)) expectedOpaque.push(`output:${ids.result(result.toolCallId)}`);
  }
  if ((body.instructions ?? "") !== expectedInstructions.join(instructionsSeparator)) {
    throw providerRuleViolation("openai_responses.system_slot", "instructions", "instructions do not hold exactly the system segment's SYSTEM texts");
  }
  const actualOpaque = body.input.flatMap((item) => {
    if (item.type === "reasoning") return [`reasoning:${item.id}:${item.encrypted_content ?? ""}`];
    if (item.type === "function_call") return [`call:${item.call_id}:${item.id ?? ""}`];
    if (item.type === "function_call_output") return [`output:${item.call_id}`];
    if (item.type === "compaction") return [`compaction:${item.id ?? ""}:${item.encrypted_content}`];
    return [];
  });
  checkOpaquePassthrough("openai_responses", expectedOpaque, actualOpaque);
}

/** Characters (code points) of an output: its text, or the text parts of an output list. */
function outputLength(output: string | Array<{ type: string; text?: string }>): number {
  const text = typeof output === "string" ? output : output.map((part) => part.text ?? "").join("");
  let count = 0;
  for (const _ of text) count++;
  return count;
}
