/**
 * The OpenAI Chat Completions request parts contextd renders. Field names follow the API exactly;
 * test/providers/sdk-types.typecheck.ts assigns these shapes to the `openai` SDK types, so a
 * renamed field fails the type check.
 */

export interface ChatTextPart {
  type: "text";
  text: string;
}

export interface ChatImagePart {
  type: "image_url";
  image_url: { url: string; detail?: "auto" | "low" | "high" };
}

export interface ChatFilePart {
  type: "file";
  file: { file_data?: string; file_id?: string; filename?: string };
}

export type ChatUserContentPart = ChatTextPart | ChatImagePart | ChatFilePart;

export interface ChatToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

export interface ChatSystemMessage {
  role: "system" | "developer";
  content: string | ChatTextPart[];
  name?: string;
}

export interface ChatUserMessage {
  role: "user";
  content: string | ChatUserContentPart[];
  name?: string;
}

export interface ChatAssistantMessage {
  role: "assistant";
  content: string | ChatTextPart[] | null;
  name?: string;
  tool_calls?: ChatToolCall[];
}

export interface ChatToolMessage {
  role: "tool";
  tool_call_id: string;
  content: string;
}

export type ChatMessage = ChatSystemMessage | ChatUserMessage | ChatAssistantMessage | ChatToolMessage;

export interface ChatTool {
  type: "function";
  function: { name: string; description?: string; parameters: Record<string, unknown> };
}

export interface OpenAIChatBody {
  model?: string;
  messages: ChatMessage[];
  tools?: ChatTool[];
}
