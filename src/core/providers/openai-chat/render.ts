import { Role, type Message, type Part } from "#gen/contextd/v1/message_pb";
import type { CompiledPayload } from "#gen/contextd/v1/compile_pb";
import { toolPayloadText } from "../../model/payload-text.js";
import type { BodyOrigin } from "../body-origin.js";
import { openAIImageDetail } from "../image-detail.js";
import { fileDataUrl, imageUrl } from "../media.js";
import { fileName, mediaPlan, type MediaPolicy } from "../media-capabilities.js";
import { messagesInRenderingOrder } from "../rendering-order.js";
import { acceptedChatName, CallIdAssignment, callIdRules, type RenamedCallId } from "../rendered-ids.js";
import { atMessage, providerRuleViolation } from "../rule-violation.js";
import { toolArgumentsJson } from "../tool-arguments.js";
import { toolParametersSchema } from "../tool-definitions.js";
import type {
  ChatMessage,
  ChatTextPart,
  ChatTool,
  ChatToolCall,
  ChatUserContentPart,
  OpenAIChatBody,
} from "./body.js";

/** A Chat Completions body and, for each of its messages, the payload message it came from. */
export interface RenderedOpenAIChat {
  body: OpenAIChatBody;
  origins: BodyOrigin[];
  /** Tool-call ids sent in another form than stored (`rendered-ids.ts`). */
  renamed: RenamedCallId[];
}

/**
 * Renders the payload as Chat Completions `messages` and `tools`. Every payload message keeps its
 * place and role (SYSTEM → system, DEVELOPER → developer, scratch as system messages at the end).
 * Reasoning parts are never sent: Chat Completions has no way to take reasoning back. Tool-call
 * ids and sender names are sent in the form Chat takes (`rendered-ids.ts`).
 */
export function renderOpenAIChat(payload: CompiledPayload, model: string, media: MediaPolicy): RenderedOpenAIChat {
  const messages: ChatMessage[] = [];
  const origins: BodyOrigin[] = [];
  const ids = new CallIdAssignment(callIdRules.openai_chat);
  const push = (message: ChatMessage, origin: Message) => {
    messages.push(message);
    origins.push({ messageId: origin.id, role: origin.role });
  };
  // Images a tool returned cannot go in a tool message; they follow the round's tool messages
  // in one user message.
  let toolFollowUp: { parts: ChatUserContentPart[]; origin: Message } | undefined;
  const flushToolFollowUp = () => {
    if (toolFollowUp && toolFollowUp.parts.length > 0) push({ role: "user", content: toolFollowUp.parts }, toolFollowUp.origin);
    toolFollowUp = undefined;
  };

  for (const { message } of messagesInRenderingOrder(payload)) {
    if (message.role !== Role.TOOL) flushToolFollowUp();
    switch (message.role) {
      case Role.SYSTEM:
      case Role.DEVELOPER: {
        const content = textOnlyContent(message, "system");
        if (content.length > 0) {
          push({ role: message.role === Role.SYSTEM ? "system" : "developer", content: compact(content), ...named(message) }, message);
        }
        break;
      }
      case Role.USER: {
        const content = message.parts.flatMap((part, index) => userContent(part, message, index, media));
        if (content.length > 0) push({ role: "user", content: compact(content), ...named(message) }, message);
        break;
      }
      case Role.ASSISTANT: {
        const content = textOnlyContent(message, "assistant");
        const toolCalls: ChatToolCall[] = [];
        for (const part of message.parts) {
          if (part.kind.case !== "toolCall") continue;
          const call = part.kind.value;
          toolCalls.push({ id: ids.call(message.id, call.id), type: "function", function: { name: call.name, arguments: toolArgumentsJson(call) } });
        }
        if (content.length === 0 && toolCalls.length === 0) break;
        push(
          {
            role: "assistant",
            content: content.length > 0 ? compact(content) : null,
            ...named(message),
            ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
          },
          message,
        );
        break;
      }
      case Role.TOOL: {
        toolFollowUp ??= { parts: [], origin: message };
        message.parts.forEach((part, index) => {
          if (part.kind.case !== "toolResult") {
            toolFollowUp!.parts.push(...userContent(part, message, index, media));
            return;
          }
          const result = part.kind.value;
          const callId = ids.result(result.toolCallId);
          push({ role: "tool", tool_call_id: callId, content: toolPayloadText(result.payload) }, message);
          if (result.contentParts.length > 0) {
            toolFollowUp!.parts.push({ type: "text", text: `Content returned by tool call ${callId}:` });
            result.contentParts.forEach((inner) => toolFollowUp!.parts.push(...userContent(inner, message, index, media)));
          }
        });
        break;
      }
      default:
        throw providerRuleViolation("openai_chat.role", atMessage(message.id), `role ${message.role} has no Chat Completions role`);
    }
  }
  flushToolFollowUp();

  const body: OpenAIChatBody = { ...(model !== "" ? { model } : {}), messages };
  if (payload.toolDefinitions.length > 0) {
    body.tools = payload.toolDefinitions.map(
      (definition): ChatTool => ({
        type: "function",
        function: {
          name: definition.name,
          ...(definition.description !== "" ? { description: definition.description } : {}),
          parameters: toolParametersSchema(definition, "openai_chat"),
        },
      }),
    );
  }
  return { body, origins, renamed: ids.renamed };
}

/** One text part is sent as a plain string, anything else as a parts array. */
function compact<P extends ChatUserContentPart>(content: P[]): string | P[] {
  return content.length === 1 && content[0]!.type === "text" ? (content[0] as ChatTextPart).text : content;
}

function named(message: Message): { name?: string } {
  return message.senderName !== "" ? { name: acceptedChatName(message.senderName) } : {};
}

/**
 * The text parts of a system, developer or assistant message; those roles take text only in Chat
 * Completions. Reasoning is skipped (never sent to Chat) and tool calls are rendered separately;
 * anything else is a rule violation naming the part.
 */
function textOnlyContent(message: Message, roleName: string): ChatTextPart[] {
  const content: ChatTextPart[] = [];
  message.parts.forEach((part, index) => {
    switch (part.kind.case) {
      case "text":
        if (part.kind.value.text !== "") content.push({ type: "text", text: part.kind.value.text });
        return;
      case "reasoning":
      case "providerCompaction":
        return;
      case "toolCall":
        if (message.role === Role.ASSISTANT) return;
        break;
    }
    throw providerRuleViolation(
      "openai_chat.content_type",
      atMessage(message.id),
      `part ${index} (${part.kind.case ?? "empty"}) cannot be sent in a Chat Completions ${roleName} message`,
    );
  });
  return content;
}

/** A part as user content (text, image, file; media as `media-capabilities.ts` allows). */
function userContent(part: Part, message: Message, index: number, media: MediaPolicy): ChatUserContentPart[] {
  switch (part.kind.case) {
    case "text":
      return part.kind.value.text === "" ? [] : [{ type: "text", text: part.kind.value.text }];
    case "image": {
      const plan = mediaPlan("openai_chat", message, index, { kind: "image", image: part.kind.value }, media);
      if (!plan.send) return [];
      const detail = openAIImageDetail(part.kind.value.detail);
      return [{ type: "image_url", image_url: { url: imageUrl(part.kind.value), ...(detail ? { detail } : {}) } }];
    }
    case "file": {
      const file = part.kind.value;
      const plan = mediaPlan("openai_chat", message, index, { kind: "file", file }, media);
      if (!plan.send) return plan.text !== undefined ? [{ type: "text", text: plan.text }] : [];
      if (file.uri !== "") return [{ type: "file", file: { file_id: file.uri } }];
      return [{ type: "file", file: { file_data: fileDataUrl(file), filename: fileName(file, message.id, index) } }];
    }
    case "reasoning":
    case "providerCompaction":
      return [];
    default:
      throw providerRuleViolation(
        "openai_chat.content_type",
        atMessage(message.id),
        `part ${index} (${part.kind.case ?? "empty"}) cannot be sent as Chat Completions user content`,
      );
  }
}
