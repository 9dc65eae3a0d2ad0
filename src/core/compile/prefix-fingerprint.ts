import { hash } from "node:crypto";
import type { CompiledPayload } from "#gen/contextd/v1/compile_pb";
import { messageContentKey } from "../model/content-hash.js";

/**
 * Hex SHA-256 of the stable prefix a provider prompt cache keys on: system (without scratch, which
 * changes every request), tools, memory and tool definitions, by content (ids do not reach a
 * provider). Computed on the neutral payload so it is the same with or without a render.
 */
export function prefixFingerprint(payload: CompiledPayload): string {
  // One string and a one-shot digest instead of a Hash object fed piece by piece: each piece
  // starts with a control character, so no surrogate pair can form across pieces and the UTF-8
  // of the whole is the UTF-8 of the pieces in a row — the same digest.
  let text = "";
  for (const [name, messages] of [["system", payload.system], ["tools", payload.tools], ["memory", payload.memory]] as const) {
    text += `\u0000${name}`;
    for (const message of messages) text += `\u0001${messageContentKey(message)}`;
  }
  text += "\u0000tool_definitions";
  for (const definition of payload.toolDefinitions) {
    text += `\u0001${definition.name}\u0002${definition.description}\u0002${definition.parameters}`;
  }
  return hash("sha256", text, "hex");
}
