import { jsonDepthExcess } from "../../model/json-depth.js";
import type { CompiledPayload } from "#gen/contextd/v1/compile_pb";
import { Provider, Role, type Message, type Part, type ToolResultPart } from "#gen/contextd/v1/message_pb";
import { toolPayloadText } from "../../model/payload-text.js";
import type { BodyOrigin } from "../body-origin.js";
import { base64, inlineImage, type InlineMedia } from "../media.js";
import { mediaPlan, type MediaPolicy } from "../media-capabilities.js";
import { isInstructionRole, messagesInRenderingOrder } from "../rendering-order.js";
import { CallIdAssignment, callIdRules, type RenamedCallId } from "../rendered-ids.js";
import { isSummary } from "../summary-role.js";
import { atMessage, providerRuleViolation } from "../rule-violation.js";
import { isJsonObject, toolArgumentsObject } from "../tool-arguments.js";
import { toolParametersSchema } from "../tool-definitions.js";
import type { GeminiBody, GeminiContent, GeminiFunctionResponse, GeminiPart } from "./body.js";

/** A Gemini body and, for each content, the first payload message merged into it. */
export interface RenderedGemini {
  body: GeminiBody;
  origins: BodyOrigin[];
  /** Tool-call ids sent in another form than stored (`rendered-ids.ts`). */
  renamed: RenamedCallId[];
}

/**
 * Renders the payload as Gemini `systemInstruction`, `contents` and `tools`.
 * - SYSTEM and DEVELOPER messages of the system segment become `systemInstruction`; instruction
 *   messages elsewhere (memory, tools segment, scratch) become user text in place.
 * - TOOL messages become a user content holding only `functionResponse` parts. Inline media a tool
 *   returned (images, and files of the types Gemini takes there) go inside their function response
 *   as `parts[].inlineData`, Gemini's form for multimodal function responses. What cannot go
 *   there (text content parts, media by URL, other parts of TOOL messages) follows in a separate
 *   user content, since Gemini never mixes function responses with other user parts. Otherwise
 *   same-role turns merge.
 * - Reasoning is sent only when Gemini produced it: a thought part (`thought: true`) with its
 *   `thoughtSignature`. A text part's `signature` goes back as that part's `thoughtSignature`
 *   (other providers never see it); a text part that is empty but signed is still sent, since the
 *   signature is what Gemini needs.
 */
export function renderGemini(payload: CompiledPayload, _model: string, media: MediaPolicy): RenderedGemini {
  const systemParts: Array<{ text: string }> = [];
  const contents: GeminiContent[] = [];
  const origins: BodyOrigin[] = [];
  // Which contents hold function responses: they merge only with each other.
  const responseContents = new Set<GeminiContent>();
  const append = (role: "user" | "model", parts: GeminiPart[], message: Message, functionResponses: boolean) => {
    if (parts.length === 0) return;
    const last = contents[contents.length - 1];
    if (last && last.role === role && responseContents.has(last) === functionResponses) {
      last.parts.push(...parts);
      return;
    }
    const content: GeminiContent = { role, parts };
    if (functionResponses) responseContents.add(content);
    contents.push(content);
    origins.push({ messageId: message.id, role: message.role });
  };

  // Images and other parts of TOOL messages follow the whole run of function responses, so the
  // responses of one round stay in one content.
  let toolFollowUp: { parts: GeminiPart[]; origin: Message } | undefined;
  const flushToolFollowUp = () => {
    if (toolFollowUp) append("user", toolFollowUp.parts, toolFollowUp.origin, false);
    toolFollowUp = undefined;
  };
  // functionResponse needs the function name; a result that does not carry one takes its call's.
  const callNames = new Map<string, string>();
  const ids = new CallIdAssignment(callIdRules.gemini);
  for (const { message, segment } of messagesInRenderingOrder(payload)) {
    for (const part of message.parts) if (part.kind.case === "toolCall") callNames.set(part.kind.value.id, part.kind.value.name);
    if (segment === "system" && isInstructionRole(message.role)) {
      message.parts.forEach((part, index) => {
        if (part.kind.case !== "text") {
          throw providerRuleViolation("gemini.system_slot", atMessage(message.id), `part ${index} (${part.kind.case ?? "empty"}) cannot go in systemInstruction, which takes text only`);
        }
        if (part.kind.value.text !== "") systemParts.push({ text: part.kind.value.text });
      });
      continue;
    }
    if (message.role !== Role.TOOL) flushToolFollowUp();
    if (message.role === Role.TOOL) {
      const responses: GeminiPart[] = [];
      toolFollowUp ??= { parts: [], origin: message };
      const followUp = toolFollowUp.parts;
      message.parts.forEach((part, index) => {
        if (part.kind.case === "toolResult") {
          const response = functionResponse(part.kind.value, callNames, ids);
          for (const inner of part.kind.value.contentParts) {
            const inline = functionResponseMedia(inner);
            if (inline) (response.parts ??= []).push({ inlineData: inline });
            else followUp.push(...contentParts([inner], message, index, ids, media));
          }
          responses.push({ functionResponse: response });
        } else {
          followUp.push(...contentParts([part], message, index, ids, media));
        }
      });
      append("user", responses, message, true);
      continue;
    }
    // A summary is context, not a model turn: as user content it never heads the body as a model
    // turn (merged with a following function call, that is a body Gemini rejects).
    append(message.role === Role.ASSISTANT && !isSummary(message) ? "model" : "user", contentParts(message.parts, message, 0, ids, media), message, false);
  }

  flushToolFollowUp();

  const body: GeminiBody = { ...(systemParts.length > 0 ? { systemInstruction: { parts: systemParts } } : {}), contents };
  if (payload.toolDefinitions.length > 0) {
    body.tools = [
      {
        functionDeclarations: payload.toolDefinitions.map((definition) => ({
          name: definition.name,
          ...(definition.description !== "" ? { description: definition.description } : {}),
          parametersJsonSchema: toolParametersSchema(definition, "gemini"),
        })),
      },
    ];
  }
  return { body, origins, renamed: ids.renamed };
}

/**
 * Gemini wants an object: JSON object data is sent as is; a failed tool is `{error: text}` and
 * anything else `{output: value}`, the keys Gemini documents for function responses.
 */
function functionResponse(result: ToolResultPart, callNames: ReadonlyMap<string, string>, ids: CallIdAssignment): GeminiFunctionResponse {
  const text = toolPayloadText(result.payload);
  let response: Record<string, unknown>;
  if (result.isError || (result.payload?.error && result.payload.text === "" && result.payload.data === "")) {
    response = { error: text };
  } else if (result.payload?.text === "" && result.payload.data !== "") {
    let value: unknown = text;
    try {
      // Too deep to serialize again (stored before depth was limited): sent as text.
      if (jsonDepthExcess(result.payload.data) === undefined) value = JSON.parse(result.payload.data);
    } catch {
      // Not JSON after all: send the text.
    }
    response = isJsonObject(value) ? value : { output: value };
  } else {
    response = { output: text };
  }
  return { id: ids.result(result.toolCallId), name: result.name || (callNames.get(result.toolCallId) ?? ""), response };
}

/** The media types Gemini documents for inline data in function responses. */
const functionResponseMediaTypes: ReadonlySet<string> = new Set(["image/png", "image/jpeg", "image/webp", "application/pdf", "text/plain"]);

/** A tool result's content part as inline function-response media, or undefined when it cannot be one. */
function functionResponseMedia(part: Part): { mimeType: string; data: string } | undefined {
  const kind = part.kind;
  let media: InlineMedia | undefined;
  if (kind.case === "image") media = inlineImage(kind.value);
  else if (kind.case === "file" && kind.value.uri === "") media = { mimeType: kind.value.mimeType, base64: base64(kind.value.data) };
  if (!media || !functionResponseMediaTypes.has(media.mimeType)) return undefined;
  return { mimeType: media.mimeType, data: media.base64 };
}

/** Parts of a user or model turn. `firstIndex` offsets part numbers in errors. */
function contentParts(parts: readonly Part[], message: Message, firstIndex: number, ids: CallIdAssignment, media: MediaPolicy): GeminiPart[] {
  const rendered: GeminiPart[] = [];
  parts.forEach((part, offset) => {
    const index = firstIndex + offset;
    const kind = part.kind;
    switch (kind.case) {
      case "text":
        if (kind.value.signature !== "") rendered.push({ text: kind.value.text, thoughtSignature: kind.value.signature });
        else if (kind.value.text !== "") rendered.push({ text: kind.value.text });
        return;
      case "image": {
        if (!mediaPlan("gemini", message, index, { kind: "image", image: kind.value }, media).send) return;
        const inline = inlineImage(kind.value);
        rendered.push(
          inline
            ? { inlineData: { mimeType: inline.mimeType, data: inline.base64 } }
            : { fileData: { fileUri: kind.value.url, ...(kind.value.mimeType !== "" ? { mimeType: kind.value.mimeType } : {}) } },
        );
        return;
      }
      case "file":
        if (!mediaPlan("gemini", message, index, { kind: "file", file: kind.value }, media).send) return;
        rendered.push(
          kind.value.uri !== ""
            ? { fileData: { fileUri: kind.value.uri, ...(kind.value.mimeType !== "" ? { mimeType: kind.value.mimeType } : {}) } }
            : { inlineData: { mimeType: kind.value.mimeType, data: base64(kind.value.data) } },
        );
        return;
      // Another provider's compaction, which the compile's cut left (a failed one) or replaced.
      case "providerCompaction":
        return;
      case "reasoning":
        if (kind.value.provider !== Provider.GEMINI) return;
        rendered.push({ text: kind.value.text, thought: true, ...(kind.value.signature !== "" ? { thoughtSignature: kind.value.signature } : {}) });
        return;
      case "toolCall":
        rendered.push({
          functionCall: { id: ids.call(message.id, kind.value.id), name: kind.value.name, args: toolArgumentsObject(kind.value, message.id, "gemini.function_call_args") },
          ...(kind.value.signature !== "" ? { thoughtSignature: kind.value.signature } : {}),
        });
        return;
      default:
        throw providerRuleViolation("gemini.content_type", atMessage(message.id), `part ${index} (${kind.case ?? "empty"}) cannot be sent in a Gemini ${message.role === Role.ASSISTANT ? "model" : "user"} turn`);
    }
  });
  return rendered;
}
