import { create, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  CompileRequestSchema,
  CompileResultPart,
  CompileResultSchema,
  CurrentTurnPersistence,
  type CompileResult,
} from "#gen/contextd/v1/compile_pb";
import { ConversationStateSchema } from "#gen/contextd/v1/state_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { compile } from "../../src/core/compile/compile.js";
import { testContext } from "./compile-context.js";
import { assistant, system, toolRound, user } from "./messages.js";

const heavyParts = [CompileResultPart.SOURCE, CompileResultPart.NORMALIZED_SNAPSHOT, CompileResultPart.WRITEBACK_SNAPSHOT, CompileResultPart.PERSISTENCE] as const;

/** The part of a result that `part` names, encoded (empty bytes when unset). */
function partBytes(result: CompileResult, part: CompileResultPart): Uint8Array {
  const only = create(CompileResultSchema);
  if (part === CompileResultPart.SOURCE) only.source = result.source;
  if (part === CompileResultPart.NORMALIZED_SNAPSHOT) only.normalizedSnapshot = result.normalizedSnapshot;
  if (part === CompileResultPart.WRITEBACK_SNAPSHOT && result.writeback?.snapshot) only.writeback = { ...result.writeback, messages: [] };
  if (part === CompileResultPart.PERSISTENCE) only.persistence = result.persistence;
  return toBinary(CompileResultSchema, only);
}

/** The result without the heavy parts and the stage timings (durations, never equal across runs). */
function lightBytes(result: CompileResult): Uint8Array {
  return toBinary(CompileResultSchema, {
    ...result,
    source: undefined,
    normalizedSnapshot: undefined,
    persistence: undefined,
    writeback: result.writeback && { ...result.writeback, snapshot: undefined },
    stageTimings: [],
  });
}

describe("CompileContext.parts: only the heavy parts asked for are built", () => {
  const stored = create(ConversationStateSchema, {
    conversationId: "c",
    version: 7n,
    system: [system("s", "be brief")],
    history: [user("u1", "hello ".repeat(200)), assistant("a1", "hi ".repeat(200)), ...toolRound("t", ["c1"]), user("u2", "again")],
  });
  const request = create(CompileRequestSchema, {
    conversationId: "c",
    budget: { maxTokens: 300n },
    render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" },
    pending: [user("", "pending one")],
    currentTurn: { raw: user("", "the turn"), persistence: CurrentTurnPersistence.PERSIST_RAW },
  });

  it("gives each requested part byte for byte as a compile that builds everything, and leaves the others unset", async () => {
    const everything = await compile(request, testContext({ stored }));
    for (const part of heavyParts) expect(partBytes(everything, part).length).toBeGreaterThan(0);
    for (const part of heavyParts) {
      const result = await compile(request, testContext({ stored, parts: new Set([part]) }));
      expect(partBytes(result, part)).toEqual(partBytes(everything, part));
      for (const other of heavyParts.filter((candidate) => candidate !== part)) {
        expect(partBytes(result, other), CompileResultPart[other]).toEqual(partBytes(create(CompileResultSchema), other));
      }
      expect(lightBytes(result)).toEqual(lightBytes(everything));
    }
  });

  it("builds none of them for an empty set, the rest of the result unchanged", async () => {
    const everything = await compile(request, testContext({ stored }));
    const lean = await compile(request, testContext({ stored, parts: new Set() }));
    expect(lean.source).toBeUndefined();
    expect(lean.normalizedSnapshot).toBeUndefined();
    expect(lean.persistence).toBeUndefined();
    expect(lean.writeback?.snapshot).toBeUndefined();
    expect(lean.writeback?.messages.length).toBe(2);
    expect(lightBytes(lean)).toEqual(lightBytes(everything));
  });
});
