import type { ToolCallPart } from "#gen/contextd/v1/message_pb";
import { jsonDepthExcess, maxJsonDepth } from "../model/json-depth.js";
import { toolArgumentsText } from "../model/tool-call-arguments.js";
import { atMessage, providerRuleViolation } from "./rule-violation.js";

/**
 * The call's arguments as the JSON text OpenAI sends them: `data` exactly as stored (opaque, byte
 * for byte), else `text`, else "{}" (a call without arguments).
 */
export function toolArgumentsJson(call: ToolCallPart): string {
  return toolArgumentsText(call) || "{}";
}

/**
 * The call's arguments as a JSON object, for providers that take an object (Anthropic `input`,
 * Gemini `args`). Arguments that are not a JSON object cannot be sent there: FAILED_PRECONDITION
 * under `rule`, naming the message and call.
 */
export function toolArgumentsObject(call: ToolCallPart, messageId: string, rule: string): Record<string, unknown> {
  const json = toolArgumentsJson(call);
  // Stored before depth was limited: serializing it again would overflow the stack.
  const tooDeep = jsonDepthExcess(json);
  if (tooDeep !== undefined) {
    throw providerRuleViolation(rule, atMessage(messageId), `arguments of tool call "${call.id}" nest deeper than ${maxJsonDepth} levels at ${tooDeep}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    throw providerRuleViolation(rule, atMessage(messageId), `arguments of tool call "${call.id}" are not valid JSON`);
  }
  if (!isJsonObject(value)) {
    throw providerRuleViolation(rule, atMessage(messageId), `arguments of tool call "${call.id}" are not a JSON object`);
  }
  return value;
}

/** True for a plain JSON object (not null, not an array). */
export function isJsonObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
