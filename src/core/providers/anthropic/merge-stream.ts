import { expectArray, expectString, malformed, optionalString, type JsonObject } from "../json-reader.js";
import { jsonDepthExcess, maxJsonDepth } from "../../model/json-depth.js";
import { eventObject, eventType, expectStreamIndex, mergeStreamEvents, type MergedStream } from "../stream-events.js";

/** A content block being streamed: the start event's block plus the deltas so far. */
interface StreamedBlock {
  type: "text" | "thinking" | "redacted_thinking" | "tool_use" | "compaction";
  /** The block as `content_block_start` gave it. */
  start: JsonObject;
  text: string[];
  signature: string[];
  json: string[];
  stopped: boolean;
  /** The event that started the block, for errors found when it is closed. */
  startEvent: number;
  /**
   * A compaction block's `content` and `encrypted_content` as the last `compaction_delta` gave
   * them: each delta carries the final value (as the SDK's stream accumulator assigns it), not a piece.
   */
  compaction?: { content?: unknown; encrypted_content?: unknown };
}

const blockTypes = new Set(["text", "thinking", "redacted_thinking", "tool_use", "compaction"]);

/** Which block type each delta type extends. `citations_delta` adds nothing a body keeps. */
const deltaBlockType: Record<string, StreamedBlock["type"]> = {
  text_delta: "text",
  thinking_delta: "thinking",
  signature_delta: "thinking",
  input_json_delta: "tool_use",
  citations_delta: "text",
  compaction_delta: "compaction",
};

/**
 * Anthropic Messages SSE events → the `message` body they stand for. `message_start` gives the
 * message, `content_block_start` opens block `index` (text, thinking, redacted_thinking, tool_use, compaction:
 * the types a body may hold), `content_block_delta` extends it (`text_delta`, `thinking_delta`,
 * `signature_delta`, `input_json_delta`: the tool input's JSON text, parsed when the block stops;
 * `compaction_delta`: a compaction block's final `content` and `encrypted_content`),
 * `content_block_stop` closes it. Complete at `message_stop`; an `error` event ends the stream
 * without completing it; `ping` and `message_delta` carry nothing the body keeps.
 */
export function mergeAnthropicStream(events: readonly Uint8Array[]): MergedStream {
  const blocks: StreamedBlock[] = [];
  const inputs = new Map<StreamedBlock, unknown>();
  let started = false;
  let complete = false;
  let failure = "";
  let eventIndex = -1;

  const openBlock = (event: JsonObject, what: string): StreamedBlock => {
    const index = expectStreamIndex(event["index"], "index", blocks.length);
    const block = blocks[index];
    if (block === undefined) throw malformed("index", `${what} for block ${index}, which was not started`);
    if (block.stopped) throw malformed("index", `${what} for block ${index}, which was already stopped`);
    return block;
  };

  return mergeStreamEvents(events, "Anthropic Messages", {
    accept(event) {
      eventIndex++;
      const type = eventType(event);
      if (!started && type !== "ping" && type !== "message_start" && type !== "error") throw malformed("type", `expected message_start first, got "${type}"`);
      switch (type) {
        case "message_start": {
          if (started) throw malformed("type", "a second message_start");
          started = true;
          const message = eventObject(event, "message");
          const messageType = expectString(message["type"], "message.type");
          if (messageType !== "message") throw malformed("message.type", `expected "message", got "${messageType}"`);
          const role = expectString(message["role"], "message.role");
          if (role !== "assistant") throw malformed("message.role", `expected "assistant", got "${role}"`);
          const content = message["content"] === undefined ? [] : expectArray(message["content"], "message.content");
          if (content.length > 0) throw malformed("message.content", "expected no content in message_start: content arrives in content_block events");
          return;
        }
        case "content_block_start": {
          const index = expectStreamIndex(event["index"], "index", blocks.length);
          if (index !== blocks.length) throw malformed("index", `block ${index} was already started`);
          const start = eventObject(event, "content_block");
          const blockType = expectString(start["type"], "content_block.type");
          if (!blockTypes.has(blockType)) throw malformed("content_block.type", `unknown content block type "${blockType}"`);
          if (blockType === "tool_use") {
            expectString(start["id"], "content_block.id");
            expectString(start["name"], "content_block.name");
          }
          if (blockType === "redacted_thinking") expectString(start["data"], "content_block.data");
          const initialText = blockType === "text" ? optionalString(start["text"], "content_block.text") : blockType === "thinking" ? optionalString(start["thinking"], "content_block.thinking") : "";
          const initialSignature = blockType === "thinking" ? optionalString(start["signature"], "content_block.signature") : "";
          blocks.push({
            type: blockType as StreamedBlock["type"],
            start,
            text: initialText === "" ? [] : [initialText],
            signature: initialSignature === "" ? [] : [initialSignature],
            json: [],
            stopped: false,
            startEvent: eventIndex,
          });
          return;
        }
        case "content_block_delta": {
          const block = openBlock(event, "a delta");
          const delta = eventObject(event, "delta");
          const deltaType = expectString(delta["type"], "delta.type");
          const extends_ = deltaBlockType[deltaType];
          if (extends_ === undefined) throw malformed("delta.type", `unknown delta type "${deltaType}"`);
          if (extends_ !== block.type) throw malformed("delta.type", `a ${deltaType} cannot extend a ${block.type} block`);
          if (deltaType === "text_delta") block.text.push(expectString(delta["text"], "delta.text"));
          else if (deltaType === "thinking_delta") block.text.push(expectString(delta["thinking"], "delta.thinking"));
          else if (deltaType === "signature_delta") block.signature.push(expectString(delta["signature"], "delta.signature"));
          else if (deltaType === "input_json_delta") block.json.push(expectString(delta["partial_json"], "delta.partial_json"));
          else if (deltaType === "compaction_delta") block.compaction = compactionDelta(delta, block.compaction);
          return;
        }
        case "content_block_stop": {
          const block = openBlock(event, "a stop");
          block.stopped = true;
          if (block.type === "tool_use") inputs.set(block, toolInput(block));
          return;
        }
        case "message_stop":
          complete = true;
          return;
        case "error": {
          const error = event["error"] === undefined ? {} : eventObject(event, "error");
          failure = `the stream reported error ${optionalString(error["type"], "error.type")}: ${optionalString(error["message"], "error.message")}`;
          return;
        }
        case "ping":
        case "message_delta":
          return;
        default:
          throw malformed("type", `unknown event type "${type}"`);
      }
    },
    finish() {
      const content = blocks.map((block) => blockBody(block, inputs.get(block)));
      const text = blocks
        .filter((block) => block.type === "text")
        .map((block) => block.text.join(""))
        .join("");
      const unstopped = blocks.findIndex((block) => !block.stopped);
      return { body: { type: "message", role: "assistant", content }, complete: complete && failure === "" && unstopped < 0, text, failure: failure || unstoppedFailure(blocks, unstopped) };
    },
  });
}

/** A `compaction_delta`'s values over the block's so far; `encrypted_content` only when the delta has the key. */
function compactionDelta(delta: JsonObject, before: StreamedBlock["compaction"]): NonNullable<StreamedBlock["compaction"]> {
  if (!("content" in delta)) throw malformed("delta.content", "a compaction_delta carries the block's content (a string or null)");
  const content = delta["content"];
  if (content !== null) expectString(content, "delta.content");
  const next: NonNullable<StreamedBlock["compaction"]> = { ...before, content };
  if ("encrypted_content" in delta) {
    if (delta["encrypted_content"] !== null) expectString(delta["encrypted_content"], "delta.encrypted_content");
    next.encrypted_content = delta["encrypted_content"];
  }
  return next;
}

function unstoppedFailure(blocks: readonly StreamedBlock[], index: number): string {
  return index < 0 ? "" : `content block ${index} (started at events[${blocks[index]!.startEvent}]) never stopped`;
}

/** The tool input: the concatenated `partial_json`, or the start block's `input` when none came. */
function toolInput(block: StreamedBlock): unknown {
  const json = block.json.join("");
  if (json === "") return block.start["input"] ?? {};
  const tooDeep = jsonDepthExcess(json);
  if (tooDeep !== undefined) throw malformed("index", `the input_json_delta text of the tool_use block started at events[${block.startEvent}] nests deeper than ${maxJsonDepth} levels at ${tooDeep}`);
  let input: unknown;
  try {
    input = JSON.parse(json);
  } catch (error) {
    throw malformed("index", `the input_json_delta text of the tool_use block started at events[${block.startEvent}] is not JSON: ${(error as Error).message}`);
  }
  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    throw malformed("index", `the input_json_delta text of the tool_use block started at events[${block.startEvent}] is not a JSON object`);
  }
  return input;
}

function blockBody(block: StreamedBlock, input: unknown): JsonObject {
  switch (block.type) {
    case "text":
      return { type: "text", text: block.text.join("") };
    case "thinking":
      return { type: "thinking", thinking: block.text.join(""), signature: block.signature.join("") };
    case "redacted_thinking":
      return { type: "redacted_thinking", data: block.start["data"] };
    case "tool_use":
      return { type: "tool_use", id: block.start["id"], name: block.start["name"], input: input ?? {} };
    case "compaction":
      // The start block's fields (signature, tool_changes) with the deltas' values over them.
      return { ...block.start, ...block.compaction };
  }
}
