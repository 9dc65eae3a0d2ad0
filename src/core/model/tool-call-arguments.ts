import { Code, ConnectError } from "@connectrpc/connect";
import type { Message, ToolCallPart } from "#gen/contextd/v1/message_pb";
import { ErrorReason, withErrorDetails } from "./error-details.js";
import { describeJsonValue } from "./json-value-description.js";

/**
 * Why it exists: tool-call arguments are a JSON object for every provider (Anthropic `input` and
 * Gemini `args` take an object; OpenAI's string is one serialised), but nothing checked them on
 * the way in. `"city=Oslo"` was accepted at commit, and from then on every Anthropic or Gemini
 * compile of that conversation failed: it was bricked by what it had been allowed to store. The
 * check runs where messages enter (commit, provider-response ingestion, compile requests), and
 * stored calls from before it are repaired at compile (see `tool-arguments-repair.ts`).
 */

/** The arguments as JSON text: `data`, else `text`, else "" (no arguments, sent as `{}`). */
export function toolArgumentsText(call: ToolCallPart): string {
  const args = call.arguments;
  if (args?.data) return args.data;
  if (args?.text) return args.text;
  return "";
}

/**
 * Calls whose arguments are known to be a JSON object. Parts are never mutated (states are
 * immutable), so the fact holds while the part lives; a stored history is compiled again and
 * again, and its calls are parsed once.
 */
const objectArguments = new WeakSet<ToolCallPart>();

/** What is wrong with the call's arguments ("not valid JSON", "not a JSON object"), or undefined. */
export function toolArgumentsProblem(call: ToolCallPart): string | undefined {
  if (objectArguments.has(call)) return undefined;
  const text = toolArgumentsText(call);
  if (text !== "") {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      return "not valid JSON";
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) return `not a JSON object but ${describeJsonValue(value)}`;
  }
  objectArguments.add(call);
  return undefined;
}

/** The first tool call of a message whose arguments are not a JSON object, with its part index. */
export function firstInvalidToolCall(message: Message): { index: number; call: ToolCallPart; problem: string } | undefined {
  const parts = message.parts;
  for (let index = 0; index < parts.length; index++) {
    const kind = parts[index]!.kind;
    if (kind.case !== "toolCall") continue;
    const problem = toolArgumentsProblem(kind.value);
    if (problem !== undefined) return { index, call: kind.value, problem };
  }
  return undefined;
}

/**
 * INVALID_ARGUMENT for the first tool call of `message` whose arguments are not a JSON object,
 * naming the field path, the call and the message: `messages[0].parts[1].tool_call.arguments: the
 * arguments of tool call "c1" must be a JSON object, got "city=Oslo" (not valid JSON) (message "a1")`.
 */
export function assertToolArgumentsAreObjects(message: Message, path: string, messageId = message.id): void {
  const invalid = firstInvalidToolCall(message);
  if (!invalid) return;
  const id = messageId === "" ? "" : ` (message "${messageId}")`;
  const field = `${path}.parts[${invalid.index}].tool_call.arguments`;
  const description = `the arguments of tool call "${invalid.call.id}" must be a JSON object, got ${preview(toolArgumentsText(invalid.call))} (${invalid.problem})${id}`;
  throw withErrorDetails(new ConnectError(`${field}: ${description}`, Code.InvalidArgument), ErrorReason.toolArgumentsInvalid, {
    metadata: { tool_call_id: invalid.call.id, ...(messageId === "" ? {} : { message_id: messageId }) },
    fieldViolations: [{ field, description }],
  });
}

/**
 * True when every invalid call of `message` is stored as it is in the message with the same id
 * among `stored`: re-storing what a conversation already holds (a compile-commit's writeback, a
 * replace_segment that rewrites other messages) must not fail on calls stored before the check,
 * or such a conversation could never be written again. Only consulted for a failing message.
 */
export function keepsStoredInvalidCalls(message: Message, stored: readonly Message[]): boolean {
  const earlier = stored.find((candidate) => candidate.id === message.id);
  if (!earlier) return false;
  for (const part of message.parts) {
    if (part.kind.case !== "toolCall" || toolArgumentsProblem(part.kind.value) === undefined) continue;
    const call = part.kind.value;
    const same = earlier.parts.some((old) => old.kind.case === "toolCall" && old.kind.value.id === call.id && toolArgumentsText(old.kind.value) === toolArgumentsText(call));
    if (!same) return false;
  }
  return true;
}

/** The text quoted for an error, cut at 60 characters. */
function preview(text: string): string {
  return JSON.stringify(text.length > 60 ? `${text.slice(0, 60)}…` : text);
}
