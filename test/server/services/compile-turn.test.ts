import { type MessageInitShape } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { describe, expect, it } from "vitest";
import { CompileResultPart, EstimatorKind, type CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService, type WatchResponse } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { Segment, type Delta } from "#gen/contextd/v1/state_pb";
import { rpcFailure } from "../../support/grpc-js.js";
import { sidecarForSuite, sidecarStores } from "../../support/sidecar.js";
import { appendHistory, delta, textMessage } from "../../store/fixtures.js";

// One RPC per model call: a Compile whose `commit.deltas` carry what the agent produced since its
// last call, committed in the same atomic batch as the writeback, with the compile run on the
// state they produce. Real sidecar, grpc-js, both stores.

/** The deltas of one agent turn, without message ids (the sidecar assigns them). */
function turnDeltas(answer: string, question: string): Delta[] {
  return [
    delta({ case: "appendAssistant", value: { text: answer } }),
    delta({ case: "appendUser", value: { message: { parts: [{ kind: { case: "text", value: { text: question } } }] } } }),
  ];
}

function turn(
  conversationId: string,
  expectedVersion: bigint,
  deltas: Delta[],
  { idempotencyKey = "", maxTokens = 4_000n, include = [] as CompileResultPart[] } = {},
): MessageInitShape<typeof CompileRequestSchema> {
  return {
    conversationId,
    commit: { expectedVersion, deltas, idempotencyKey },
    render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" },
    budget: { maxTokens, estimator: { kind: EstimatorKind.CHARS } },
    include,
  };
}

describe.each(sidecarStores)("Compile with commit.deltas: one RPC per agent turn (real sidecar, %s)", (_name, backend) => {
  const running = sidecarForSuite(backend);
  let run = 0;
  const newId = () => `turn-${Date.now()}-${++run}`;
  const state = async (conversationId: string) => (await running.client.unary(ConversationService.method.getState, { conversationId })).state!;
  const seed = async (conversationId: string) =>
    running.client.unary(ConversationService.method.commit, {
      conversationId,
      expectedVersion: 0n,
      deltas: [
        delta({ case: "appendMessages", value: { segment: Segment.SYSTEM, messages: [textMessage("s", Role.SYSTEM, "be brief")] } }),
        appendHistory(textMessage("u0", Role.USER, "hello")),
      ],
    });


  it("commits the deltas, compiles the state they produce, and stores the ids it compiled", async () => {
    const conversationId = newId();
    await seed(conversationId);
    const { result } = await running.client.unary(ContextService.method.compile, turn(conversationId, 1n, turnDeltas("Hi! How can I help?", "What is 2 + 2?"), { include: [CompileResultPart.PAYLOAD] }));
    expect(result!.version).toBe(2n);
    expect(result!.committedVersion).toBe(2n);
    const stored = await state(conversationId);
    expect(stored.version).toBe(2n);
    // The payload is the stored history, with the ids the store kept for the new messages.
    expect(result!.payload!.history.map((message) => message.id)).toEqual(stored.history.map((message) => message.id));
    expect(stored.history).toHaveLength(3);
    expect(stored.history.slice(-2).map((message) => message.parts[0]!.kind.value)).toMatchObject([{ text: "Hi! How can I help?" }, { text: "What is 2 + 2?" }]);
    expect(stored.history.slice(-2).every((message) => message.id !== "")).toBe(true);
    const body = JSON.parse(new TextDecoder().decode(result!.rendered!.json)) as { messages: { role: string; content: unknown }[] };
    expect(body.messages.at(-1)).toMatchObject({ role: "user" });
    expect(JSON.stringify(body.messages.at(-1))).toContain("What is 2 + 2?");

    // Watch delivers the batch as sent: the agent's deltas.
    const watch = running.client.serverStream(ConversationService.method.watch, { conversationId, fromVersion: 1n });
    for await (const item of watch) {
      const change = (item as WatchResponse).kind;
      if (change.case !== "change") continue;
      expect(change.value.version).toBe(2n);
      expect(change.value.deltas.map((d) => d.operation.case)).toEqual(["appendAssistant", "appendUser"]);
      break;
    }
  });

  it("commits nothing when the compile fails, and nothing when a delta is invalid", async () => {
    const conversationId = newId();
    await seed(conversationId);
    // The new user message alone is over the budget: RESOURCE_EXHAUSTED, and the deltas are not stored.
    const overBudget = await rpcFailure(
      running.client.unary(ContextService.method.compile, turn(conversationId, 1n, turnDeltas("ok", "x".repeat(5_000)), { maxTokens: 100n })),
    );
    expect(overBudget.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect((await state(conversationId)).version).toBe(1n);
    // A call id twice in one round: INVALID_ARGUMENT naming it, nothing stored.
    const twice = { id: "call_404", name: "f", arguments: { data: "{}" } };
    const invalid = await rpcFailure(
      running.client.unary(ContextService.method.compile, turn(conversationId, 1n, [delta({ case: "appendAssistant", value: { toolCalls: [twice, twice] } })])),
    );
    expect(invalid.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(invalid.details).toContain("call_404");
    expect((await state(conversationId)).version).toBe(1n);
    // A stale expected version: ABORTED with the current one, nothing stored.
    const stale = await rpcFailure(running.client.unary(ContextService.method.compile, turn(conversationId, 0n, turnDeltas("ok", "next"))));
    expect(stale.code).toBe(grpc.status.ABORTED);
    expect(stale.metadata.get("contextd-current-version")).toEqual(["1"]);
    const stored = await state(conversationId);
    expect(stored.version).toBe(1n);
    expect(stored.history.map((message) => message.id)).toEqual(["u0"]);
  });

  it("answers a retry whose first answer was lost with the same compile, applied once", async () => {
    const conversationId = newId();
    await seed(conversationId);
    const request = turn(conversationId, 1n, turnDeltas("Sure.", "Tell me more."), { idempotencyKey: "turn-1" });
    const first = (await running.client.unary(ContextService.method.compile, request)).result!;
    expect(first.warnings).toEqual([]);
    const retry = (await running.client.unary(ContextService.method.compile, request)).result!;
    expect(retry.committedVersion).toBe(2n);
    expect(retry.version).toBe(2n);
    expect(retry.warnings.map((warning) => warning.code)).toEqual(["idempotent_replay"]);
    expect(retry.payload).toEqual(first.payload);
    expect(retry.rendered).toEqual(first.rendered);
    const stored = await state(conversationId);
    expect(stored.version).toBe(2n);
    expect(stored.history).toHaveLength(3);

    // Once the conversation moved on, the retry says what it committed and compiles nothing.
    await running.client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage("a2", Role.ASSISTANT, "more"))] });
    const late = (await running.client.unary(ContextService.method.compile, request)).result!;
    expect(late.committedVersion).toBe(2n);
    expect(late.payload).toBeUndefined();
    expect(late.rendered).toBeUndefined();
    expect(late.warnings.map((warning) => warning.code)).toEqual(["idempotent_replay"]);
    expect((await state(conversationId)).history).toHaveLength(4);
  });

  it("takes a turn and the include list over Connect JSON", async () => {
    const conversationId = newId();
    await seed(conversationId);
    const post = async (path: string, body: unknown) => {
      const response = await fetch(`http://127.0.0.1:${running.sidecar.port}/${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      expect(response.status, await response.clone().text()).toBe(200);
      return (await response.json()) as Record<string, any>;
    };
    const { result } = await post("contextd.v1.ContextService/Compile", {
      conversationId,
      commit: { expectedVersion: "1", deltas: [{ appendAssistant: { text: "Hi!" } }, { appendUser: { message: { parts: [{ text: { text: "Over JSON?" } }] } } }] },
      include: ["COMPILE_RESULT_PART_SOURCE"],
    });
    expect(result.committedVersion).toBe("2");
    expect(result.source.snapshot.history).toHaveLength(3);
    expect(result.normalizedSnapshot).toBeUndefined();
    expect(result.payload.history.at(-1).parts[0].text.text).toBe("Over JSON?");
    const committed = await post("contextd.v1.ConversationService/Commit", { conversationId, deltas: [{ appendAssistant: { text: "Yes." } }], includeState: true });
    expect(committed.version).toBe("3");
    expect(committed.state.history).toHaveLength(4);
    expect((await post("contextd.v1.ConversationService/Commit", { conversationId, deltas: [{ remember: { text: "likes JSON" } }] })).state).toBeUndefined();
  });

  it("sends the heavy parts only when included, and rejects an unset part", async () => {
    const conversationId = newId();
    await seed(conversationId);
    const lean = (await running.client.unary(ContextService.method.compile, { conversationId })).result!;
    expect(lean.source).toBeUndefined();
    expect(lean.writeback!.snapshot).toBeUndefined();
    expect(lean.transformations).toEqual({});
    const full = (await running.client.unary(ContextService.method.compile, { conversationId, include: [CompileResultPart.ALL_TRANSFORMATIONS, CompileResultPart.SOURCE] })).result!;
    expect(Object.keys(full.transformations).sort()).toEqual(["s", "u0"]);
    expect(full.source!.snapshot!.history.map((message) => message.id)).toEqual(["u0"]);
    expect(full.persistence).toBeUndefined();
    const unset = await rpcFailure(running.client.unary(ContextService.method.compile, { conversationId, include: [CompileResultPart.SOURCE, CompileResultPart.UNSPECIFIED] }));
    expect(unset.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(unset.details).toContain("include[1]");
  });
});
