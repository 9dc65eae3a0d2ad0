import { create } from "@bufbuild/protobuf";
import {
  MessageSchema,
  PartSchema,
  Role,
  type Message,
  type Part,
} from "#gen/contextd/v1/message_pb";

/** Test builders for messages; plain protobuf-es `create` calls with short names. */
export function text(value: string): Part {
  return create(PartSchema, { kind: { case: "text", value: { text: value } } });
}

export function message(role: Role, id: string, ...content: (string | Part)[]): Message {
  return create(MessageSchema, { id, role, parts: content.map((item) => (typeof item === "string" ? text(item) : item)) });
}

export const user = (id: string, value: string) => message(Role.USER, id, value);
export const assistant = (id: string, value: string) => message(Role.ASSISTANT, id, value);
export const system = (id: string, value: string) => message(Role.SYSTEM, id, value);

export function call(id: string, name = "lookup", args = "{}"): Part {
  return create(PartSchema, { kind: { case: "toolCall", value: { id, name, arguments: { data: args } } } });
}

export function result(callId: string, value: string, name = "lookup"): Part {
  return create(PartSchema, { kind: { case: "toolResult", value: { toolCallId: callId, name, payload: { text: value } } } });
}

/** An assistant message with calls followed by one TOOL message per call. */
export function toolRound(prefix: string, callIds: string[], answered = callIds): Message[] {
  return [
    message(Role.ASSISTANT, `${prefix}-a`, ...callIds.map((id) => call(id))),
    ...answered.map((id) => message(Role.TOOL, `${prefix}-r-${id}`, result(id, `result of ${id}`))),
  ];
}
