/**
 * Compile-time check of the rendered body shapes against the providers' official SDK request
 * types (openai, @anthropic-ai/sdk, @google/genai). Nothing here runs: `npx tsc -p
 * tsconfig.test.json` (part of scripts/test.sh) fails when a body field is renamed, retyped or
 * dropped on either side.
 *
 * Two checks per shape: assignability (every field we send has the SDK's type, every field the SDK
 * requires is there) and `KnownKeys` (every field we send exists in the SDK type — assignability
 * alone would let a misspelt optional field through).
 */
import type Anthropic from "@anthropic-ai/sdk";
import type { Content, FunctionDeclaration, Part, Tool } from "@google/genai";
import type OpenAI from "openai";
import type * as anthropic from "../../src/core/providers/anthropic/body.js";
import type * as gemini from "../../src/core/providers/gemini/body.js";
import type * as chat from "../../src/core/providers/openai-chat/body.js";
import type * as responses from "../../src/core/providers/openai-responses/body.js";

/** Resolves to `Ours` only when every key of `Ours` is a key of `Theirs`. */
type KnownKeys<Ours, Theirs> = Exclude<keyof Ours, keyof Theirs> extends never ? Ours : never;
const knownKeys = <Ours, Theirs>(value: KnownKeys<Ours, Theirs>): Theirs => value as unknown as Theirs;

// OpenAI Chat Completions.
export const chatBody = (body: chat.OpenAIChatBody): OpenAI.Chat.ChatCompletionCreateParamsNonStreaming => ({
  ...body,
  model: body.model ?? "gpt-4.1",
});
export const chatMessage = (message: chat.ChatMessage): OpenAI.Chat.ChatCompletionMessageParam => message;
export const chatSystem = (m: chat.ChatSystemMessage) => knownKeys<chat.ChatSystemMessage, OpenAI.Chat.ChatCompletionSystemMessageParam>(m);
export const chatUser = (m: chat.ChatUserMessage) => knownKeys<chat.ChatUserMessage, OpenAI.Chat.ChatCompletionUserMessageParam>(m);
export const chatAssistant = (m: chat.ChatAssistantMessage) => knownKeys<chat.ChatAssistantMessage, OpenAI.Chat.ChatCompletionAssistantMessageParam>(m);
export const chatTool = (m: chat.ChatToolMessage) => knownKeys<chat.ChatToolMessage, OpenAI.Chat.ChatCompletionToolMessageParam>(m);
export const chatToolCall = (c: chat.ChatToolCall) => knownKeys<chat.ChatToolCall, OpenAI.Chat.ChatCompletionMessageFunctionToolCall>(c);
export const chatImage = (p: chat.ChatImagePart) => knownKeys<chat.ChatImagePart["image_url"], OpenAI.Chat.ChatCompletionContentPartImage.ImageURL>(p.image_url);
export const chatFile = (p: chat.ChatFilePart) => knownKeys<chat.ChatFilePart["file"], OpenAI.Chat.ChatCompletionContentPart.File.File>(p.file);
export const chatFunctionTool = (t: chat.ChatTool) => knownKeys<chat.ChatTool["function"], OpenAI.FunctionDefinition>(t.function);

// OpenAI Responses.
export const responsesBody = (body: responses.OpenAIResponsesBody): OpenAI.Responses.ResponseCreateParamsNonStreaming => body;
export const responsesItem = (item: responses.ResponsesInputItem): OpenAI.Responses.ResponseInputItem => item;
export const responsesMessage = (m: responses.ResponsesInputMessage) => knownKeys<responses.ResponsesInputMessage, OpenAI.Responses.EasyInputMessage>(m);
export const responsesAssistant = (m: responses.ResponsesAssistantMessage) => knownKeys<responses.ResponsesAssistantMessage, OpenAI.Responses.EasyInputMessage>(m);
export const responsesCall = (c: responses.ResponsesFunctionCall) => knownKeys<responses.ResponsesFunctionCall, OpenAI.Responses.ResponseFunctionToolCall>(c);
export const responsesOutput = (o: responses.ResponsesFunctionCallOutput) =>
  knownKeys<responses.ResponsesFunctionCallOutput, OpenAI.Responses.ResponseInputItem.FunctionCallOutput>(o);
export const responsesCompaction = (c: responses.ResponsesCompactionItem) => knownKeys<responses.ResponsesCompactionItem, OpenAI.Responses.ResponseCompactionItemParam>(c);
export const responsesReasoning = (r: responses.ResponsesReasoning) => knownKeys<responses.ResponsesReasoning, OpenAI.Responses.ResponseReasoningItem>(r);
export const responsesImage = (p: responses.ResponsesInputImage) => knownKeys<responses.ResponsesInputImage, OpenAI.Responses.ResponseInputImage>(p);
export const responsesFile = (p: responses.ResponsesInputFile) => knownKeys<responses.ResponsesInputFile, OpenAI.Responses.ResponseInputFile>(p);
export const responsesTool = (t: responses.ResponsesFunctionTool) => knownKeys<responses.ResponsesFunctionTool, OpenAI.Responses.FunctionTool>(t);

// Anthropic Messages (`max_tokens` is the caller's). A body that holds a compaction block goes to the
// beta Messages API (`compact-2026-01-12`), so whole bodies and messages are checked against the beta
// request types; every other block against the GA ones too.
export const anthropicBody = (body: anthropic.AnthropicMessagesBody): Anthropic.Beta.Messages.MessageCreateParamsNonStreaming => ({
  ...body,
  model: body.model ?? "claude-sonnet-4-5",
  max_tokens: 1024,
});
type AnthropicBodyWithoutCompaction = Omit<anthropic.AnthropicMessagesBody, "messages"> & { messages: Array<{ role: "user" | "assistant"; content: Array<Exclude<anthropic.AnthropicBlock, anthropic.AnthropicCompactionBlock>> }> };
export const anthropicGABody = (body: AnthropicBodyWithoutCompaction): Anthropic.MessageCreateParamsNonStreaming => ({
  ...body,
  model: body.model ?? "claude-sonnet-4-5",
  max_tokens: 1024,
});
export const anthropicMessage = (m: anthropic.AnthropicMessage): Anthropic.Beta.BetaMessageParam => m;
export const anthropicBlock = (b: Exclude<anthropic.AnthropicBlock, anthropic.AnthropicCompactionBlock>): Anthropic.ContentBlockParam => b;
export const anthropicBetaBlock = (b: anthropic.AnthropicBlock): Anthropic.Beta.BetaContentBlockParam => b;
export const anthropicCompaction = (b: anthropic.AnthropicCompactionBlock) => knownKeys<anthropic.AnthropicCompactionBlock, Anthropic.Beta.BetaCompactionBlockParam>(b);
export const anthropicText = (b: anthropic.AnthropicTextBlock) => knownKeys<anthropic.AnthropicTextBlock, Anthropic.TextBlockParam>(b);
export const anthropicImage = (b: anthropic.AnthropicImageBlock) => knownKeys<anthropic.AnthropicImageBlock, Anthropic.ImageBlockParam>(b);
export const anthropicDocument = (b: anthropic.AnthropicDocumentBlock) => knownKeys<anthropic.AnthropicDocumentBlock, Anthropic.DocumentBlockParam>(b);
export const anthropicToolUse = (b: anthropic.AnthropicToolUseBlock) => knownKeys<anthropic.AnthropicToolUseBlock, Anthropic.ToolUseBlockParam>(b);
export const anthropicToolResult = (b: anthropic.AnthropicToolResultBlock) => knownKeys<anthropic.AnthropicToolResultBlock, Anthropic.ToolResultBlockParam>(b);
export const anthropicThinking = (b: anthropic.AnthropicThinkingBlock) => knownKeys<anthropic.AnthropicThinkingBlock, Anthropic.ThinkingBlockParam>(b);
export const anthropicRedacted = (b: anthropic.AnthropicRedactedThinkingBlock) =>
  knownKeys<anthropic.AnthropicRedactedThinkingBlock, Anthropic.RedactedThinkingBlockParam>(b);
export const anthropicCache = (c: anthropic.AnthropicCacheControl) => knownKeys<anthropic.AnthropicCacheControl, Anthropic.CacheControlEphemeral>(c);
export const anthropicTool = (t: anthropic.AnthropicTool) => knownKeys<anthropic.AnthropicTool, Anthropic.Tool>(t);

// Gemini (REST body = the SDK's contents + config.systemInstruction + config.tools).
export const geminiContents = (body: gemini.GeminiBody): Content[] => body.contents;
export const geminiSystem = (body: gemini.GeminiBody): Content | undefined => body.systemInstruction;
export const geminiTools = (body: gemini.GeminiBody): Tool[] | undefined => body.tools;
export const geminiPart = (p: gemini.GeminiPart) => knownKeys<gemini.GeminiPart, Part>(p);
export const geminiContent = (c: gemini.GeminiContent) => knownKeys<gemini.GeminiContent, Content>(c);
export const geminiCall = (p: gemini.GeminiPart) => (p.functionCall ? knownKeys<NonNullable<gemini.GeminiPart["functionCall"]>, NonNullable<Part["functionCall"]>>(p.functionCall) : undefined);
export const geminiResponse = (p: gemini.GeminiPart) =>
  p.functionResponse ? knownKeys<NonNullable<gemini.GeminiPart["functionResponse"]>, NonNullable<Part["functionResponse"]>>(p.functionResponse) : undefined;
export const geminiDeclaration = (d: gemini.GeminiFunctionDeclaration) => knownKeys<gemini.GeminiFunctionDeclaration, FunctionDeclaration>(d);
