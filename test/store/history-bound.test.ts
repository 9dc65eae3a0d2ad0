import { create, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema } from "#gen/contextd/v1/state_pb";
import { HistoryBound, lowWaterOf } from "../../src/store/history-bound.js";
import { textMessage } from "./fixtures.js";

const sizeOf = (message: Message) => toBinary(MessageSchema, message).byteLength;
const stateOf = (history: Message[]) => create(ConversationStateSchema, { conversationId: "acme/c", history });
const summary = create(MessageSchema, { id: "s", role: Role.ASSISTANT, parts: [{ kind: { case: "text", value: { text: "[2 earlier messages were pruned]" } } }], provenance: { kind: { case: "summary", value: { coveredMessageIds: ["a", "b"] } } } });

describe("HistoryBound", () => {
  it("asks for a prune only past the bound, not counting the summaries at the head a prune leaves", () => {
    const bound = new HistoryBound({ defaultLimits: { maxMessages: 2, maxBytes: 0 }, perTenant: new Map() });
    const three = [textMessage("m0", Role.USER, "a"), textMessage("m1", Role.ASSISTANT, "b"), textMessage("m2", Role.USER, "c")];
    expect(bound.pruneFor("acme/c", stateOf(three.slice(1)), sizeOf)).toBeUndefined();
    expect(bound.pruneFor("acme/c", stateOf([summary, ...three.slice(1)]), sizeOf)).toBeUndefined();
    // Down to 90% of the bound, at least one below it.
    expect(bound.pruneFor("acme/c", stateOf(three), sizeOf)?.operation).toEqual({ case: "pruneHistory", value: expect.objectContaining({ maxMessages: 1, maxBytes: 0n }) });
  });

  it("measures bytes from the newest message back only until they pass the bound", () => {
    const history = Array.from({ length: 1_000 }, (_, index) => textMessage(`m${String(index).padStart(3, "0")}`, Role.USER, "x".repeat(40)));
    // Two messages fit, the third passes it.
    const maxBytes = 2 * sizeOf(history[0]!) + 1;
    const bound = new HistoryBound({ defaultLimits: { maxMessages: 0, maxBytes }, perTenant: new Map() });
    let measured = 0;
    const prune = bound.pruneFor("acme/c", stateOf(history), (message) => (measured++, sizeOf(message)));
    expect(prune?.operation.value).toMatchObject({ maxMessages: 0, maxBytes: BigInt(lowWaterOf(maxBytes)) });
    expect(measured).toBe(3);
    expect(bound.pruneFor("acme/c", stateOf(history.slice(-2)), sizeOf)).toBeUndefined();
  });

  it("takes a tenant's bound over the default, 0:0 meaning none for it", () => {
    const bound = new HistoryBound({ defaultLimits: { maxMessages: 10, maxBytes: 0 }, perTenant: new Map([["acme", { maxMessages: 0, maxBytes: 0 }], ["beta", { maxMessages: 3, maxBytes: 500 }]]) });
    expect(bound.any).toBe(true);
    expect(bound.limitsOf("acme/c")).toBeUndefined();
    expect(bound.limitsOf("beta/c")).toEqual({ maxMessages: 3, maxBytes: 500 });
    expect(bound.limitsOf("no-tenant")).toEqual({ maxMessages: 10, maxBytes: 0 });
    expect(new HistoryBound({ defaultLimits: { maxMessages: 0, maxBytes: 0 }, perTenant: new Map([["acme", { maxMessages: 0, maxBytes: 0 }]]) }).any).toBe(false);
  });

  it("prunes to 90% of a bound, at least one below it, 0 staying none", () => {
    expect([0, 1, 2, 9, 10, 100, 1_000, 1_048_576].map(lowWaterOf)).toEqual([0, 1, 1, 8, 9, 90, 900, 943_719]);
  });
});
