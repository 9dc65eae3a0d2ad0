import { Role } from "#gen/contextd/v1/message_pb";
import type { CompiledPayload } from "#gen/contextd/v1/compile_pb";
import type { BodyOrigin } from "../body-origin.js";
import { checkOpaquePassthrough } from "../opaque-passthrough.js";
import { messagesInRenderingOrder } from "../rendering-order.js";
import { atMessage, providerRuleViolation } from "../rule-violation.js";
import { checkToolNames } from "../tool-definitions.js";
import { CallIdAssignment, callIdRules } from "../rendered-ids.js";
import { toolCallsOf, toolResultsOf } from "../../model/tool-rounds.js";
import type { OpenAIChatBody } from "./body.js";

/** OpenAI function names: letters, digits, underscores and dashes, at most 64. */
export const openAIToolNamePattern = /^[a-zA-Z0-9_-]{1,64}$/;
/** A Chat message's `name` (the sender): the same pattern. */
const chatNamePattern = openAIToolNamePattern;

/**
 * Checks a Chat Completions body against providers.md. `origins[i]` is the payload message of
 * `body.messages[i]`; `payload` is what was rendered (for the opaque pass-through check). Throws
 * FAILED_PRECONDITION naming the rule and the message id.
 */
export function validateOpenAIChat(body: OpenAIChatBody, origins: readonly BodyOrigin[], payload: CompiledPayload): void {
  if (body.messages.length === 0) {
    throw providerRuleViolation("openai_chat.messages_non_empty", "request", "there is no message to send");
  }
  // The calls of the latest assistant message with tool calls, while its tool messages follow.
  let round: { messageId: string; unanswered: Set<string>; answered: Set<string>; attachmentsSeen: boolean } | undefined;
  const seenCallIds = new Set<string>();

  body.messages.forEach((message, index) => {
    const origin = origins[index]!;
    const where = atMessage(origin.messageId);
    if ("name" in message && message.name !== undefined && !chatNamePattern.test(message.name)) {
      throw providerRuleViolation("openai_chat.name", where, `name "${message.name}" does not match ^[a-zA-Z0-9_-]{1,64}$`);
    }
    if ((origin.role === Role.SYSTEM && message.role !== "system") || (origin.role === Role.DEVELOPER && message.role !== "developer")) {
      throw providerRuleViolation("openai_chat.system_slot", where, `a ${Role[origin.role]} message was rendered as "${message.role}"`);
    }
    if (message.role === "tool") {
      if (!round || round.attachmentsSeen) {
        throw providerRuleViolation("openai_chat.call_result_pairing", where, `tool message for "${message.tool_call_id}" does not directly follow the assistant message that made the call`);
      }
      if (round.answered.has(message.tool_call_id)) {
        throw providerRuleViolation("openai_chat.call_result_pairing", where, `tool call "${message.tool_call_id}" is answered twice`);
      }
      if (!round.unanswered.delete(message.tool_call_id)) {
        throw providerRuleViolation("openai_chat.call_result_pairing", where, `tool message answers "${message.tool_call_id}", which is not a call of message "${round.messageId}"`);
      }
      round.answered.add(message.tool_call_id);
      return;
    }
    // Images a tool returned follow its tool messages in a user message; they belong to the round.
    const isToolAttachment = message.role === "user" && origin.role === Role.TOOL;
    if (round && isToolAttachment) {
      round.attachmentsSeen = true;
      return;
    }
    if (round && round.unanswered.size > 0) {
      throw providerRuleViolation(
        "openai_chat.open_call_position",
        atMessage(round.messageId),
        `tool calls ${[...round.unanswered].map((id) => `"${id}"`).join(", ")} have no result, and message "${origin.messageId}" follows; an open call may only be the last assistant turn`,
      );
    }
    round = undefined;
    if (message.role === "assistant" && message.tool_calls && message.tool_calls.length > 0) {
      round = { messageId: origin.messageId, unanswered: new Set(), answered: new Set(), attachmentsSeen: false };
      for (const call of message.tool_calls) {
        if (call.id.length > callIdRules.openai_chat.maxLength) {
          throw providerRuleViolation("openai_chat.tool_call_id_length", where, `tool call id "${call.id}" has ${call.id.length} characters; the limit is ${callIdRules.openai_chat.maxLength}`);
        }
        if (call.id === "" || seenCallIds.has(call.id)) {
          throw providerRuleViolation("openai_chat.call_result_pairing", where, `tool call id "${call.id}" is empty or used twice`);
        }
        seenCallIds.add(call.id);
        round.unanswered.add(call.id);
      }
    }
  });

  checkToolNames(body.tools?.map((tool) => tool.function.name) ?? [], openAIToolNamePattern, "openai_chat");

  const expected: string[] = [];
  const ids = new CallIdAssignment(callIdRules.openai_chat);
  for (const { message } of messagesInRenderingOrder(payload)) {
    for (const call of toolCallsOf(message)) expected.push(`call:${ids.call(message.id, call.id)}`);
    for (const result of toolResultsOf(message)) expected.push(`result:${ids.result(result.toolCallId)}`);
  }
  const actual: string[] = [];
  for (const message of body.messages) {
    if (message.role === "assistant") for (const call of message.tool_calls ?? []) actual.push(`call:${call.id}`);
    if (message.role === "tool") actual.push(`result:${message.tool_call_id}`);
  }
  checkOpaquePassthrough("openai_chat", expected, actual);
}
