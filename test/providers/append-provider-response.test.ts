import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { RenderOptionsSchema } from "#gen/contextd/v1/compile_pb";
import { Provider, type Message } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, type ConversationState, type Delta } from "#gen/contextd/v1/state_pb";
import { applyDeltas } from "../../src/core/deltas/apply-deltas.js";
import type { DeltaContext } from "../../src/core/deltas/delta-context.js";
import { renderRequest } from "../../src/core/providers/render.js";
import { emptyConversationState, planCommit } from "../../src/store/commit-plan.js";
import { payload, user } from "./build-messages.js";

/** A Gemini response whose call has no id: contextd must make one up on every append. */
const geminiBody = new TextEncoder().encode(
  JSON.stringify({ candidates: [{ content: { role: "model", parts: [{ functionCall: { name: "search", args: { q: "x" } } }] } }] }),
);
const appendGemini = create(DeltaSchema, { operation: { case: "appendProviderResponse", value: { provider: Provider.GEMINI, json: geminiBody } } });
const cancelOpenCalls = create(DeltaSchema, { operation: { case: "cancelToolCalls", value: {} } });

function counterContext(): DeltaContext {
  let counter = 0;
  return { newMessageId: () => `m${++counter}` };
}

function callIds(history: readonly Message[]): string[] {
  return history.flatMap((message) => message.parts.flatMap((part) => (part.kind.case === "toolCall" ? [part.kind.value.id] : [])));
}

/**
 * The history, after the user's question, renders for Gemini, whose validator rejects a call id
 * used twice (and a body starting on a function call turn, hence the question).
 */
function expectRendersForGemini(state: ConversationState): void {
  const history = [user("q", "go"), ...state.history];
  expect(() => renderRequest(payload({ history }), create(RenderOptionsSchema, { provider: Provider.GEMINI, model: "m" }))).not.toThrow();
}

describe("append_provider_response with Gemini bodies without call ids", () => {
  it("gives the same body appended twice in one batch distinct call ids", () => {
    const batch: Delta[] = [appendGemini, cancelOpenCalls, appendGemini];
    const state = applyDeltas(emptyConversationState("conv-1"), batch, counterContext());
    const ids = callIds(state.history);
    expect(ids).toHaveLength(2);
    expect(ids[0]).toMatch(/^gemini_[0-9a-f]{24}$/);
    expect(ids[1]).not.toBe(ids[0]);
    expectRendersForGemini(state);
  });

  it("gives the same body appended in two commits distinct call ids", () => {
    const options = { deltaContext: counterContext(), idempotencyKey: "", committedAtUnixMs: 0n, cleared: false };
    const first = planCommit(emptyConversationState("conv-1"), [appendGemini, cancelOpenCalls], options);
    const second = planCommit(first.state, [appendGemini], options);
    const ids = callIds(second.state.history);
    expect(ids).toHaveLength(2);
    expect(ids[1]).not.toBe(ids[0]);
    expectRendersForGemini(second.state);
  });

  it("gives the same append in another conversation other call ids", () => {
    const idsIn = (conversationId: string) => callIds(applyDeltas(emptyConversationState(conversationId), [appendGemini], counterContext()).history);
    expect(idsIn("conv-1")).not.toEqual(idsIn("conv-2"));
    expect(idsIn("conv-1")).toEqual(idsIn("conv-1"));
  });
});
