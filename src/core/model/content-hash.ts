import { createHash } from "node:crypto";
import { toBinary } from "@bufbuild/protobuf";
import { MessageSchema, type Message, type Part, type ToolPayload } from "#gen/contextd/v1/message_pb";

/**
 * Hex SHA-256 of everything a message says except its id: role, actor, parts, source refs, origin,
 * cache hint, provenance, extensions, timestamp, sender name. Two messages with equal hashes are
 * interchangeable apart from identity. protobuf binary is deterministic for messages without maps,
 * which `Message` has none of.
 */
export function messageContentHash(message: Message): string {
  const bytes = toBinary(MessageSchema, message.id === "" ? message : { ...message, id: "" });
  return createHash("sha256").update(bytes).digest("hex");
}

/**
 * A string that is equal for two messages exactly when every token estimator counts them the same:
 * role, sender name and the content of every part (byte contents of images, files and binary
 * payloads reduced to their length, which is all an estimator reads). It is the key of the token
 * count cache: V8 hashes it natively, which is several times cheaper than a cryptographic digest of
 * the same text, and equality is exact, so there are no collisions to worry about.
 */
export function messageContentKey(message: Message): string {
  let key = `${message.role}\u0001${message.senderName}`;
  for (const part of message.parts) key += partKey(part);
  return key;
}

function partKey(part: Part): string {
  const kind = part.kind;
  switch (kind.case) {
    case "text":
      return `\u0002t${kind.value.text.length}:${kind.value.text}`;
    case "image":
      return `\u0002i${kind.value.detail}:${kind.value.mimeType}:${kind.value.data.length}:${kind.value.url}`;
    case "toolCall":
      return `\u0002c${kind.value.id.length}:${kind.value.id}${kind.value.name.length}:${kind.value.name}${payloadKey(kind.value.arguments)}`;
    case "toolResult": {
      let key = `\u0002r${kind.value.isError ? 1 : 0}${kind.value.toolCallId.length}:${kind.value.toolCallId}${kind.value.name.length}:${kind.value.name}${payloadKey(kind.value.payload)}`;
      for (const inner of kind.value.contentParts) key += partKey(inner);
      return key + "\u0003";
    }
    case "reasoning":
      return `\u0002z${kind.value.provider}:${kind.value.text.length}:${kind.value.text}${kind.value.signature.length}:${kind.value.signature}${kind.value.redactedData.length}:${kind.value.redactedData}`;
    case "providerCompaction": {
      const value = kind.value;
      const summary = value.summary === undefined ? "-" : `${value.summary.length}:${value.summary}`;
      return `\u0002p${value.provider}:${summary}${(value.encryptedContent ?? "").length}:${value.encryptedContent ?? ""}`;
    }
    case "file":
      return `\u0002f${kind.value.mimeType}:${kind.value.data.length}:${kind.value.name.length}:${kind.value.name}${kind.value.uri}`;
    default:
      return "\u0002_";
  }
}

function payloadKey(payload: ToolPayload | undefined): string {
  if (!payload) return "\u0004";
  return (
    `\u0004${payload.text.length}:${payload.text}${payload.data.length}:${payload.data}` +
    `${payload.binary ? payload.binary.data.length : -1}` +
    `${payload.error ? `${payload.error.code.length}:${payload.error.code}${payload.error.message}` : ""}\u0005` +
    `${payload.progress ? `${payload.progress.current}/${payload.progress.total}:${payload.progress.message}` : ""}\u0005` +
    `${payload.control ? `${payload.control.action.length}:${payload.control.action}${payload.control.reason}` : ""}\u0005`
  );
}
