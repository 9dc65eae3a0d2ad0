import { Code, ConnectError } from "@connectrpc/connect";
import type { Message, Part } from "#gen/contextd/v1/message_pb";

/**
 * Why it exists: `JSON.parse` is iterative in V8 but `JSON.stringify` (and any recursive walk) is
 * not: tool arguments nested 100,000 deep parsed fine, were stored, and every later Anthropic or
 * Gemini render (which parses and re-serializes them) died of a stack overflow, as INTERNAL. JSON a
 * caller hands in is measured here, in one linear pass without parsing, and refused past the limit
 * before anything is stored or rendered.
 */

/** Deepest nesting of arrays and objects accepted in JSON from a caller (a document `[[1]]` is depth 2). */
export const maxJsonDepth = 64;

/**
 * The JSON path ("$.a[3].b") of the first array or object nested deeper than `maxJsonDepth` in
 * `text`, or undefined. Strings are skipped; text that is not JSON is measured by its brackets too.
 */
export function jsonDepthExcess(text: string, limit = maxJsonDepth): string | undefined {
  // Fast path: fewer brackets than the limit cannot nest past it.
  if (text.length <= limit) return undefined;
  // One entry per open container: the array index so far, or the last key (objects).
  const steps: (number | string)[] = [];
  const isArray: boolean[] = [];
  let lastString = "";
  for (let index = 0; index < text.length; index++) {
    const unit = text.charCodeAt(index);
    if (unit === 0x22 /* " */) {
      const start = index + 1;
      for (index = start; index < text.length; index++) {
        const inner = text.charCodeAt(index);
        if (inner === 0x5c /* \ */) index++;
        else if (inner === 0x22) break;
      }
      // Only needed for the path of an error; slicing every string would cost a copy each.
      lastString = index - start <= 64 ? text.slice(start, index) : `${text.slice(start, start + 61)}...`;
    } else if (unit === 0x3a /* : */) {
      if (steps.length > 0 && !isArray[isArray.length - 1]) steps[steps.length - 1] = lastString;
    } else if (unit === 0x2c /* , */) {
      const top = steps.length - 1;
      if (top >= 0 && isArray[top]) steps[top] = (steps[top] as number) + 1;
    } else if (unit === 0x5b /* [ */ || unit === 0x7b /* { */) {
      if (steps.length >= limit) return jsonPath(steps, isArray);
      steps.push(unit === 0x5b ? 0 : "");
      isArray.push(unit === 0x5b);
    } else if (unit === 0x5d /* ] */ || unit === 0x7d /* } */) {
      steps.pop();
      isArray.pop();
    }
  }
  return undefined;
}

function jsonPath(steps: readonly (number | string)[], isArray: readonly boolean[]): string {
  let path = "$";
  steps.forEach((step, index) => {
    if (isArray[index]) path += `[${step}]`;
    else path += /^[A-Za-z_][A-Za-z0-9_]*$/.test(step as string) ? `.${step}` : `[${JSON.stringify(step)}]`;
  });
  return path;
}

/** INVALID_ARGUMENT naming `where` and the JSON path when `text` nests deeper than `maxJsonDepth`. */
export function assertJsonDepth(text: string, where: string): void {
  const path = jsonDepthExcess(text);
  if (path !== undefined) {
    throw new ConnectError(`${where}: JSON nested deeper than ${maxJsonDepth} levels at ${path}`, Code.InvalidArgument);
  }
}

/**
 * Checks the JSON a message carries: tool-call arguments (`data`, and `text`, which providers get
 * as the arguments too) and tool-result `data`, nested content parts included. `path` names the message.
 */
export function assertMessageJsonDepth(message: Message, path: string): void {
  assertPartsJsonDepth(message.parts, `${path}.parts`);
}

function assertPartsJsonDepth(parts: readonly Part[], path: string): void {
  for (let index = 0; index < parts.length; index++) {
    const kind = parts[index]!.kind;
    if (kind.case === "toolCall") {
      const args = kind.value.arguments;
      if (args?.data) assertJsonDepth(args.data, `${path}[${index}].tool_call.arguments.data`);
      if (args?.text) assertJsonDepth(args.text, `${path}[${index}].tool_call.arguments.text`);
    } else if (kind.case === "toolResult") {
      const data = kind.value.payload?.data;
      if (data) assertJsonDepth(data, `${path}[${index}].tool_result.payload.data`);
      if (kind.value.contentParts.length > 0) assertPartsJsonDepth(kind.value.contentParts, `${path}[${index}].tool_result.content_parts`);
    }
  }
}
