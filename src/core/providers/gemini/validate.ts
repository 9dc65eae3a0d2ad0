import { Provider, Role, type Part } from "#gen/contextd/v1/message_pb";
import type { CompiledPayload } from "#gen/contextd/v1/compile_pb";
import type { BodyOrigin } from "../body-origin.js";
import { checkOpaquePassthrough } from "../opaque-passthrough.js";
import { isInstructionRole, messagesInRenderingOrder } from "../rendering-order.js";
import { atMessage, providerRuleViolation } from "../rule-violation.js";
import { checkToolNames } from "../tool-definitions.js";
import type { GeminiBody, GeminiContent } from "./body.js";
import { CallIdAssignment, callIdRules } from "../rendered-ids.js";

/** Gemini function names: a letter or underscore, then letters, digits, `_ . : -`; at most 64. */
export const geminiToolNamePattern = /^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$/;

/**
 * Checks a Gemini body against providers.md. `origins[i]` is the first payload message merged into
 * `body.contents[i]`. Throws FAILED_PRECONDITION naming the rule and the message id.
 */
export function validateGemini(body: GeminiBody, origins: readonly BodyOrigin[], payload: CompiledPayload): void {
  if (body.contents.length === 0) throw providerRuleViolation("gemini.contents_non_empty", "request", "there is no content to send");
  if (body.contents[0]!.parts.some((part) => part.functionCall !== undefined)) {
    throw providerRuleViolation(
      "gemini.function_call_turn_position",
      atMessage(origins[0]!.messageId),
      "the body would start with a function call turn; Gemini takes one only right after a user turn or a function response turn: start history with a user message, or leave budget.history_start at HISTORY_START_USER_TURN so trimming aligns it",
    );
  }
  const seenCallIds = new Set<string>();
  const isResponses = (content: GeminiContent) => content.parts.some((part) => part.functionResponse !== undefined);

  body.contents.forEach((content, index) => {
    const where = atMessage(origins[index]!.messageId);
    if (content.parts.length === 0) throw providerRuleViolation("gemini.empty_content", where, "a content without parts");
    const responses = isResponses(content);
    if (responses && content.parts.some((part) => part.functionResponse === undefined)) {
      throw providerRuleViolation("gemini.function_response_content", where, "function responses are mixed with other parts in one content");
    }
    if (responses && content.role !== "user") throw providerRuleViolation("gemini.function_response_content", where, "function responses outside a user turn");
    const previous = index > 0 ? body.contents[index - 1]! : undefined;
    if (previous && previous.role === content.role && isResponses(previous) === responses) {
      throw providerRuleViolation("gemini.role_alternation", where, `two consecutive "${content.role}" contents of the same kind; they must be merged`);
    }
    const calls = content.parts.flatMap((part) => (part.functionCall ? [part.functionCall] : []));
    if (calls.length > 0 && content.role !== "model") throw providerRuleViolation("gemini.call_result_pairing", where, "function calls outside a model turn");
    for (const call of calls) {
      if (call.id !== undefined && (call.id === "" || seenCallIds.has(call.id))) {
        throw providerRuleViolation("gemini.call_result_pairing", where, `function call id "${call.id}" is empty or used twice`);
      }
      if (call.id !== undefined) seenCallIds.add(call.id);
    }

    const previousCalls = previous?.parts.flatMap((part) => (part.functionCall ? [part.functionCall] : [])) ?? [];
    if (responses) {
      const answers = content.parts.map((part) => part.functionResponse!);
      const unmatched = [...previousCalls];
      for (const answer of answers) {
        const at = unmatched.findIndex((call) => call.name === answer.name && call.id === answer.id);
        if (at < 0) {
          throw providerRuleViolation("gemini.call_result_pairing", where, `function response "${answer.name}" (id "${answer.id ?? ""}") does not answer a call of the previous model turn`);
        }
        unmatched.splice(at, 1);
      }
      // Responses still missing are fine only at the tail (the open round), where nothing but the
      // round's own tool content follows.
      const atTail = origins.slice(index + 1).every((origin) => origin.role === Role.TOOL);
      if (unmatched.length > 0 && !atTail) {
        throw providerRuleViolation("gemini.open_call_position", where, `calls ${unmatched.map((call) => `"${call.id ?? call.name}"`).join(", ")} of the previous model turn have no function response, and more content follows; an open call may only be the last model turn`);
      }
    } else if (previousCalls.length > 0) {
      throw providerRuleViolation(
        "gemini.open_call_position",
        atMessage(origins[index - 1]!.messageId),
        `function calls ${previousCalls.map((call) => `"${call.id ?? call.name}"`).join(", ")} are not answered by the next content; an open call may only be the last model turn`,
      );
    }
  });

  checkToolNames(body.tools?.flatMap((tool) => tool.functionDeclarations.map((declaration) => declaration.name)) ?? [], geminiToolNamePattern, "gemini");

  const expectedSystem: string[] = [];
  const expectedOpaque: string[] = [];
  const ids = new CallIdAssignment(callIdRules.gemini);
  for (const { message, segment } of messagesInRenderingOrder(payload)) {
    if (segment === "system" && isInstructionRole(message.role)) {
      // systemInstruction takes plain text: a signature there has no model turn to go back to.
      for (const part of message.parts) if (part.kind.case === "text" && part.kind.value.text !== "") expectedSystem.push(part.kind.value.text);
      continue;
    }
    for (const part of message.parts) expectedOpaque.push(...opaqueValuesOf(part, message.id, ids));
  }
  const actualSystem = body.systemInstruction?.parts.map((part) => part.text) ?? [];
  if (actualSystem.join("\u0000") !== expectedSystem.join("\u0000")) {
    throw providerRuleViolation("gemini.system_slot", "systemInstruction", "systemInstruction does not hold exactly the system segment's instructions");
  }
  const actualOpaque = body.contents.flatMap((content) =>
    content.parts.flatMap((part) => [
      ...(part.functionCall ? [`call:${part.functionCall.id ?? ""}`] : []),
      ...(part.thoughtSignature !== undefined ? [`signature:${part.thoughtSignature}`] : []),
    ]),
  );
  checkOpaquePassthrough("gemini", expectedOpaque, actualOpaque);
}

/**
 * The opaque values renderGemini must emit for a part outside the system slot, in body order:
 * call ids, and the signatures of calls, text and Gemini reasoning, also inside tool results'
 * content (rendered in the user content after the function responses).
 */
function opaqueValuesOf(part: Part, messageId: string, ids: CallIdAssignment): string[] {
  const kind = part.kind;
  switch (kind.case) {
    case "toolCall":
      return [`call:${ids.call(messageId, kind.value.id)}`, ...(kind.value.signature !== "" ? [`signature:${kind.value.signature}`] : [])];
    case "text":
      return kind.value.signature !== "" ? [`signature:${kind.value.signature}`] : [];
    case "reasoning":
      return kind.value.provider === Provider.GEMINI && kind.value.signature !== "" ? [`signature:${kind.value.signature}`] : [];
    case "toolResult":
      return kind.value.contentParts.flatMap((inner) => opaqueValuesOf(inner, messageId, ids));
    default:
      return [];
  }
}
