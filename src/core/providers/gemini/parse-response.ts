import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { PartSchema, Provider, type Message, type Part } from "#gen/contextd/v1/message_pb";
import { assistantMessage, reasoningPart, textPart, toolArgumentsPayload, toolCallPart } from "../assistant-message.js";
import { expectArray, expectObject, expectString, malformed, optionalString, parseJsonObject } from "../json-reader.js";

/**
 * A Gemini `generateContent` response → one ASSISTANT message from its single candidate:
 * - a text part → text with its `thoughtSignature` (`TextPart.signature`); a thought part
 *   (`thought: true`) → reasoning (text + `thoughtSignature`); a part carrying nothing but a
 *   `thoughtSignature` → reasoning with only that signature;
 * - `functionCall` → a tool call with its `thoughtSignature`. Gemini often omits call ids; a
 *   missing id becomes "gemini_" + the first 24 hex digits of sha256(seed, part index, the call's
 *   JSON), so the same body appended twice needs a different `callIdSeed` to keep call ids unique.
 *   The call's JSON rather than the body's bytes: a streamed response (merge-stream.ts) merged
 *   into a body of other bytes must get the same ids as the body itself;
 * - `inlineData` → an image.
 * A response without candidates (a blocked prompt) or with several is INVALID_ARGUMENT.
 */
export function parseGeminiResponse(json: Uint8Array, callIdSeed: string): Message[] {
  const root = parseJsonObject(json, "Gemini generateContent");
  if (root["candidates"] === undefined) {
    const reason = typeof root["promptFeedback"] === "object" ? JSON.stringify(root["promptFeedback"]) : "none given";
    throw malformed("candidates", `missing (prompt feedback: ${reason})`);
  }
  const candidates = expectArray(root["candidates"], "candidates");
  if (candidates.length !== 1) throw malformed("candidates", `expected exactly one candidate, got ${candidates.length}`);
  const candidate = expectObject(candidates[0], "candidates[0]");
  if (candidate["content"] === undefined) return [];
  const content = expectObject(candidate["content"], "candidates[0].content");
  const role = optionalString(content["role"], "candidates[0].content.role");
  if (role !== "model") throw malformed("candidates[0].content.role", `expected "model", got "${role}"`);

  const parts: Part[] = [];
  (content["parts"] === undefined ? [] : expectArray(content["parts"], "candidates[0].content.parts")).forEach((value, index) => {
    const path = `candidates[0].content.parts[${index}]`;
    const part = expectObject(value, path);
    const signature = optionalString(part["thoughtSignature"], `${path}.thoughtSignature`);
    if (part["functionCall"] !== undefined) {
      const call = expectObject(part["functionCall"], `${path}.functionCall`);
      const args = call["args"] === undefined ? {} : expectObject(call["args"], `${path}.functionCall.args`);
      const id = optionalString(call["id"], `${path}.functionCall.id`) || syntheticCallId(callIdSeed, call, index);
      parts.push(toolCallPart(id, expectString(call["name"], `${path}.functionCall.name`), toolArgumentsPayload(JSON.stringify(args)), { signature }));
    } else if (part["text"] !== undefined) {
      const text = expectString(part["text"], `${path}.text`);
      parts.push(part["thought"] === true ? reasoningPart(Provider.GEMINI, { text, signature }) : textPart(text, signature));
    } else if (part["inlineData"] !== undefined) {
      const inline = expectObject(part["inlineData"], `${path}.inlineData`);
      const data = Buffer.from(expectString(inline["data"], `${path}.inlineData.data`), "base64");
      const mimeType = expectString(inline["mimeType"], `${path}.inlineData.mimeType`);
      parts.push(create(PartSchema, { kind: { case: "image", value: { data, mimeType } } }));
    } else if (signature !== "") {
      parts.push(reasoningPart(Provider.GEMINI, { signature }));
    } else {
      throw malformed(path, `unknown part (fields: ${Object.keys(part).join(", ") || "none"})`);
    }
  });
  return parts.length > 0 ? [assistantMessage(parts)] : [];
}

function syntheticCallId(seed: string, call: Record<string, unknown>, index: number): string {
  const hash = createHash("sha256").update(JSON.stringify([seed, index, call])).digest("hex");
  return `gemini_${hash.slice(0, 24)}`;
}
