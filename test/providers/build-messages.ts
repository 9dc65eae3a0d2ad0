import { create } from "@bufbuild/protobuf";
import { CompiledPayloadSchema, type CompiledPayload } from "#gen/contextd/v1/compile_pb";
import {
  CacheType,
  MessageSchema,
  PartSchema,
  Provider,
  Role,
  type ImagePart,
  type Message,
  type Part,
  type ToolPayload,
} from "#gen/contextd/v1/message_pb";
import { ToolDefinitionSchema, type ToolDefinition } from "#gen/contextd/v1/state_pb";

/** Compact builders for test conversations (generated types, nothing hand-rolled). */

export const text = (value: string, signature = ""): Part => create(PartSchema, { kind: { case: "text", value: { text: value, signature } } });

export const image = (fields: Partial<Pick<ImagePart, "url" | "data" | "mimeType" | "detail">>): Part =>
  create(PartSchema, { kind: { case: "image", value: fields } });

export const call = (id: string, name: string, data = "{}", opaque: { signature?: string; itemId?: string } = {}): Part =>
  create(PartSchema, { kind: { case: "toolCall", value: { id, name, arguments: { data }, ...opaque } } });

export const result = (
  toolCallId: string,
  name: string,
  payload: Partial<Pick<ToolPayload, "text" | "data">> & { error?: { code?: string; message: string } },
  options: { isError?: boolean; contentParts?: Part[] } = {},
): Part =>
  create(PartSchema, {
    kind: {
      case: "toolResult",
      value: { toolCallId, name, payload, isError: options.isError ?? false, contentParts: options.contentParts ?? [] },
    },
  });

export const reasoning = (provider: Provider, fields: { text?: string; signature?: string; redactedData?: string; itemId?: string }): Part =>
  create(PartSchema, { kind: { case: "reasoning", value: { provider, ...fields } } });

export const message = (id: string, role: Role, parts: Part[], extra: { cacheTtl?: string; senderName?: string } = {}): Message =>
  create(MessageSchema, {
    id,
    role,
    parts,
    senderName: extra.senderName ?? "",
    ...(extra.cacheTtl !== undefined ? { cache: { type: CacheType.EPHEMERAL, ttl: extra.cacheTtl } } : {}),
  });

export const system = (id: string, value: string): Message => message(id, Role.SYSTEM, [text(value)]);
export const developer = (id: string, value: string): Message => message(id, Role.DEVELOPER, [text(value)]);
export const user = (id: string, ...parts: (string | Part)[]): Message =>
  message(id, Role.USER, parts.map((part) => (typeof part === "string" ? text(part) : part)));
export const assistant = (id: string, ...parts: (string | Part)[]): Message =>
  message(id, Role.ASSISTANT, parts.map((part) => (typeof part === "string" ? text(part) : part)));
export const tool = (id: string, ...parts: Part[]): Message => message(id, Role.TOOL, parts);

export const definition = (name: string, description: string, parameters: object): ToolDefinition =>
  create(ToolDefinitionSchema, { name, description, parameters: JSON.stringify(parameters) });

export const payload = (fields: Partial<Pick<CompiledPayload, "system" | "history" | "tools" | "memory" | "scratch" | "toolDefinitions">>): CompiledPayload =>
  create(CompiledPayloadSchema, fields);
