import { create } from "@bufbuild/protobuf";
import {
  MessageSchema,
  PartSchema,
  Role,
  ToolPayloadSchema,
  type Message,
  type Part,
  type Provider,
  type ToolPayload,
} from "#gen/contextd/v1/message_pb";

/**
 * Building blocks for ingested responses. Messages get no id: the commit assigns one, as for any
 * appended message.
 */

export function assistantMessage(parts: Part[]): Message {
  return create(MessageSchema, { role: Role.ASSISTANT, parts });
}

export function textPart(text: string, signature = ""): Part {
  return create(PartSchema, { kind: { case: "text", value: { text, signature } } });
}

export function toolCallPart(id: string, name: string, args: ToolPayload, opaque: { signature?: string; itemId?: string } = {}): Part {
  return create(PartSchema, { kind: { case: "toolCall", value: { id, name, arguments: args, ...opaque } } });
}

export function reasoningPart(provider: Provider, fields: { text?: string; signature?: string; redactedData?: string; itemId?: string }): Part {
  return create(PartSchema, { kind: { case: "reasoning", value: { provider, ...fields } } });
}

/**
 * Call arguments as received. JSON text goes to `data` byte for byte; text that is not valid JSON
 * (models occasionally emit it) goes to `text` instead, so the response can still be appended and
 * the same bytes are sent back (`toolArgumentsJson` reads `data`, then `text`).
 */
export function toolArgumentsPayload(json: string): ToolPayload {
  try {
    JSON.parse(json);
    return create(ToolPayloadSchema, { data: json });
  } catch {
    return create(ToolPayloadSchema, { text: json });
  }
}
