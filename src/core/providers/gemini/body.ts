/**
 * The Gemini `generateContent` request parts contextd renders (REST field names). The model is not
 * part of the body (it is in the URL; `RenderedRequest.model` carries it).
 * test/providers/sdk-types.typecheck.ts assigns these shapes to the `@google/genai` types.
 */

export interface GeminiPart {
  text?: string;
  thought?: boolean;
  thoughtSignature?: string;
  inlineData?: { mimeType: string; data: string };
  fileData?: { fileUri: string; mimeType?: string };
  functionCall?: { id?: string; name: string; args: Record<string, unknown> };
  functionResponse?: GeminiFunctionResponse;
}

/**
 * A function response. Media a tool returned inline go in `parts` (Gemini's multimodal function
 * responses: `FunctionResponsePart.inlineData`), so they stay with the response they belong to.
 */
export interface GeminiFunctionResponse {
  id?: string;
  name: string;
  response: Record<string, unknown>;
  parts?: Array<{ inlineData: { mimeType: string; data: string } }>;
}

export interface GeminiContent {
  role: "user" | "model";
  parts: GeminiPart[];
}

export interface GeminiFunctionDeclaration {
  name: string;
  description?: string;
  parametersJsonSchema: Record<string, unknown>;
}

export interface GeminiBody {
  systemInstruction?: { parts: Array<{ text: string }> };
  contents: GeminiContent[];
  tools?: Array<{ functionDeclarations: GeminiFunctionDeclaration[] }>;
}
