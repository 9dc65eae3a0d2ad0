import { expectObject, expectString, malformed, optionalString, type JsonObject } from "../json-reader.js";
import { eventType, expectStreamIndex, mergeStreamEvents, type MergedStream } from "../stream-events.js";

/** The output item types a Responses body may hold for contextd (parseOpenAIResponsesResponse). */
const knownItemTypes = new Set(["message", "reasoning", "function_call", "compaction"]);

/** Event types that carry nothing the body keeps (lifecycle, annotations, reasoning text). */
const ignoredEventTypes = new Set([
  "response.created",
  "response.queued",
  "response.in_progress",
  "response.content_part.done",
  "response.output_text.done",
  "response.refusal.done",
  "response.function_call_arguments.done",
  "response.reasoning_summary_part.done",
  "response.reasoning_summary_text.done",
  "response.output_text.annotation.added",
  "response.reasoning_text.delta",
  "response.reasoning_text.done",
]);

interface StreamedPart {
  type: string;
  text: string[];
}

interface StreamedItem {
  /** The item as `output_item.added` announced it, replaced by `output_item.done`'s. */
  item: JsonObject;
  done: boolean;
  content: StreamedPart[];
  summary: string[][];
  arguments: string[];
}

/**
 * OpenAI Responses SSE events → the `response` body they stand for. Items are gathered by
 * `output_index`: `response.output_item.done` gives an item whole (with `encrypted_content`); an
 * item whose done event never came is rebuilt from its `added` event and the deltas
 * (`output_text`, `refusal`, `function_call_arguments`, `reasoning_summary_text`). Complete at
 * `response.completed` or `response.incomplete` (the model stopped early, as a body with status
 * "incomplete" says); `response.failed` and `error` end the stream without completing it. Other
 * `response.*` events carry nothing the body keeps and are skipped; an item type contextd cannot
 * send back (built-in tools) is refused at the event that announces it.
 */
export function mergeOpenAIResponsesStream(events: readonly Uint8Array[]): MergedStream {
  const items: StreamedItem[] = [];
  let complete = false;
  let failure = "";

  const itemAt = (event: JsonObject): StreamedItem => {
    const index = expectStreamIndex(event["output_index"], "output_index", items.length);
    const item = items[index];
    if (item === undefined) throw malformed("output_index", `no output item ${index} was added before this event`);
    return item;
  };
  const partAt = (item: StreamedItem, event: JsonObject, type: string): StreamedPart => {
    const index = expectStreamIndex(event["content_index"], "content_index", item.content.length);
    if (index === item.content.length) item.content.push({ type, text: [] });
    const part = item.content[index]!;
    if (part.type !== type) throw malformed("content_index", `content part ${index} is ${part.type}, not ${type}`);
    return part;
  };
  const checkedItem = (event: JsonObject): JsonObject => {
    const item = expectObject(event["item"], "item");
    const type = expectString(item["type"], "item.type");
    if (!knownItemTypes.has(type)) throw malformed("item.type", `unknown output item type "${type}"`);
    return item;
  };

  return mergeStreamEvents(events, "OpenAI Responses", {
    accept(event) {
      const type = eventType(event);
      switch (type) {
        case "response.output_item.added": {
          const index = expectStreamIndex(event["output_index"], "output_index", items.length);
          if (index !== items.length) throw malformed("output_index", `output item ${index} was already added`);
          items.push({ item: checkedItem(event), done: false, content: [], summary: [], arguments: [] });
          return;
        }
        case "response.output_item.done": {
          const item = itemAt(event);
          item.item = checkedItem(event);
          item.done = true;
          return;
        }
        case "response.content_part.added": {
          const item = itemAt(event);
          const part = expectObject(event["part"], "part");
          partAt(item, event, expectString(part["type"], "part.type"));
          return;
        }
        case "response.output_text.delta":
          partAt(itemAt(event), event, "output_text").text.push(expectString(event["delta"], "delta"));
          return;
        case "response.refusal.delta":
          partAt(itemAt(event), event, "refusal").text.push(expectString(event["delta"], "delta"));
          return;
        case "response.function_call_arguments.delta":
          itemAt(event).arguments.push(expectString(event["delta"], "delta"));
          return;
        case "response.reasoning_summary_part.added":
        case "response.reasoning_summary_text.delta": {
          const item = itemAt(event);
          const index = expectStreamIndex(event["summary_index"], "summary_index", item.summary.length);
          if (index === item.summary.length) item.summary.push([]);
          if (type === "response.reasoning_summary_text.delta") item.summary[index]!.push(expectString(event["delta"], "delta"));
          return;
        }
        case "response.completed":
        case "response.incomplete":
          complete = true;
          return;
        case "response.failed": {
          const response = expectObject(event["response"], "response");
          failure = `the stream reported response.failed: ${JSON.stringify(response["error"] ?? null)}`;
          return;
        }
        case "error":
          failure = `the stream reported error ${optionalString(event["code"], "code")}: ${optionalString(event["message"], "message")}`;
          return;
        default:
          if (ignoredEventTypes.has(type) || type.startsWith("response.")) return;
          throw malformed("type", `unknown event type "${type}"`);
      }
    },
    finish() {
      const output = items.map(rebuiltItem);
      const text = output
        .filter((item) => item["type"] === "message" && Array.isArray(item["content"]))
        .flatMap((item) => (item["content"] as unknown[]).map(visibleText))
        .join("");
      return { body: { object: "response", output }, complete: complete && failure === "", text, failure };
    },
  });
}

/** The text of a message content part (output_text or refusal), "" for anything else. */
function visibleText(part: unknown): string {
  if (typeof part !== "object" || part === null) return "";
  const record = part as JsonObject;
  if (typeof record["text"] === "string") return record["text"];
  return typeof record["refusal"] === "string" ? record["refusal"] : "";
}

function rebuiltItem(streamed: StreamedItem): JsonObject {
  const item = streamed.item;
  if (streamed.done) return item;
  switch (item["type"]) {
    case "message":
      return {
        ...item,
        content: streamed.content.map((part) => (part.type === "refusal" ? { type: "refusal", refusal: part.text.join("") } : { type: part.type, text: part.text.join("") })),
      };
    case "function_call":
      return { ...item, arguments: streamed.arguments.length > 0 ? streamed.arguments.join("") : (item["arguments"] ?? "") };
    case "compaction":
      // No deltas build a compaction item: its added event has it whole, or the parser names what is missing.
      return item;
    default:
      return { ...item, summary: streamed.summary.map((text) => ({ type: "summary_text", text: text.join("") })) };
  }
}
