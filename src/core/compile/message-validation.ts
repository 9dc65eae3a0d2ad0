import { Code, ConnectError } from "@connectrpc/connect";
import { Role, type Message } from "#gen/contextd/v1/message_pb";
import { assertMessageJsonDepth } from "../model/json-depth.js";

/**
 * Structural checks every incoming message passes before any stage reads it: a known role and a
 * content variant in every part, and tool JSON no deeper than `maxJsonDepth`. `path` names the
 * message ("history[3]", "pending[0]").
 */
export function assertWellFormedMessage(message: Message, path: string): void {
  if (message.role === Role.UNSPECIFIED) {
    throw new ConnectError(`${path}.role is required${idSuffix(message)}`, Code.InvalidArgument);
  }
  if (Role[message.role] === undefined) {
    throw new ConnectError(`${path}.role: unknown role ${message.role}${idSuffix(message)}`, Code.InvalidArgument);
  }
  for (let index = 0; index < message.parts.length; index++) {
    if (message.parts[index]!.kind.case === undefined) {
      throw new ConnectError(`${path}.parts[${index}]: no content variant set${idSuffix(message)}`, Code.InvalidArgument);
    }
  }
  assertMessageJsonDepth(message, path);
}

/**
 * True when `assertWellFormedMessage` would pass, JSON depth aside (stored messages were measured
 * when committed); the cheap check callers make before building a path.
 */
export function isWellFormedMessage(message: Message): boolean {
  if (message.role === Role.UNSPECIFIED || Role[message.role] === undefined) return false;
  for (let index = 0; index < message.parts.length; index++) if (message.parts[index]!.kind.case === undefined) return false;
  return true;
}

function idSuffix(message: Message): string {
  return message.id === "" ? "" : ` (message "${message.id}")`;
}
