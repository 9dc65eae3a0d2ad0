import { expectArray, expectObject, expectString, malformed, optionalArray, optionalString, type JsonObject } from "../json-reader.js";
import { expectStreamIndex, mergeStreamEvents, type MergedStream } from "../stream-events.js";

interface StreamedCall {
  id: string;
  type: string;
  name: string;
  arguments: string[];
}

/**
 * Chat Completions stream chunks (`chat.completion.chunk`) → the `chat.completion` body they stand
 * for: the deltas' `content` and `refusal` concatenated, tool calls gathered by their `index`
 * (id, type and name from the chunk that opens the call, `arguments` concatenated). Complete when a
 * chunk has a `finish_reason`, or at `[DONE]`. As for a body, one choice only (`index` 0); chunks
 * without choices (the usage chunk) carry nothing to merge; an `{"error": ...}` event ends the
 * stream without completing it.
 */
export function mergeOpenAIChatStream(events: readonly Uint8Array[]): MergedStream {
  const content: string[] = [];
  const refusal: string[] = [];
  let sawContent = false;
  let sawRefusal = false;
  const calls: StreamedCall[] = [];
  let complete = false;
  let failure = "";
  return mergeStreamEvents(
    events,
    "Chat Completions",
    {
      accept(chunk) {
        // A stream that fails midway sends `{"error": {...}}` instead of a chunk.
        if (chunk["error"] !== undefined && chunk["choices"] === undefined) {
          failure = `the stream reported error: ${JSON.stringify(chunk["error"])}`;
          return;
        }
        const object = optionalString(chunk["object"], "object");
        if (object !== "" && object !== "chat.completion.chunk") throw malformed("object", `expected "chat.completion.chunk", got "${object}"`);
        expectArray(chunk["choices"], "choices").forEach((value, index) => {
          const path = `choices[${index}]`;
          const choice = expectObject(value, path);
          if (choice["index"] !== undefined && choice["index"] !== 0) {
            throw malformed(`${path}.index`, `expected choice 0, got ${JSON.stringify(choice["index"])}: only one choice can be appended (n = 1)`);
          }
          if (choice["finish_reason"] !== undefined && choice["finish_reason"] !== null) {
            expectString(choice["finish_reason"], `${path}.finish_reason`);
            complete = true;
          }
          if (choice["delta"] === undefined || choice["delta"] === null) return;
          const delta = expectObject(choice["delta"], `${path}.delta`);
          if (delta["role"] !== undefined && delta["role"] !== null) {
            const role = expectString(delta["role"], `${path}.delta.role`);
            if (role !== "assistant") throw malformed(`${path}.delta.role`, `expected "assistant", got "${role}"`);
          }
          if (delta["content"] !== undefined && delta["content"] !== null) {
            content.push(expectString(delta["content"], `${path}.delta.content`));
            sawContent = true;
          }
          if (delta["refusal"] !== undefined && delta["refusal"] !== null) {
            refusal.push(expectString(delta["refusal"], `${path}.delta.refusal`));
            sawRefusal = true;
          }
          optionalArray(delta["tool_calls"], `${path}.delta.tool_calls`).forEach((callValue, callIndex) => {
            const callPath = `${path}.delta.tool_calls[${callIndex}]`;
            const call = expectObject(callValue, callPath);
            const slot = expectStreamIndex(call["index"], `${callPath}.index`, calls.length);
            const fn = call["function"] === undefined || call["function"] === null ? {} : expectObject(call["function"], `${callPath}.function`);
            if (slot === calls.length) {
              calls.push({
                // As in a body, the id may be missing (the commit gives one).
                id: optionalString(call["id"], `${callPath}.id`),
                type: optionalString(call["type"], `${callPath}.type`) || "function",
                name: expectString(fn["name"], `${callPath}.function.name`),
                arguments: [],
              });
            }
            const args = optionalString(fn["arguments"], `${callPath}.function.arguments`);
            if (args !== "") calls[slot]!.arguments.push(args);
          });
        });
      },
      finish() {
        const text = content.join("");
        const refused = refusal.join("");
        const message: JsonObject = { role: "assistant", content: sawContent ? text : null, refusal: sawRefusal ? refused : null };
        if (calls.length > 0) {
          message["tool_calls"] = calls.map((call) => ({ id: call.id, type: call.type, function: { name: call.name, arguments: call.arguments.join("") } }));
        }
        return { body: { object: "chat.completion", choices: [{ index: 0, message }] }, complete: complete && failure === "", text: text + refused, failure };
      },
    },
    () => {
      complete = true;
    },
  );
}
