import { createHash } from "node:crypto";
import type { CompiledPayload } from "../../../gen/ts/contextd/v1/compile_pb.js";
import { messageContentKey } from "../model/content-hash.js";

/**
 * Hex SHA-256 of the stable prefix a provider prompt cache keys on: system (without scratch, which
 * changes every request), tools, memory and tool definitions, by content (ids do not reach a
 * provider). Computed on the neutral payload so it is the same with or without a render.
 */
export function prefixFingerprint(payload: CompiledPayload): string {
  const hash = createHash("sha256");
  for (const [name, messages] of [["system", payload.system], ["tools", payload.tools], ["memory", payload.memory]] as const) {
    hash.update(`\u0000${name}`);
    for (const message of messages) hash.update(`\u0001${messageContentKey(message)}`);
  }
  hash.update("\u0000tool_definitions");
  for (const definition of payload.toolDefinitions) {
    hash.update(`\u0001${definition.name}\u0002${definition.description}\u0002${definition.parameters}`);
  }
  return hash.digest("hex");
}
