import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, DeltaSchema, type ConversationState } from "#gen/contextd/v1/state_pb";
import { applyDeltas } from "../../src/core/deltas/apply-deltas.js";
import { assistant, message, text, toolRound, user } from "./messages.js";

const context = { newMessageId: (() => { let n = 0; return () => `new-${++n}`; })() };

function stateOf(history: Message[]): ConversationState {
  return create(ConversationStateSchema, { conversationId: "c", version: 4n, history });
}

function prune(state: ConversationState, value: { maxMessages?: number; maxBytes?: bigint; summary?: Message }): ConversationState {
  return applyDeltas(state, [create(DeltaSchema, { operation: { case: "pruneHistory", value } })], context);
}

function summaryOf(message: Message) {
  expect(message.provenance?.kind.case).toBe("summary");
  return message.provenance!.kind.value as { coveredMessageIds: string[]; replacedSummaryIds: string[] };
}

async function refusal(run: () => unknown): Promise<ConnectError> {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(ConnectError);
    return error as ConnectError;
  }
  throw new Error("expected a refusal");
}

describe("prune_history", () => {
  it("keeps the newest messages within max_messages and puts a summary naming the dropped ids in front", () => {
    const state = stateOf([user("u1", "one"), assistant("a1", "two"), user("u2", "three"), assistant("a2", "four")]);
    const next = prune(state, { maxMessages: 2 });
    expect(next.history.map((m) => m.id).slice(1)).toEqual(["u2", "a2"]);
    expect(summaryOf(next.history[0]!).coveredMessageIds).toEqual(["u1", "a1"]);
    expect(next.history[0]!.role).toBe(Role.ASSISTANT);
    expect(next.history[0]!.parts[0]!.kind.value).toMatchObject({ text: "[2 earlier messages were pruned]" });
  });

  it("never splits a tool round: a round that does not fit whole is dropped whole", () => {
    const state = stateOf([user("u1", "q"), ...toolRound("r", ["c1", "c2"]), user("u2", "next")]);
    // u2 and the round's last two messages would be 3: the round (3 messages) does not fit in 3 with u2.
    const next = prune(state, { maxMessages: 3 });
    expect(next.history.map((m) => m.id).slice(1)).toEqual(["u2"]);
    expect(summaryOf(next.history[0]!).coveredMessageIds).toEqual(["u1", "r-a", "r-r-c1", "r-r-c2"]);
    const wide = prune(state, { maxMessages: 4 });
    expect(wide.history.map((m) => m.id).slice(1)).toEqual(["r-a", "r-r-c1", "r-r-c2", "u2"]);
  });

  it("bounds the kept bytes by the messages' encodings", () => {
    const history = [user("u1", "x".repeat(100)), user("u2", "y".repeat(100)), user("u3", "z".repeat(100))];
    const size = toBinary(MessageSchema, history[2]!).byteLength;
    const next = prune(stateOf(history), { maxBytes: BigInt(2 * size) });
    expect(next.history.map((m) => m.id).slice(1)).toEqual(["u2", "u3"]);
    expect(prune(stateOf(history), { maxBytes: BigInt(2 * size - 1) }).history.map((m) => m.id).slice(1)).toEqual(["u3"]);
  });

  it("keeps the newest unit and an open round at the tail whatever their size", () => {
    const state = stateOf([user("u1", "q"), ...toolRound("r", ["c1", "c2"], ["c1"])]);
    const next = prune(state, { maxMessages: 1 });
    expect(next.history.map((m) => m.id).slice(1)).toEqual(["r-a", "r-r-c1"]);
  });

  it("takes over the coverage of the summaries it drops and uses the caller's summary", () => {
    const first = prune(stateOf([user("u1", "a"), user("u2", "b"), user("u3", "c")]), { maxMessages: 2 });
    const oldSummary = first.history[0]!;
    const withMore = { ...first, history: [...first.history, user("u4", "d")] };
    const given = message(Role.SYSTEM, "s2", text("the user asked about a, b and c"));
    const next = prune(withMore, { maxMessages: 1, summary: given });
    expect(next.history.map((m) => m.id)).toEqual(["s2", "u4"]);
    expect(summaryOf(next.history[0]!)).toMatchObject({ coveredMessageIds: ["u1", "u2", "u3"], replacedSummaryIds: [oldSummary.id] });
  });

  it("changes nothing when everything already fits", () => {
    const state = stateOf([user("u1", "a"), user("u2", "b")]);
    expect(prune(state, { maxMessages: 5 })).toBe(state);
    const pruned = prune(stateOf([user("u1", "a"), user("u2", "b"), user("u3", "c")]), { maxMessages: 2 });
    expect(prune(pruned, { maxMessages: 2 })).toBe(pruned);
  });

  it("refuses a prune without a limit, and a summary with tool calls, naming the delta", async () => {
    const state = stateOf([user("u1", "a")]);
    const none = await refusal(() => prune(state, {}));
    expect(none.code).toBe(Code.InvalidArgument);
    expect(none.rawMessage).toMatch(/^deltas\[0\]\.prune_history: set max_messages, max_bytes or both/);
    const round = toolRound("r", ["c1"]);
    const bad = await refusal(() => prune(state, { maxMessages: 1, summary: round[0]! }));
    expect(bad.rawMessage).toMatch(/prune_history: summary: a summary may not carry tool calls/);
  });
});

describe("set_metadata idle_ttl_ms", () => {
  const set = (state: ConversationState, idleTtlMs: bigint) => applyDeltas(state, [create(DeltaSchema, { operation: { case: "setMetadata", value: { idleTtlMs } } })], context);

  it("sets, keeps through clear_state and bounds the idle TTL", async () => {
    const state = set(stateOf([user("u1", "a")]), 60_000n);
    expect(state.idleTtlMs).toBe(60_000n);
    const cleared = applyDeltas(state, [create(DeltaSchema, { operation: { case: "clearState", value: {} } })], context);
    expect(cleared.idleTtlMs).toBe(60_000n);
    expect(set(state, -1n).idleTtlMs).toBe(-1n);
    for (const ttl of [-2n, 3_153_600_000_001n]) {
      const error = await refusal(() => set(state, ttl));
      expect(error.code).toBe(Code.InvalidArgument);
      expect(error.rawMessage).toContain(`idle_ttl_ms: ${ttl} is not -1 (never), 0 (the tenant's default) or 1 to 3153600000000 ms`);
    }
  });
});
