// Builders for the messages, tool rounds and deltas an agent writes most often; the same set as the
// Go (build.go) and Python (builders.py) clients. A Delta written out by hand is five nested
// objects with a oneof case; these make an agent turn one line each.
import { create } from "@bufbuild/protobuf";
import {
  MessageSchema,
  PartSchema,
  Provider,
  Role,
  ToolCallPartSchema,
  ToolPayloadSchema,
  type Message,
  type Part,
  type ToolCallPart,
  type ToolPayload,
} from "../generated/contextd/v1/message_pb.js";
import { DeltaSchema, Segment, type Delta, type ToolDefinition } from "../generated/contextd/v1/state_pb.js";

/** A message with one text part and no id (the server or the compile's identity policy assigns one). */
export function textMessage(role: Role, text: string): Message {
  return create(MessageSchema, { role, parts: [textPart(text)] });
}

/** A USER text message. */
export function userText(text: string): Message {
  return textMessage(Role.USER, text);
}

/** An ASSISTANT text message. */
export function assistantText(text: string): Message {
  return textMessage(Role.ASSISTANT, text);
}

/** A SYSTEM text message. */
export function systemText(text: string): Message {
  return textMessage(Role.SYSTEM, text);
}

/** A text part. */
export function textPart(text: string): Part {
  return create(PartSchema, { kind: { case: "text", value: { text } } });
}

/** A call of the tool `name` with arguments given as the JSON text of an object (as providers send them). */
export function toolCall(callId: string, name: string, argumentsJson: string): ToolCallPart {
  return create(ToolCallPartSchema, { id: callId, name, arguments: jsonPayload(argumentsJson) });
}

/** A tool payload holding text. */
export function textPayload(text: string): ToolPayload {
  return create(ToolPayloadSchema, { text });
}

/** A tool payload holding a JSON value as JSON text. */
export function jsonPayload(json: string): ToolPayload {
  return create(ToolPayloadSchema, { data: json });
}

/** A tool payload describing a failure. */
export function errorPayload(code: string, message: string): ToolPayload {
  return create(ToolPayloadSchema, { error: { code, message } });
}

/** The TOOL message answering one call. */
export function toolResultMessage(callId: string, name: string, payload: ToolPayload, isError = false): Message {
  return create(MessageSchema, {
    role: Role.TOOL,
    parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, name, payload, isError } } }],
  });
}

/**
 * One assistant turn that calls tools (in parallel when there are several) and the results
 * answering them, so the round can be stored or sent as a unit.
 */
export class ToolRound {
  readonly assistant: Message;
  private readonly calls: ToolCallPart[];
  private readonly results = new Map<string, Message>();

  /** The assistant says `text` (may be empty) and makes `calls`. */
  constructor(text: string, ...calls: ToolCallPart[]) {
    const parts: Part[] = text ? [textPart(text)] : [];
    for (const call of calls) parts.push(create(PartSchema, { kind: { case: "toolCall", value: call } }));
    this.assistant = create(MessageSchema, { role: Role.ASSISTANT, parts });
    this.calls = calls;
  }

  /** Records the result of the call `callId`; a later answer to the same call replaces an earlier one. */
  answer(callId: string, payload: ToolPayload, isError = false): this {
    const call = this.calls.find((c) => c.id === callId);
    this.results.set(callId, toolResultMessage(callId, call?.name ?? "", payload, isError));
    return this;
  }

  /**
   * The assistant message, then one TOOL message per call in call order. Throws when a call has no
   * answer or an answer has no call, since providers reject such a round.
   */
  messages(): Message[] {
    for (const callId of this.results.keys()) {
      if (!this.calls.some((c) => c.id === callId)) throw new Error(`tool round: result for unknown call ${JSON.stringify(callId)}`);
    }
    const missing = this.calls.filter((c) => !this.results.has(c.id)).map((c) => `${c.id} (${c.name})`);
    if (missing.length > 0) throw new Error(`tool round: calls without a result: ${missing.join(", ")}`);
    return [this.assistant, ...this.calls.map((c) => this.results.get(c.id)!)];
  }

  /** The round as an append_tool_round delta. */
  delta(): Delta {
    const [assistant, ...results] = this.messages();
    return create(DeltaSchema, { operation: { case: "appendToolRound", value: { assistant, results } } });
  }
}

/** A delta appending a user message (or text) to history. */
export function appendUser(message: Message | string): Delta {
  const value = typeof message === "string" ? userText(message) : message;
  return create(DeltaSchema, { operation: { case: "appendUser", value: { message: value } } });
}

/** A delta appending an assistant turn (text and/or calls, which open a tool round). */
export function appendAssistant(text: string, ...calls: ToolCallPart[]): Delta {
  return create(DeltaSchema, { operation: { case: "appendAssistant", value: { text, toolCalls: calls } } });
}

/** A delta answering one open call of the last assistant turn. */
export function appendToolResult(callId: string, name: string, payload: ToolPayload, isError = false): Delta {
  return create(DeltaSchema, { operation: { case: "appendToolResult", value: { toolCallId: callId, name, payload, isError } } });
}

/** A delta appending messages to a segment. */
export function appendMessages(segment: Segment, ...messages: Message[]): Delta {
  return create(DeltaSchema, { operation: { case: "appendMessages", value: { segment, messages } } });
}

/**
 * A delta storing a provider's response as received: the sidecar parses it in that provider's
 * format (text, tool calls, reasoning, ids) into the assistant turn. `body` is the response's JSON
 * text or bytes, or the parsed object an SDK returned (serialized with JSON.stringify).
 */
export function appendProviderResponse(provider: Provider, body: string | Uint8Array | object): Delta {
  const json = body instanceof Uint8Array ? body : new TextEncoder().encode(typeof body === "string" ? body : JSON.stringify(body));
  return create(DeltaSchema, { operation: { case: "appendProviderResponse", value: { provider, json } } });
}

/** A delta remembering a fact as an experience. */
export function remember(text: string): Delta {
  return create(DeltaSchema, { operation: { case: "remember", value: { text } } });
}

/**
 * A delta setting the conversation's title (absent = unchanged) and labels (`labels` added or
 * changed, `removeLabels` removed, the others kept). Committed like any batch; at most 32 labels,
 * keys 1 to 64 UTF-8 bytes, values at most 256, a title at most 512. `idleTtlMs`: how long the
 * conversation lives without a commit (absent = unchanged, 0 = the tenant's default, -1 = forever).
 */
export function setMetadata(metadata: { title?: string; labels?: Record<string, string>; removeLabels?: string[]; idleTtlMs?: bigint }): Delta {
  const { title, labels, removeLabels, idleTtlMs } = metadata;
  return create(DeltaSchema, { operation: { case: "setMetadata", value: { title, labels: labels ?? {}, removeLabels: removeLabels ?? [], idleTtlMs } } });
}

/**
 * A delta dropping the oldest history beyond `maxMessages` and/or `maxBytes` (whole tool rounds
 * only), leaving one summary at its head that names what was dropped (`summary`, or a marker text).
 */
export function pruneHistory(limits: { maxMessages?: number; maxBytes?: bigint; summary?: Message }): Delta {
  return create(DeltaSchema, { operation: { case: "pruneHistory", value: limits } });
}

/** A delta replacing the tools the model may call. */
export function setToolDefinitions(...definitions: ToolDefinition[]): Delta {
  return create(DeltaSchema, { operation: { case: "setToolDefinitions", value: { toolDefinitions: definitions } } });
}
