import type { ResponsesCompactionItem } from "../provider-compaction.js";

export type { ResponsesCompactionItem };

/**
 * The OpenAI Responses request parts contextd renders. Field names follow the API exactly;
 * test/providers/sdk-types.typecheck.ts assigns these shapes to the `openai` SDK types.
 */

export interface ResponsesInputText {
  type: "input_text";
  text: string;
}

export interface ResponsesInputImage {
  type: "input_image";
  image_url: string;
  detail: "auto" | "low" | "high";
}

export interface ResponsesInputFile {
  type: "input_file";
  file_data?: string;
  file_id?: string;
  file_url?: string;
  filename?: string;
}

export type ResponsesInputContent = ResponsesInputText | ResponsesInputImage | ResponsesInputFile;

export interface ResponsesInputMessage {
  type: "message";
  role: "user" | "system" | "developer";
  content: string | ResponsesInputContent[];
}

/** Assistant text goes back as a string, which the API stores as `output_text`. */
export interface ResponsesAssistantMessage {
  type: "message";
  role: "assistant";
  content: string;
}

export interface ResponsesFunctionCall {
  type: "function_call";
  /** The item id ("fc_...") the call was received with; absent for calls from elsewhere. */
  id?: string;
  call_id: string;
  name: string;
  arguments: string;
}

export interface ResponsesFunctionCallOutput {
  type: "function_call_output";
  call_id: string;
  output: string | ResponsesInputContent[];
}

export interface ResponsesReasoning {
  type: "reasoning";
  id: string;
  summary: Array<{ type: "summary_text"; text: string }>;
  encrypted_content?: string;
}

export type ResponsesInputItem =
  | ResponsesCompactionItem
  | ResponsesInputMessage
  | ResponsesAssistantMessage
  | ResponsesFunctionCall
  | ResponsesFunctionCallOutput
  | ResponsesReasoning;

export interface ResponsesFunctionTool {
  type: "function";
  name: string;
  description?: string;
  parameters: Record<string, unknown>;
  strict: boolean;
}

export interface OpenAIResponsesBody {
  model?: string;
  instructions?: string;
  input: ResponsesInputItem[];
  tools?: ResponsesFunctionTool[];
}
