import { create, type MessageInitShape } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { describe, expect, it } from "vitest";
import { BudgetSchema, CompileResultPart, CurrentTurnPersistence, EstimatorKind, type CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { rpcFailure } from "../../support/grpc-js.js";
import { sidecarForSuite, sidecarStores } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";

/** A stateful compile of `conversationId` with a current turn `turnId`, committing at `expected`. */
function turnRequest(conversationId: string, turnId: string, expected: bigint, idempotencyKey = ""): MessageInitShape<typeof CompileRequestSchema> {
  return {
    conversationId,
    currentTurn: { raw: textMessage(turnId, Role.USER, `question ${turnId}`), persistence: CurrentTurnPersistence.PERSIST_RAW },
    commit: { expectedVersion: expected, idempotencyKey },
  };
}

describe.each(sidecarStores)("stateful Compile with commit over gRPC (real sidecar, %s)", (_name, backend) => {
  const running = sidecarForSuite(backend);
  let run = 0;
  const newId = () => `conv-${Date.now()}-${++run}`;


  const state = async (conversationId: string) => (await running.client.unary(ConversationService.method.getState, { conversationId })).state!;

  it("compiles a conversation never written as an empty stored state, and does not create it", async () => {
    const conversationId = newId();
    const { result } = await running.client.unary(ContextService.method.compile, {
      conversationId,
      currentTurn: { raw: textMessage("q1", Role.USER, "hello") },
    });
    expect(result!.version).toBe(0n);
    expect(result!.committedVersion).toBe(0n);
    expect(result!.payload!.history.map((message) => message.id)).toEqual(["q1"]);
    expect((await state(conversationId)).version).toBe(0n);
  });

  it("answers lean by default: no input copies and no records of unchanged messages, and still commits the writeback", async () => {
    const conversationId = newId();
    const { result } = await running.client.unary(ContextService.method.compile, turnRequest(conversationId, "q1", 0n));
    expect(result!.source).toBeUndefined();
    expect(result!.normalizedSnapshot).toBeUndefined();
    expect(result!.persistence).toBeUndefined();
    expect(result!.writeback!.snapshot).toBeUndefined();
    expect(result!.payload!.history.map((message) => message.id)).toEqual(["q1"]);
    expect(result!.committedVersion).toBe(1n);
    expect((await state(conversationId)).history.map((message) => message.id)).toEqual(["q1"]);
    const full = await running.client.unary(ContextService.method.compile, {
      conversationId,
      include: [CompileResultPart.SOURCE, CompileResultPart.PERSISTENCE, CompileResultPart.WRITEBACK_SNAPSHOT, CompileResultPart.NORMALIZED_SNAPSHOT],
    });
    expect(full.result!.source!.snapshot!.history.map((message) => message.id)).toEqual(["q1"]);
    expect(full.result!.persistence!.history.map((message) => message.id)).toEqual(["q1"]);
    expect(full.result!.writeback!.snapshot!.history.map((message) => message.id)).toEqual(["q1"]);
    expect(full.result!.normalizedSnapshot!.history.map((message) => message.id)).toEqual(["q1"]);
  });

  it("creates a conversation never written when the commit expects version 0", async () => {
    const conversationId = newId();
    const { result } = await running.client.unary(ContextService.method.compile, turnRequest(conversationId, "q1", 0n));
    expect(result!.version).toBe(0n);
    expect(result!.committedVersion).toBe(1n);
    const stored = await state(conversationId);
    expect(stored.version).toBe(1n);
    expect(stored.history.map((message) => message.id)).toEqual(["q1"]);
  });

  it("runs an agent loop end to end: each compile-commit persists its turn, the next compile sees it", async () => {
    const conversationId = newId();
    await running.client.unary(ConversationService.method.commit, {
      conversationId,
      expectedVersion: 0n,
      deltas: [appendHistory(textMessage("s0", Role.USER, "seeded"), textMessage("s1", Role.ASSISTANT, "seeded answer"))],
    });
    let version = 1n;
    for (const turn of ["t1", "t2", "t3"]) {
      const { result } = await running.client.unary(ContextService.method.compile, {
        ...turnRequest(conversationId, turn, version),
        budget: create(BudgetSchema, { estimator: { kind: EstimatorKind.TOKENIZER } }),
      });
      expect(result!.version).toBe(version);
      expect(result!.payload!.history.at(-1)!.id).toBe(turn);
      expect(result!.committedVersion).toBe(version + 1n);
      version = result!.committedVersion;
      // The model's answer, as the host appends it after the call.
      const answer = await running.client.unary(ConversationService.method.commit, {
        conversationId,
        expectedVersion: version,
        deltas: [appendHistory(textMessage(`${turn}-answer`, Role.ASSISTANT, `answer to ${turn}`))],
      });
      version = answer.version;
    }
    const stored = await state(conversationId);
    expect(stored.version).toBe(version);
    expect(stored.history.map((message) => message.id)).toEqual(["s0", "s1", "t1", "t1-answer", "t2", "t2-answer", "t3", "t3-answer"]);
  });

  it("answers a stale expected version with ABORTED and the current version, committing nothing", async () => {
    const conversationId = newId();
    await running.client.unary(ContextService.method.compile, turnRequest(conversationId, "q1", 0n));
    const error = await rpcFailure(running.client.unary(ContextService.method.compile, turnRequest(conversationId, "q2", 0n)));
    expect(error.code).toBe(grpc.status.ABORTED);
    expect(error.metadata.get("contextd-current-version")).toEqual(["1"]);
    expect((await state(conversationId)).version).toBe(1n);
  });

  it("answers a retried compile-commit with its idempotency key from the original commit", async () => {
    const conversationId = newId();
    const request = turnRequest(conversationId, "q1", 0n, "turn-1");
    const first = (await running.client.unary(ContextService.method.compile, request)).result!;
    expect(first.committedVersion).toBe(1n);
    expect(first.warnings).toEqual([]);

    const retry = (await running.client.unary(ContextService.method.compile, request)).result!;
    expect(retry.committedVersion).toBe(1n);
    expect(retry.version).toBe(0n);
    expect(retry.warnings.map((warning) => warning.code)).toEqual(["idempotent_replay"]);
    const stored = await state(conversationId);
    expect(stored.version).toBe(1n);
    expect(stored.history.map((message) => message.id)).toEqual(["q1"]);

    // Still a replay after others committed on top.
    await running.client.unary(ConversationService.method.commit, { conversationId, expectedVersion: 1n, deltas: [appendHistory(textMessage("a1", Role.ASSISTANT, "answer"))] });
    expect((await running.client.unary(ContextService.method.compile, request)).result!.committedVersion).toBe(1n);

    // The same key with another request is a client bug, not a retry.
    const reused = await rpcFailure(running.client.unary(ContextService.method.compile, turnRequest(conversationId, "q9", 0n, "turn-1")));
    expect(reused.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(reused.details).toMatch(/idempotency_key "turn-1"/);
    // A key never used with a stale version is an ordinary conflict.
    const stale = await rpcFailure(running.client.unary(ContextService.method.compile, turnRequest(conversationId, "q2", 0n, "turn-2")));
    expect(stale.code).toBe(grpc.status.ABORTED);
    expect(stale.metadata.get("contextd-current-version")).toEqual(["2"]);
    expect((await state(conversationId)).version).toBe(2n);
  });

  it("renders a stored conversation as a view", async () => {
    const conversationId = newId();
    await running.client.unary(ConversationService.method.commit, {
      conversationId,
      deltas: [appendHistory(textMessage("u", Role.USER, "a < b"), textMessage("a", Role.ASSISTANT, "yes & no"))],
    });
    const xml = await running.client.unary(ContextService.method.render, { conversationId, view: "llm_xml" });
    expect(xml.text).toBe("<user>a &lt; b</user>\n<assistant>yes &amp; no</assistant>\n");
    const flat = await running.client.unary(ContextService.method.render, { conversationId, view: "flat_classifier" });
    expect(flat.text).toBe("user: a < b\nassistant: yes & no\n");
  });
});
