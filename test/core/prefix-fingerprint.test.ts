import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CompiledPayloadSchema, type CompiledPayload } from "#gen/contextd/v1/compile_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { ToolDefinitionSchema } from "#gen/contextd/v1/state_pb";
import { prefixFingerprint } from "../../src/core/compile/prefix-fingerprint.js";
import { messageContentKey } from "../../src/core/model/content-hash.js";
import { call, message, result } from "./messages.js";

/** The digest as it was computed before: a Hash object updated piece by piece. */
function referenceFingerprint(payload: CompiledPayload): string {
  const hash = createHash("sha256");
  for (const [name, messages] of [["system", payload.system], ["tools", payload.tools], ["memory", payload.memory]] as const) {
    hash.update(`\u0000${name}`);
    for (const item of messages) hash.update(`\u0001${messageContentKey(item)}`);
  }
  hash.update("\u0000tool_definitions");
  for (const definition of payload.toolDefinitions) hash.update(`\u0001${definition.name}\u0002${definition.description}\u0002${definition.parameters}`);
  return hash.digest("hex");
}

describe("prefixFingerprint", () => {
  it("is the piece-by-piece digest, lone surrogates and non-ASCII text included", () => {
    let state = 3;
    const random = () => ((state = (state * 1103515245 + 12345) >>> 0) / 2 ** 32);
    // Lone halves of surrogate pairs at both ends of texts: encoded separately they become U+FFFD,
    // so a pair formed across two pieces would change the digest.
    const texts = ["", "plain", "héllo", "\uD83D", "\uDE00", "end\uD83D", "\uDE00start", "\u{1F600}", "x".repeat(2_000)];
    const pick = () => texts[Math.floor(random() * texts.length)]!;
    const messages = () =>
      Array.from({ length: Math.floor(random() * 4) }, (_, index) => {
        const roll = random();
        if (roll < 0.6) return message(Role.SYSTEM, `m${index}`, pick(), pick());
        if (roll < 0.8) return message(Role.ASSISTANT, `m${index}`, call(pick(), pick(), pick()));
        return message(Role.TOOL, `m${index}`, result(pick(), pick(), pick()));
      });
    const seen = new Set<string>();
    for (let round = 0; round < 300; round++) {
      const payload = create(CompiledPayloadSchema, {
        system: messages(),
        tools: messages(),
        memory: messages(),
        toolDefinitions: Array.from({ length: Math.floor(random() * 3) }, () => create(ToolDefinitionSchema, { name: pick(), description: pick(), parameters: pick() })),
      });
      const fingerprint = prefixFingerprint(payload);
      expect(fingerprint, `round ${round}`).toBe(referenceFingerprint(payload));
      seen.add(fingerprint);
    }
    expect(seen.size).toBeGreaterThan(250);
  });
});
