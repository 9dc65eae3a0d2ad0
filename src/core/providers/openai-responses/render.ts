import type { CompiledPayload } from "#gen/contextd/v1/compile_pb";
import { Provider, Role, type Message, type Part } from "#gen/contextd/v1/message_pb";
import { toolPayloadText } from "../../model/payload-text.js";
import type { BodyOrigin } from "../body-origin.js";
import { openAIImageDetail } from "../image-detail.js";
import { fileDataUrl, imageUrl } from "../media.js";
import { fileName, mediaPlan, type MediaPolicy } from "../media-capabilities.js";
import { messagesInRenderingOrder } from "../rendering-order.js";
import { CallIdAssignment, callIdRules, type RenamedCallId } from "../rendered-ids.js";
import { responsesPairs } from "./reasoning-pairs.js";
import { compactsHistory, responsesCompactionItem } from "../provider-compaction.js";
import { atMessage, providerRuleViolation } from "../rule-violation.js";
import { toolArgumentsJson } from "../tool-arguments.js";
import { toolParametersSchema } from "../tool-definitions.js";
import type { OpenAIResponsesBody, ResponsesInputContent, ResponsesInputItem } from "./body.js";

/** A Responses body and, for each input item, the payload message it came from. */
export interface RenderedOpenAIResponses {
  body: OpenAIResponsesBody;
  origins: BodyOrigin[];
  /** Tool-call ids sent in another form than stored (`rendered-ids.ts`). */
  renamed: RenamedCallId[];
}

/** Joins the system segment's SYSTEM texts into `instructions`. */
export const instructionsSeparator = "\n\n";

/**
 * Renders the payload as Responses `instructions`, `input` and `tools`.
 * - SYSTEM messages of the system segment become `instructions` (joined by a blank line); DEVELOPER
 *   messages and instruction messages of other segments (scratch last) stay in `input` as
 *   developer/system messages, in place.
 * - An assistant message becomes items in part order: `reasoning` (only Responses reasoning, with
 *   its id, summary and encrypted content byte for byte), assistant text, `function_call` (with its
 *   item `id` only beside the reasoning item it was produced with: `reasoning-pairs.ts`). Call ids
 *   are sent in the form Responses takes (`rendered-ids.ts`).
 * - A tool result becomes `function_call_output`; images a tool returned go in the output list.
 * - Function tools are sent with `strict: false`: contextd does not know whether a schema meets
 *   strict mode's rules, and the API's default (true) would reject those that do not.
 */
export function renderOpenAIResponses(payload: CompiledPayload, model: string, media: MediaPolicy): RenderedOpenAIResponses {
  const instructions: string[] = [];
  const input: ResponsesInputItem[] = [];
  const origins: BodyOrigin[] = [];
  const ids = new CallIdAssignment(callIdRules.openai_responses);
  const push = (item: ResponsesInputItem, message: Message) => {
    input.push(item);
    origins.push({ messageId: message.id, role: message.role });
  };

  for (const { message, segment } of messagesInRenderingOrder(payload)) {
    switch (message.role) {
      case Role.SYSTEM:
      case Role.DEVELOPER: {
        const content = message.parts.flatMap((part, index) => inputContent(part, message, index, "text", media));
        if (content.length === 0) break;
        if (segment === "system" && message.role === Role.SYSTEM) {
          instructions.push(...content.map((part) => (part as { text: string }).text));
          break;
        }
        push({ type: "message", role: message.role === Role.SYSTEM ? "system" : "developer", content: compact(content) }, message);
        break;
      }
      case Role.USER: {
        const content = message.parts.flatMap((part, index) => inputContent(part, message, index, "any", media));
        if (content.length > 0) push({ type: "message", role: "user", content: compact(content) }, message);
        break;
      }
      case Role.ASSISTANT: {
        const pairs = responsesPairs(message);
        message.parts.forEach((part, index) => {
          const kind = part.kind;
          switch (kind.case) {
            case "text":
              if (kind.value.text !== "") push({ type: "message", role: "assistant", content: kind.value.text }, message);
              return;
            case "reasoning":
              if (kind.value.provider !== Provider.OPENAI_RESPONSES || !pairs.reasoning.has(index)) return;
              push(
                {
                  type: "reasoning",
                  id: kind.value.itemId,
                  summary: kind.value.text !== "" ? [{ type: "summary_text", text: kind.value.text }] : [],
                  ...(kind.value.redactedData !== "" ? { encrypted_content: kind.value.redactedData } : {}),
                },
                message,
              );
              return;
            case "providerCompaction":
              // The compile's cut leaves the latest compaction item first; another provider's is never sent.
              if (kind.value.provider === Provider.OPENAI_RESPONSES && compactsHistory(kind.value)) push(responsesCompactionItem(kind.value, message.id), message);
              return;
            case "toolCall":
              push(
                {
                  type: "function_call",
                  ...(pairs.itemIds.has(index) ? { id: kind.value.itemId } : {}),
                  call_id: ids.call(message.id, kind.value.id),
                  name: kind.value.name,
                  arguments: toolArgumentsJson(kind.value),
                },
                message,
              );
              return;
            default:
              throw providerRuleViolation("openai_responses.content_type", atMessage(message.id), `part ${index} (${kind.case ?? "empty"}) cannot be sent in an assistant message`);
          }
        });
        break;
      }
      case Role.TOOL: {
        const extra: ResponsesInputContent[] = [];
        message.parts.forEach((part, index) => {
          if (part.kind.case !== "toolResult") {
            extra.push(...inputContent(part, message, index, "any", media));
            return;
          }
          const result = part.kind.value;
          const text = toolPayloadText(result.payload);
          let output: string | ResponsesInputContent[] = text;
          if (result.contentParts.length > 0) {
            output = text === "" ? [] : [{ type: "input_text", text }];
            for (const inner of result.contentParts) output.push(...inputContent(inner, message, index, "any", media));
          }
          push({ type: "function_call_output", call_id: ids.result(result.toolCallId), output }, message);
        });
        if (extra.length > 0) push({ type: "message", role: "user", content: compact(extra) }, message);
        break;
      }
      default:
        throw providerRuleViolation("openai_responses.role", atMessage(message.id), `role ${message.role} has no Responses role`);
    }
  }

  const body: OpenAIResponsesBody = {
    ...(model !== "" ? { model } : {}),
    ...(instructions.length > 0 ? { instructions: instructions.join(instructionsSeparator) } : {}),
    input,
  };
  if (payload.toolDefinitions.length > 0) {
    body.tools = payload.toolDefinitions.map((definition) => ({
      type: "function" as const,
      name: definition.name,
      ...(definition.description !== "" ? { description: definition.description } : {}),
      parameters: toolParametersSchema(definition, "openai_responses"),
      strict: false,
    }));
  }
  return { body, origins, renamed: ids.renamed };
}

function compact(content: ResponsesInputContent[]): string | ResponsesInputContent[] {
  return content.length === 1 && content[0]!.type === "input_text" ? content[0].text : content;
}

/** A part as Responses input content; `allowed: "text"` for instruction messages. */
function inputContent(part: Part, message: Message, index: number, allowed: "text" | "any", media: MediaPolicy): ResponsesInputContent[] {
  const kind = part.kind;
  if (kind.case === "text") return kind.value.text === "" ? [] : [{ type: "input_text", text: kind.value.text }];
  if (kind.case === "reasoning" || kind.case === "providerCompaction") return [];
  if (allowed === "any" && kind.case === "image") {
    if (!mediaPlan("openai_responses", message, index, { kind: "image", image: kind.value }, media).send) return [];
    return [{ type: "input_image", image_url: imageUrl(kind.value), detail: openAIImageDetail(kind.value.detail) ?? "auto" }];
  }
  if (allowed === "any" && kind.case === "file") {
    const file = kind.value;
    const plan = mediaPlan("openai_responses", message, index, { kind: "file", file }, media);
    if (!plan.send) return plan.text !== undefined ? [{ type: "input_text", text: plan.text }] : [];
    if (file.uri === "") return [{ type: "input_file", file_data: fileDataUrl(file), filename: fileName(file, message.id, index) }];
    return [/^https?:\/\//.test(file.uri) ? { type: "input_file", file_url: file.uri } : { type: "input_file", file_id: file.uri }];
  }
  throw providerRuleViolation("openai_responses.content_type", atMessage(message.id), `part ${index} (${kind.case ?? "empty"}) cannot be sent in a ${Role[message.role]} message`);
}
