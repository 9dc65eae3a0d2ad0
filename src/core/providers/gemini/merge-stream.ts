import { expectArray, expectObject, expectString, malformed, optionalString, type JsonObject } from "../json-reader.js";
import { mergeStreamEvents, type MergedStream } from "../stream-events.js";

/** A text part being streamed; other parts arrive whole and are kept as they came. */
interface StreamedText {
  text: string[];
  thought: boolean;
  signature: string;
}

type StreamedPart = { text: StreamedText } | { whole: JsonObject };

/**
 * Gemini `streamGenerateContent` chunks (each a `GenerateContentResponse` with one candidate) →
 * the `generateContent` body they stand for: the candidate's parts in order, where a text part
 * continues the text part before it when both are thoughts or both are not and the earlier one
 * has no `thoughtSignature` yet (a signature ends its part: Gemini sends it on the last part of
 * what it signs, often as `{"text": "", "thoughtSignature": ...}`). Function calls, inline data and
 * signature-only parts arrive whole. Complete when a chunk has a `finishReason`. A chunk without
 * candidates is a blocked prompt (`promptFeedback`) and ends the stream without completing it.
 */
export function mergeGeminiStream(events: readonly Uint8Array[]): MergedStream {
  const parts: StreamedPart[] = [];
  let complete = false;
  let failure = "";
  return mergeStreamEvents(events, "Gemini streamGenerateContent", {
    accept(chunk) {
      if (chunk["candidates"] === undefined) {
        if (chunk["promptFeedback"] !== undefined) failure = `the stream reported prompt blocked: ${JSON.stringify(chunk["promptFeedback"])}`;
        else if (chunk["error"] !== undefined) failure = `the stream reported error: ${JSON.stringify(chunk["error"])}`;
        return;
      }
      const candidates = expectArray(chunk["candidates"], "candidates");
      if (candidates.length === 0) return;
      if (candidates.length !== 1) throw malformed("candidates", `expected exactly one candidate, got ${candidates.length}`);
      const candidate = expectObject(candidates[0], "candidates[0]");
      if (candidate["index"] !== undefined && candidate["index"] !== 0) throw malformed("candidates[0].index", `expected candidate 0, got ${JSON.stringify(candidate["index"])}`);
      if (candidate["finishReason"] !== undefined && candidate["finishReason"] !== null) {
        expectString(candidate["finishReason"], "candidates[0].finishReason");
        complete = true;
      }
      if (candidate["content"] === undefined) return;
      const content = expectObject(candidate["content"], "candidates[0].content");
      const role = optionalString(content["role"], "candidates[0].content.role");
      if (role !== "model") throw malformed("candidates[0].content.role", `expected "model", got "${role}"`);
      (content["parts"] === undefined ? [] : expectArray(content["parts"], "candidates[0].content.parts")).forEach((value, index) => {
        const path = `candidates[0].content.parts[${index}]`;
        const part = expectObject(value, path);
        const signature = optionalString(part["thoughtSignature"], `${path}.thoughtSignature`);
        const isText = part["text"] !== undefined && part["functionCall"] === undefined && part["inlineData"] === undefined;
        if (!isText) {
          parts.push({ whole: part });
          return;
        }
        const text = expectString(part["text"], `${path}.text`);
        const thought = part["thought"] === true;
        const last = parts[parts.length - 1];
        if (last !== undefined && "text" in last && last.text.thought === thought && last.text.signature === "") {
          last.text.text.push(text);
          last.text.signature = signature;
        } else {
          parts.push({ text: { text: [text], thought, signature } });
        }
      });
    },
    finish() {
      const body = parts.map((part) => ("whole" in part ? part.whole : textBody(part.text)));
      const text = parts
        .map((part) => ("text" in part && !part.text.thought ? part.text.text.join("") : ""))
        .join("");
      return { body: { candidates: [{ content: { role: "model", parts: body } }] }, complete: complete && failure === "", text, failure };
    },
  });
}

function textBody(part: StreamedText): JsonObject {
  const body: JsonObject = { text: part.text.join("") };
  if (part.thought) body["thought"] = true;
  if (part.signature !== "") body["thoughtSignature"] = part.signature;
  return body;
}
