import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { TransformationAction, TransformationReason, type LargeToolResults } from "#gen/contextd/v1/compile_pb";
import { Role, ToolPayloadSchema, type Message, type Part } from "#gen/contextd/v1/message_pb";
import { ToolDefinitionSchema, type ToolDefinition } from "#gen/contextd/v1/state_pb";
import { toolPayloadText } from "../model/payload-text.js";
import { segmentEnumerationOrder, segmentField } from "../model/segments.js";
import { utf8Head } from "../model/utf8-slice.js";
import { setRecord, type CompileWork } from "./working-set.js";

/**
 * Why it exists: in coding agents a few tool results (a whole file, a search over a repository,
 * a test log) are most of the context, and the model rarely needs them whole after the turn that
 * asked. Cutting them blindly loses what the model might want; keeping them pushes everything else
 * out. A preview keeps the head and says how to read the rest, and because it depends only on
 * the message and the options, every compile sends the same bytes for it: the provider's prompt
 * cache keeps hitting.
 */

export const readToolResultName = "read_tool_result";
export const defaultMinBytes = 16_384;
export const defaultPreviewBytes = 1_024;
const maxExcludedTools = 256;

/** The tool the model calls to read a previewed result; the agent answers it with `ConversationService.ReadToolResult`. */
export const readToolResultDefinition: ToolDefinition = create(ToolDefinitionSchema, {
  name: readToolResultName,
  description:
    "Read a tool result that was shown only in part. Give the tool_call_id the preview names; read from offset (UTF-8 bytes, 0 = the start) up to max_bytes (default 65536). The answer says where the next slice starts.",
  parameters: JSON.stringify({
    type: "object",
    properties: {
      tool_call_id: { type: "string", description: "The call id the preview names." },
      offset: { type: "integer", minimum: 0, description: "Where to start, in UTF-8 bytes." },
      max_bytes: { type: "integer", minimum: 1, maximum: 1_048_576, description: "The most bytes to read." },
    },
    required: ["tool_call_id"],
    additionalProperties: false,
  }),
});

/** The preview a large result is sent as: a line naming the tool, the size and the handle, then the head. */
export function toolResultPreview(name: string, toolCallId: string, text: string, previewBytes: number): string {
  const head = utf8Head(text, previewBytes);
  return `[${name === "" ? "tool" : name} result of ${head.totalBytes} bytes, the first ${head.bytes} shown; read more with ${readToolResultName}(tool_call_id "${toolCallId}", offset ${head.bytes})]\n${head.text}`;
}

function validated(options: LargeToolResults): { minBytes: number; previewBytes: number; excluded: ReadonlySet<string> } {
  const minBytes = options.minBytes === 0 ? defaultMinBytes : options.minBytes;
  const previewBytes = options.previewBytes === 0 ? Math.min(defaultPreviewBytes, minBytes) : options.previewBytes;
  if (previewBytes > minBytes) {
    throw new ConnectError(`large_tool_results.preview_bytes (${previewBytes}) must not be over min_bytes (${minBytes})`, Code.InvalidArgument);
  }
  if (options.excludeTools.length > maxExcludedTools) {
    throw new ConnectError(`large_tool_results.exclude_tools lists ${options.excludeTools.length} names, at most ${maxExcludedTools} are allowed`, Code.InvalidArgument);
  }
  return { minBytes, previewBytes, excluded: new Set(options.excludeTools) };
}

/**
 * Presentation stage (before hooks): every tool result in the segments whose text is over
 * `min_bytes` becomes its preview; with `add_read_tool`, the payload gains the read tool.
 */
export function sendLargeToolResultsAsPreviews(work: CompileWork): void {
  const options = work.request.largeToolResults;
  if (!options) return;
  const { minBytes, previewBytes, excluded } = validated(options);
  if (options.addReadTool && !work.toolDefinitions.some((definition) => definition.name === readToolResultName)) {
    work.toolDefinitions = [...work.toolDefinitions, readToolResultDefinition];
  }
  for (const segment of segmentEnumerationOrder) {
    const field = segmentField(segment, "segment");
    const messages = work.segments[field];
    let edited: Message[] | undefined;
    messages.forEach((message, index) => {
      if (message.role !== Role.TOOL) return;
      let changed = false;
      const parts = message.parts.map((part): Part => {
        if (part.kind.case !== "toolResult") return part;
        const result = part.kind.value;
        // A JSON or binary payload is previewed by its plain text, as text-only providers see it.
        const text = toolPayloadText(result.payload);
        // Length in UTF-16 units is at most the UTF-8 length: shorter texts need no byte count.
        if (text.length * 3 <= minBytes || excluded.has(result.name) || Buffer.byteLength(text, "utf8") <= minBytes) return part;
        changed = true;
        return { ...part, kind: { case: "toolResult", value: { ...result, payload: create(ToolPayloadSchema, { text: toolResultPreview(result.name, result.toolCallId, text, previewBytes) }) } } };
      });
      if (!changed) return;
      edited ??= [...messages];
      edited[index] = { ...message, parts };
      setRecord(work, message.id, TransformationAction.FORMATTED, TransformationReason.TOOL_RESULT_REFERENCED, segment);
    });
    if (edited) work.segments = { ...work.segments, [field]: edited };
  }
}
