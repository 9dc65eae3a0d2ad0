// Interop with the Vercel AI SDK (`ai` 7.x), at "@contextd/client/ai-sdk". `ai` is an optional peer
// dependency: only this entry imports it, so the main entry works without it installed.
//
// Why it exists: an AI SDK agent calls `generateText`/`streamText` with `instructions`, `messages`
// (`ModelMessage[]`) and `tools`, and gets back `responseMessages` (assistant and tool messages).
// Without these two conversions every such agent hand-writes the mapping between those shapes and
// contextd's typed messages, tool rounds included.
import { create, equals, type MessageInitShape } from "@bufbuild/protobuf";
import { jsonSchema, tool, type AssistantModelMessage, type Instructions, type JSONValue, type ModelMessage, type SystemModelMessage, type ToolModelMessage, type ToolSet } from "ai";
import { BudgetSchema, CompileRequestSchema, MessageListSchema, type CompileResult, type CompiledPayload } from "../generated/contextd/v1/compile_pb.js";
import type { Client } from "./client.js";
import { ExtensionSchema, ImagePartSchema, MessageSchema, PartSchema, Provider, Role, type Message, type Part, type ToolPayload } from "../generated/contextd/v1/message_pb.js";
import { Segment, type Delta, type ToolDefinition } from "../generated/contextd/v1/state_pb.js";
import { appendMessages, errorPayload, jsonPayload, textPart, textPayload, toolResultMessage } from "./builders.js";

/** The AI SDK's provider options of a message or part (`{ anthropic: { signature: "..." } }`). */
type ProviderOptions = NonNullable<ModelMessage["providerOptions"]>;

/** What `generateText`/`streamText` take from a compile: spread it into the call's options. */
export interface AiSdkPrompt {
  /** The SYSTEM and DEVELOPER messages, in order (the SDK refuses system messages in `messages` by default). */
  instructions: SystemModelMessage[];
  messages: ModelMessage[];
  /** The payload's tool definitions; a tool without an entry in `execute` has no `execute` (the SDK then stops at its call). */
  tools: ToolSet;
}

/**
 * A tool's implementation, given the parsed arguments of its call (already checked by the SDK
 * against the tool's JSON Schema, hence `any`: the implementation names the type it expects).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type ToolExecute = (input: any) => unknown;

/** A response message of `generateText`/`streamText` (`responseMessages`, `response.messages`). */
export type ResponseMessage = AssistantModelMessage | ToolModelMessage;

/**
 * The prompt of a compile result (its typed payload) as `generateText`/`streamText` options:
 * `{ ...aiSdkPrompt(result, { weather }), model }`. A compile without `render` always sends the
 * payload; one with `render.provider` set sends its rendered body instead, and the payload only
 * with `CompileResultPart.PAYLOAD` in `include` — compile for the AI SDK without `render`.
 */
export function aiSdkPrompt(result: CompileResult, execute: Record<string, ToolExecute> = {}): AiSdkPrompt {
  if (result.payload === undefined) {
    throw new Error("aiSdkPrompt: the compile result has no payload: a compile with render.provider set sends it only with CompileResultPart.PAYLOAD in include (or compile without render)");
  }
  const instructions: SystemModelMessage[] = [];
  const messages: ModelMessage[] = [];
  for (const message of payloadInOrder(result.payload)) {
    for (const converted of toModelMessages([message])) {
      if (converted.role === "system") instructions.push(converted);
      else messages.push(converted);
    }
  }
  return { instructions, messages, tools: aiSdkTools(result.payload.toolDefinitions, execute) };
}

/** contextd tool definitions as an AI SDK `ToolSet` (the parameters' JSON Schema as `inputSchema`). */
export function aiSdkTools(definitions: ToolDefinition[], execute: Record<string, ToolExecute> = {}): ToolSet {
  const tools: ToolSet = {};
  for (const definition of definitions) {
    const schema = definition.parameters ? JSON.parse(definition.parameters) : { type: "object", properties: {} };
    const run = execute[definition.name];
    tools[definition.name] = run
      ? tool({ description: definition.description, inputSchema: jsonSchema(schema), execute: async (input: unknown) => run(input) })
      : tool({ description: definition.description, inputSchema: jsonSchema(schema) });
  }
  return tools;
}

/**
 * The payload's messages in the order the engine renders them for a provider: system, history,
 * then tools, memory and scratch — except that when history ends in an open tool round, those
 * three go before the round, so that the calls stay last.
 */
function payloadInOrder(payload: CompiledPayload): Message[] {
  const trailing = [...payload.tools, ...payload.memory, ...payload.scratch];
  const open = openRoundStart(payload.history);
  if (open < 0 || trailing.length === 0) return [...payload.system, ...payload.history, ...trailing];
  return [...payload.system, ...payload.history.slice(0, open), ...trailing, ...payload.history.slice(open)];
}

/** The index of the last assistant message when some of its calls have no result after it, else -1. */
function openRoundStart(history: Message[]): number {
  for (let i = history.length - 1; i >= 0; i--) {
    const message = history[i]!;
    if (message.role !== Role.ASSISTANT) continue;
    const calls = message.parts.flatMap((p) => (p.kind.case === "toolCall" ? [p.kind.value.id] : []));
    const answered = new Set(history.slice(i + 1).flatMap((m) => m.parts.flatMap((p) => (p.kind.case === "toolResult" ? [p.kind.value.toolCallId] : []))));
    return calls.some((id) => !answered.has(id)) ? i : -1;
  }
  return -1;
}

/**
 * contextd messages as AI SDK messages: SYSTEM and DEVELOPER become system messages (their text),
 * USER text, images and files; ASSISTANT text, reasoning, files and tool calls (arguments parsed from
 * their JSON); each TOOL result a tool message (text, JSON, errors, extra content parts).
 */
export function toModelMessages(messages: Message[]): ModelMessage[] {
  return messages.map((message, index): ModelMessage => {
    const where = `message ${index} (${Role[message.role]})`;
    const options = providerOptionsOf(message);
    const withOptions = <T extends object>(value: T, at?: number): T => {
      const found = at === undefined ? options.message : options.parts.get(at);
      return found === undefined ? value : { ...value, providerOptions: found };
    };
    switch (message.role) {
      case Role.SYSTEM:
      case Role.DEVELOPER:
        return withOptions({ role: "system", content: message.parts.map((p) => (p.kind.case === "text" ? p.kind.value.text : "")).join("") });
      case Role.USER:
        return withOptions({ role: "user", content: message.parts.flatMap((p, at) => userPart(p, where).map((part) => withOptions(part, at))) });
      case Role.ASSISTANT:
        return withOptions({ role: "assistant", content: message.parts.flatMap((p, at) => assistantPart(p, where, options.parts.has(at)).map((part) => withOptions(part, at))) });
      case Role.TOOL:
        return withOptions({
          role: "tool",
          content: message.parts.flatMap((p, at) => {
            if (p.kind.case !== "toolResult") return [];
            const result = p.kind.value;
            return [withOptions({ type: "tool-result" as const, toolCallId: result.toolCallId, toolName: result.name, output: toolOutput(result.payload, result.isError, result.contentParts) }, at)];
          }),
        });
      default:
        throw new Error(`toModelMessages: ${where} has no role`);
    }
  });
}

/**
 * The `Extension.type_id` under which `fromModelMessages` keeps the AI SDK `providerOptions` of a
 * message and of its parts (the provider metadata the SDK hands back on response messages, such
 * as an Anthropic reasoning signature or an OpenAI reasoning item id), so `toModelMessages` gives
 * them back as they were. Payload: `{"message"?: ProviderOptions, "parts"?: [[partIndex,
 * ProviderOptions], ...]}`. Never sent to a provider by contextd's own rendering, which reads the
 * typed fields (`ReasoningPart.signature`, ...) instead.
 */
export const PROVIDER_OPTIONS_EXTENSION = "ai-sdk.provider-options/v1";

interface StoredOptions {
  message: ProviderOptions | undefined;
  parts: Map<number, ProviderOptions>;
}

function providerOptionsOf(message: Message): StoredOptions {
  const extension = message.extensions.find((e) => e.typeId === PROVIDER_OPTIONS_EXTENSION);
  if (extension !== undefined) {
    const stored = JSON.parse(extension.payload) as { message?: ProviderOptions; parts?: [number, ProviderOptions][] };
    return { message: stored.message, parts: new Map(stored.parts ?? []) };
  }
  // A message contextd got another way (a provider stream, a provider response): the provider
  // fields of its typed reasoning parts, in the shape the SDK's providers read them.
  const parts = new Map<number, ProviderOptions>();
  message.parts.forEach((part, at) => {
    if (part.kind.case !== "reasoning") return;
    const reasoning = part.kind.value;
    if (reasoning.provider === Provider.ANTHROPIC_MESSAGES && (reasoning.signature || reasoning.redactedData)) {
      parts.set(at, { anthropic: reasoning.redactedData ? { redactedData: reasoning.redactedData } : { signature: reasoning.signature } });
    } else if (reasoning.provider === Provider.OPENAI_RESPONSES && (reasoning.itemId || reasoning.redactedData)) {
      parts.set(at, { openai: { ...(reasoning.itemId ? { itemId: reasoning.itemId } : {}), ...(reasoning.redactedData ? { reasoningEncryptedContent: reasoning.redactedData } : {}) } });
    }
  });
  return { message: undefined, parts };
}

type UserContentPart = Exclude<Extract<ModelMessage, { role: "user" }>["content"], string>[number];
type AssistantContentPart = Exclude<AssistantModelMessage["content"], string>[number];

function mediaPart(part: Part): { type: "file"; mediaType: string; data: { type: "url"; url: URL } | { type: "data"; data: Uint8Array }; filename?: string } | undefined {
  if (part.kind.case === "image") {
    const image = part.kind.value;
    const mediaType = image.mimeType || "image";
    return { type: "file", mediaType, data: image.url ? { type: "url", url: new URL(image.url) } : { type: "data", data: image.data } };
  }
  if (part.kind.case === "file") {
    const file = part.kind.value;
    const data = file.uri ? { type: "url" as const, url: new URL(file.uri) } : { type: "data" as const, data: file.data };
    return file.name ? { type: "file", mediaType: file.mimeType, data, filename: file.name } : { type: "file", mediaType: file.mimeType, data };
  }
  return undefined;
}

function userPart(part: Part, where: string): UserContentPart[] {
  if (part.kind.case === "text") return [{ type: "text", text: part.kind.value.text }];
  const media = mediaPart(part);
  if (media) return [media];
  throw new Error(`toModelMessages: ${where} has a ${part.kind.case ?? "empty"} part, which a user message cannot hold`);
}

function assistantPart(part: Part, where: string, hasProviderOptions: boolean): AssistantContentPart[] {
  switch (part.kind.case) {
    case "text":
      return [{ type: "text", text: part.kind.value.text }];
    case "reasoning":
      // Redacted reasoning has no text: its AI SDK shape is an empty reasoning part whose provider
      // options carry the data; without them there is nothing to send.
      return part.kind.value.text || hasProviderOptions ? [{ type: "reasoning", text: part.kind.value.text }] : [];
    case "toolCall": {
      const call = part.kind.value;
      const args = call.arguments?.data || call.arguments?.text || "{}";
      return [{ type: "tool-call", toolCallId: call.id, toolName: call.name, input: JSON.parse(args) as unknown }];
    }
  }
  const media = mediaPart(part);
  if (media) return [media];
  throw new Error(`toModelMessages: ${where} has a ${part.kind.case ?? "empty"} part, which an assistant message cannot hold`);
}

type ToolOutput = Extract<Exclude<ToolModelMessage["content"][number], { type: "tool-approval-response" }>, { type: "tool-result" }>["output"];

function toolOutput(payload: ToolPayload | undefined, isError: boolean, contentParts: Part[]): ToolOutput {
  if (contentParts.length > 0) {
    const value: Extract<ToolOutput, { type: "content" }>["value"] = [];
    const text = payload?.text || payload?.data || payload?.error?.message;
    if (text) value.push({ type: "text", text });
    for (const part of contentParts) {
      if (part.kind.case === "text") value.push({ type: "text", text: part.kind.value.text });
      const media = mediaPart(part);
      if (media) value.push(media.filename ? { type: "file", mediaType: media.mediaType, data: media.data, filename: media.filename } : { type: "file", mediaType: media.mediaType, data: media.data });
    }
    return { type: "content", value };
  }
  if (payload?.error) return { type: "error-text", value: payload.error.code ? `${payload.error.code}: ${payload.error.message}` : payload.error.message };
  if (payload?.data) return isError ? { type: "error-json", value: JSON.parse(payload.data) as JSONValue } : { type: "json", value: JSON.parse(payload.data) as JSONValue };
  if (payload?.binary) return { type: "content", value: [{ type: "file", mediaType: payload.binary.mimeType, data: { type: "data", data: payload.binary.data } }] };
  const text = payload?.text ?? "";
  return isError ? { type: "error-text", value: text } : { type: "text", value: text };
}

/**
 * AI SDK messages as contextd messages, one TOOL message per tool result. Throws, naming the
 * message and part, on what contextd has no typed form for: provider-executed tool results inside
 * an assistant message, tool approval requests and responses, custom parts and reasoning files.
 */
export function fromModelMessages(messages: ModelMessage[]): Message[] {
  const out: Message[] = [];
  messages.forEach((message, index) => {
    const where = `message ${index} (${message.role})`;
    switch (message.role) {
      case "system":
        out.push(withProviderOptions(create(MessageSchema, { role: Role.SYSTEM, parts: [textPart(message.content)] }), message.providerOptions, []));
        return;
      case "user":
      case "assistant": {
        const role = message.role === "user" ? Role.USER : Role.ASSISTANT;
        const content = typeof message.content === "string" ? [{ type: "text" as const, text: message.content }] : message.content;
        const parts = content.map((part, p) => contextdPart(part, `${where} part ${p}`));
        out.push(withProviderOptions(create(MessageSchema, { role, parts }), message.providerOptions, content.map((part) => ("providerOptions" in part ? part.providerOptions : undefined))));
        return;
      }
      case "tool":
        message.content.forEach((part, p) => {
          if (part.type !== "tool-result") throw new Error(`fromModelMessages: ${where} part ${p} is a ${part.type}, which contextd does not store`);
          const [payload, isError] = contextdPayload(part.output, `${where} part ${p}`);
          const result = toolResultMessage(part.toolCallId, part.toolName, payload, isError);
          if (part.output.type === "content" && result.parts[0]?.kind.case === "toolResult") {
            result.parts[0].kind.value.contentParts = part.output.value.flatMap((v) => (v.type === "file" ? [contextdPart(v, `${where} part ${p}`)] : []));
          }
          out.push(withProviderOptions(result, message.providerOptions, [part.providerOptions]));
        });
        return;
    }
  });
  return out;
}

/** `message` keeping the AI SDK provider options of the message and of its parts (by index) in its PROVIDER_OPTIONS_EXTENSION. */
function withProviderOptions(message: Message, options: ProviderOptions | undefined, partOptions: (ProviderOptions | undefined)[]): Message {
  const parts = partOptions.flatMap((value, at): [number, ProviderOptions][] => (value === undefined ? [] : [[at, value]]));
  if (options === undefined && parts.length === 0) return message;
  const payload = JSON.stringify({ ...(options === undefined ? {} : { message: options }), ...(parts.length === 0 ? {} : { parts }) });
  message.extensions.push(create(ExtensionSchema, { typeId: PROVIDER_OPTIONS_EXTENSION, payload }));
  return message;
}

type ToolContentFile = Extract<Extract<ToolOutput, { type: "content" }>["value"][number], { type: "file" }>;

function contextdPart(part: UserContentPart | AssistantContentPart | ToolContentFile, where: string): Part {
  switch (part.type) {
    case "text":
      return textPart(part.text);
    case "reasoning":
      return create(PartSchema, { kind: { case: "reasoning", value: { text: part.text, ...typedReasoning(part.providerOptions) } } });
    case "tool-call":
      return create(PartSchema, { kind: { case: "toolCall", value: { id: part.toolCallId, name: part.toolName, arguments: jsonPayload(JSON.stringify(part.input ?? {})) } } });
    case "image": {
      const image = part.image;
      if (image instanceof URL || typeof image === "string" && /^https?:|^data:/.test(image)) return create(PartSchema, { kind: { case: "image", value: { url: String(image), mimeType: part.mediaType ?? "" } } });
      return create(PartSchema, { kind: { case: "image", value: create(ImagePartSchema, { data: bytesOf(image, where), mimeType: part.mediaType ?? "" }) } });
    }
    case "file": {
      const data = part.data;
      const tagged = typeof data === "object" && data !== null && "type" in data && typeof data.type === "string" ? (data as { type: string; url?: URL; data?: unknown; text?: string }) : undefined;
      const url = data instanceof URL ? data : tagged?.type === "url" ? tagged.url : undefined;
      const bytes = url ? undefined : tagged?.type === "data" ? bytesOf(tagged.data, where) : tagged?.type === "text" ? new TextEncoder().encode(tagged.text ?? "") : tagged === undefined ? bytesOf(data, where) : undefined;
      if (url === undefined && bytes === undefined) throw new Error(`fromModelMessages: ${where} is a file given as a provider reference, which contextd does not store`);
      if (part.mediaType.startsWith("image")) {
        const mimeType = part.mediaType.includes("/") ? part.mediaType : "";
        return create(PartSchema, { kind: { case: "image", value: url ? { url: String(url), mimeType } : { data: bytes!, mimeType } } });
      }
      return create(PartSchema, { kind: { case: "file", value: { mimeType: part.mediaType, uri: url ? String(url) : "", data: bytes ?? new Uint8Array(), name: part.filename ?? "" } } });
    }
    default:
      throw new Error(`fromModelMessages: ${where} is a ${part.type} part, which contextd has no typed form for`);
  }
}

/**
 * The typed fields of a reasoning part from its provider options, so contextd's own rendering and
 * clearing know it: an Anthropic signature or redacted data, an OpenAI reasoning item id or
 * encrypted content. (The options themselves are kept whole in the extension.)
 */
function typedReasoning(options: ProviderOptions | undefined): { provider?: Provider; signature?: string; redactedData?: string; itemId?: string } {
  const text = (value: unknown): string => (typeof value === "string" ? value : "");
  const anthropic = options?.anthropic;
  if (anthropic && (text(anthropic.signature) || text(anthropic.redactedData))) {
    return { provider: Provider.ANTHROPIC_MESSAGES, signature: text(anthropic.signature), redactedData: text(anthropic.redactedData) };
  }
  const openai = options?.openai;
  if (openai && (text(openai.itemId) || text(openai.reasoningEncryptedContent))) {
    return { provider: Provider.OPENAI_RESPONSES, itemId: text(openai.itemId), redactedData: text(openai.reasoningEncryptedContent) };
  }
  return {};
}

function bytesOf(data: unknown, where: string): Uint8Array {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (typeof data === "string") return Uint8Array.from(Buffer.from(data, "base64"));
  throw new Error(`fromModelMessages: ${where} has data that is neither bytes nor base64 text`);
}

function contextdPayload(output: ToolOutput, where: string): [ToolPayload, boolean] {
  switch (output.type) {
    case "text":
      return [textPayload(output.value), false];
    case "json":
      return [jsonPayload(JSON.stringify(output.value)), false];
    case "error-text":
      return [textPayload(output.value), true];
    case "error-json":
      return [jsonPayload(JSON.stringify(output.value)), true];
    case "execution-denied":
      return [errorPayload("execution_denied", output.reason ?? "the tool call was denied"), true];
    case "content":
      return [textPayload(output.value.map((v) => (v.type === "text" ? v.text : "")).join("")), false];
    default:
      throw new Error(`fromModelMessages: ${where} has a tool output of an unknown type`);
  }
}

/**
 * The deltas storing the response messages of a `generateText` call (`result.responseMessages`),
 * or of a finished `streamText` (`await result.responseMessages`), in history: give them to
 * `client.turn` or `client.commit`. In ai 7 those hold every step; the deprecated
 * `result.response.messages` holds only the last step's, without the tool rounds before it.
 * One delta, so a tool loop's calls and results land together and the engine checks the rounds.
 */
export function responseDeltas(messages: ResponseMessage[]): Delta[] {
  return messages.length === 0 ? [] : [appendMessages(Segment.HISTORY, ...fromModelMessages(messages))];
}

/** The compile options of `budgetedPrepareStep`: the budget, and the other options of an inline compile. */
export interface PrepareStepOptions {
  /** The token budget of each step's messages (with the instructions counted). */
  budget?: MessageInitShape<typeof BudgetSchema>;
  /** Other compile options (tool-result and reasoning clearing, tool-round repair, the estimator): no conversation, no commit. */
  template?: MessageInitShape<typeof CompileRequestSchema>;
  /** Called with each step's compile result (tokens, decisions, warnings), for logs and tests. */
  onResult?: (result: CompileResult) => void;
}

/**
 * A `prepareStep` for `generateText`/`streamText` that budgets each step's messages through
 * contextd: the step's messages and instructions are compiled inline (nothing is stored) within
 * `options.budget` with `options.template`'s options, and the step is sent the messages contextd
 * keeps, in order — the newest first, whole tool rounds, the latest user message protected.
 * Messages kept unchanged are the SDK's own objects (their provider options included); a message
 * contextd changed (a cleared tool result) is its compiled form; one contextd made (a summary) is
 * converted from its typed parts. The returned `messages` carry forward to later steps, as the SDK
 * documents for a `prepareStep` override.
 *
 *     await generateText({ model, messages, tools, prepareStep: budgetedPrepareStep(client, { budget: { maxTokens: 8000n } }) });
 */
export function budgetedPrepareStep(client: Client, options: PrepareStepOptions = {}): (step: { messages: ModelMessage[]; instructions?: Instructions | undefined }) => Promise<{ messages: ModelMessage[] }> {
  return async ({ messages, instructions }) => {
    // Each model message is one contextd message, except a tool message with several results:
    // one TOOL message each. `owner[i]` is the model message contextd message i came from.
    const sent: Message[] = [];
    const owner: number[] = [];
    messages.forEach((message, index) => {
      fromModelMessages([message]).forEach((converted, piece) => {
        converted.id = `step-${index}-${piece}`;
        sent.push(converted);
        owner.push(index);
      });
    });
    const system = instructionMessages(instructions);
    const request = create(CompileRequestSchema, options.template ?? {});
    if (request.conversationId || request.commit) throw new Error("budgetedPrepareStep: the step's compile is inline: its template may not name a conversation or commit");
    request.history = create(MessageListSchema, { messages: sent });
    if (system.length > 0) request.system = create(MessageListSchema, { messages: system });
    if (options.budget) request.budget = create(BudgetSchema, options.budget);
    const result = (await client.compile(request)).result!;
    options.onResult?.(result);
    const byId = new Map(sent.map((message, at) => [message.id, at]));
    const kept: ModelMessage[] = [];
    const compiled = result.payload?.history ?? [];
    for (let at = 0; at < compiled.length; at++) {
      const message = compiled[at]!;
      const index = byId.get(message.id);
      if (index === undefined) {
        kept.push(...toModelMessages([message]));
        continue;
      }
      // The pieces of one model message come one after another (whole tool rounds are kept whole).
      const pieces = [message];
      while (at + 1 < compiled.length && owner[byId.get(compiled[at + 1]!.id) ?? -1] === owner[index]) pieces.push(compiled[++at]!);
      const own = sent.filter((_, i) => owner[i] === owner[index]);
      const unchanged = pieces.length === own.length && pieces.every((piece, i) => samePartsAs(piece, own[i]!));
      if (unchanged) kept.push(messages[owner[index]!]!);
      else kept.push(...mergeTools(toModelMessages(pieces)));
    }
    return { messages: kept };
  };
}

function samePartsAs(compiled: Message, sent: Message): boolean {
  return compiled.parts.length === sent.parts.length && compiled.parts.every((part, at) => equals(PartSchema, part, sent.parts[at]!));
}

/** The step's instructions as contextd SYSTEM messages (counted by the budget, not returned). */
function instructionMessages(instructions: Instructions | undefined): Message[] {
  if (instructions === undefined) return [];
  const list = typeof instructions === "string" ? [{ role: "system" as const, content: instructions }] : Array.isArray(instructions) ? instructions : [instructions];
  return fromModelMessages(list).map((message, at) => Object.assign(message, { id: `instructions-${at}` }));
}

/** Tool messages of one model message, merged back into one (the others are one each already). */
function mergeTools(converted: ModelMessage[]): ModelMessage[] {
  if (converted.length < 2 || !converted.every((message) => message.role === "tool")) return converted;
  const tools = converted as ToolModelMessage[];
  return [{ ...tools[0]!, content: tools.flatMap((message) => message.content) }];
}
