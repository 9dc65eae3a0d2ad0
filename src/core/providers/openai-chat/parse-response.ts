import type { Message, Part } from "#gen/contextd/v1/message_pb";
import { assistantMessage, textPart, toolArgumentsPayload, toolCallPart } from "../assistant-message.js";
import { streamEventHint } from "../stream-events.js";
import { expectArray, expectObject, expectString, malformed, optionalArray, optionalString, parseJsonObject } from "../json-reader.js";

/**
 * A Chat Completions response (`chat.completion`) → one ASSISTANT message: text (a refusal is the
 * model's text too) and tool calls with their arguments. Exactly one choice is accepted: with n > 1
 * the choices are alternatives, and appending them all would be a conversation nobody had.
 */
export function parseOpenAIChatResponse(json: Uint8Array): Message[] {
  const root = parseJsonObject(json, "Chat Completions");
  if (root["object"] === "chat.completion.chunk") throw malformed("object", streamEventHint("chat.completion.chunk"));
  const choices = expectArray(root["choices"], "choices");
  if (choices.length !== 1) throw malformed("choices", `expected exactly one choice, got ${choices.length}`);
  const message = expectObject(expectObject(choices[0], "choices[0]")["message"], "choices[0].message");
  const path = "choices[0].message";
  const role = expectString(message["role"], `${path}.role`);
  if (role !== "assistant") throw malformed(`${path}.role`, `expected "assistant", got "${role}"`);

  const parts: Part[] = [];
  const content = message["content"];
  if (typeof content === "string") {
    if (content !== "") parts.push(textPart(content));
  } else if (content !== null && content !== undefined) {
    throw malformed(`${path}.content`, "expected a string or null");
  }
  const refusal = optionalString(message["refusal"], `${path}.refusal`);
  if (refusal !== "") parts.push(textPart(refusal));
  optionalArray(message["tool_calls"], `${path}.tool_calls`).forEach((value, index) => {
    const callPath = `${path}.tool_calls[${index}]`;
    const call = expectObject(value, callPath);
    const type = expectString(call["type"], `${callPath}.type`);
    if (type !== "function") throw malformed(`${callPath}.type`, `unknown tool call type "${type}"`);
    const fn = expectObject(call["function"], `${callPath}.function`);
    parts.push(
      toolCallPart(
        // Some OpenAI-compatible servers leave it out: the commit gives it `call_<message id>_<n>`.
        optionalString(call["id"], `${callPath}.id`),
        expectString(fn["name"], `${callPath}.function.name`),
        toolArgumentsPayload(expectString(fn["arguments"], `${callPath}.function.arguments`)),
      ),
    );
  });
  return parts.length > 0 ? [assistantMessage(parts)] : [];
}
