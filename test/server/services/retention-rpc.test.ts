import * as grpc from "@grpc/grpc-js";
import { describe, expect, it } from "vitest";
import { ConversationService, type ExportConversationsResponse } from "#gen/contextd/v1/conversation_service_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { CurrentTurnPersistence, EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { rpcFailure } from "../../support/grpc-js.js";
import { sidecarForSuite, sidecarStores } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";

/** Every message of a server stream, once it ended. */
function collect<T>(stream: grpc.ClientReadableStream<T>): Promise<T[]> {
  return new Promise((resolve, reject) => {
    const items: T[] = [];
    stream.on("data", (item: T) => items.push(item));
    stream.on("error", reject);
    stream.on("end", () => resolve(items));
  });
}

describe.each(sidecarStores)("retention RPCs against a real sidecar (%s)", (_name, backend) => {
  // Conversations of tenant "brief" live 1 s without a commit; every other tenant's forever.
  // Tenant "bounded" keeps at most 4 history messages (after the summary a prune leaves), the others any number.
  const running = sidecarForSuite(backend, ["--idle-ttl-per-tenant", "brief=1000", "--prune-per-tenant", "bounded=4:0"]);
  const commit = (conversationId: string, id = "u1") =>
    running.client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage(id, Role.USER, `hello from ${conversationId}`))] });

  it("DeleteConversation checks the expected version, then the conversation reads as never written", async () => {
    const { client } = running;
    await commit("acme/one");
    await commit("acme/one", "u2");
    const stale = await rpcFailure(client.unary(ConversationService.method.deleteConversation, { conversationId: "acme/one", expectedVersion: 1n }));
    expect(stale.code).toBe(grpc.status.ABORTED);
    expect(stale.details).toContain("2");
    expect(await client.unary(ConversationService.method.deleteConversation, { conversationId: "acme/one", expectedVersion: 2n })).toMatchObject({ deletedVersion: 2n });
    expect((await client.unary(ConversationService.method.getState, { conversationId: "acme/one" })).state).toMatchObject({ version: 0n, history: [] });
    expect((await rpcFailure(client.unary(ConversationService.method.deleteConversation, { conversationId: "" }))).code).toBe(grpc.status.INVALID_ARGUMENT);
  });

  it("DeleteConversations deletes a prefix a bounded page per call, resumed by token, and leaves other prefixes", async () => {
    const { client } = running;
    for (let index = 0; index < 5; index++) await commit(`gone/${index}`);
    await commit("gonest/kept");
    let token = "";
    const deletedPerCall: number[] = [];
    do {
      const page = await client.unary(ConversationService.method.deleteConversations, { prefix: "gone/", pageToken: token, pageSize: 2 });
      deletedPerCall.push(page.deleted);
      token = page.nextPageToken;
    } while (token !== "");
    expect(deletedPerCall.slice(0, 2)).toEqual([2, 2]);
    expect(deletedPerCall.reduce((sum, count) => sum + count, 0)).toBe(5);
    expect((await client.unary(ConversationService.method.listConversations, { prefix: "gone" })).conversations.map((summary) => summary.conversationId)).toEqual(["gonest/kept"]);
    const everything = await rpcFailure(client.unary(ConversationService.method.deleteConversations, { prefix: "" }));
    expect(everything.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(everything.details).toMatch(/prefix is required/);
    const over = await rpcFailure(client.unary(ConversationService.method.deleteConversations, { prefix: "gone/", pageSize: 1001 }));
    expect([over.code, over.details]).toEqual([grpc.status.INVALID_ARGUMENT, "page_size: 0 to 1000, got 1001"]);
  });

  it("ExportConversations streams a prefix's states in id order over several store pages, resumable from any response's token", async () => {
    const { client } = running;
    const ids = Array.from({ length: 20 }, (_, index) => `export/${String(index).padStart(2, "0")}`);
    for (const id of ids) await commit(id);
    const all: ExportConversationsResponse[] = await collect(client.serverStream(ConversationService.method.exportConversations, { prefix: "export/" }));
    expect(all.map((item) => item.state!.conversationId)).toEqual(ids);
    expect(all.every((item) => item.state!.version === 1n && item.state!.history.length === 1 && !item.withoutMessages)).toBe(true);
    const rest = await collect(client.serverStream(ConversationService.method.exportConversations, { prefix: "export/", resumeToken: all[4]!.resumeToken }));
    expect(rest.map((item) => item.state!.conversationId)).toEqual(ids.slice(5));
  });

  it("expires a conversation of a tenant with an idle TTL (--idle-ttl-per-tenant): it then reads as never written", async () => {
    const { client } = running;
    await commit("brief/chat");
    await commit("steady/chat");
    const listed = await client.unary(ConversationService.method.listConversations, { prefix: "brief/" });
    expect(listed.conversations[0]!.expiresAtUnixMs).toBe(listed.conversations[0]!.updatedAtUnixMs + 1_000n);
    for (let attempt = 0; attempt < 200; attempt++) {
      const { state } = await client.unary(ConversationService.method.getState, { conversationId: "brief/chat" });
      if (state!.version === 0n) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect((await client.unary(ConversationService.method.getState, { conversationId: "brief/chat" })).state!.version).toBe(0n);
    expect((await client.unary(ConversationService.method.getState, { conversationId: "steady/chat" })).state!.version).toBe(1n);
  });

  it("keeps a tenant's conversations within its --prune-per-tenant bound at every commit, as a prune_history delta would (down to 90% of it)", async () => {
    const { client } = running;
    const turns = Array.from({ length: 6 }, (_, index) => textMessage(`m${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, `turn ${index}`));
    const committed = await client.unary(ConversationService.method.commit, { conversationId: "bounded/chat", deltas: [appendHistory(...turns)], includeState: true });
    const [summary, ...kept] = committed.state!.history;
    // Past the bound: pruned to 90% of it (3 messages), so the next append needs no prune.
    expect(kept.map((message) => message.id)).toEqual(["m3", "m4", "m5"]);
    expect(summary!.provenance?.kind).toMatchObject({ case: "summary", value: { coveredMessageIds: ["m0", "m1", "m2"] } });
    // Without include_state (a store may plan such a commit on its stored tail): bounded all the same.
    await client.unary(ConversationService.method.commit, { conversationId: "bounded/chat", deltas: [appendHistory(textMessage("m6", Role.USER, "more"))] });
    const { state } = await client.unary(ConversationService.method.getState, { conversationId: "bounded/chat" });
    expect(state!.history.slice(1).map((message) => message.id)).toEqual(["m3", "m4", "m5", "m6"]);
    // Another tenant has no bound.
    const other = await client.unary(ConversationService.method.commit, { conversationId: "unbounded/chat", deltas: [appendHistory(...turns)], includeState: true });
    expect(other.state!.history.map((message) => message.id)).toEqual(["m0", "m1", "m2", "m3", "m4", "m5"]);
    // A compile that commits its turn: it compiled the history before the prune its commit added; the next compile sees it pruned.
    const turn = (id: string, expectedVersion: bigint) =>
      client.unary(ContextService.method.compile, {
        conversationId: "bounded/chat",
        currentTurn: { raw: textMessage(id, Role.USER, `question ${id}`), persistence: CurrentTurnPersistence.PERSIST_RAW },
        commit: { expectedVersion },
      });
    const first = (await turn("q1", 2n)).result!;
    expect(first.committedVersion).toBe(3n);
    expect(first.payload!.history.map((message) => message.id).slice(1)).toEqual(["m3", "m4", "m5", "m6", "q1"]);
    const stored = (await client.unary(ConversationService.method.getState, { conversationId: "bounded/chat" })).state!;
    expect(stored.history.slice(1).map((message) => message.id)).toEqual(["m5", "m6", "q1"]);
    const second = (await turn("q2", 3n)).result!;
    expect(second.payload!.history.map((message) => message.id).slice(1)).toEqual(["m5", "m6", "q1", "q2"]);
  });

  it("DeleteConversation takes the conversation's usage ledger and idempotency records; the tenant's usage totals keep its reports", async () => {
    const { client } = running;
    const deltas = [appendHistory(textMessage("u1", Role.USER, "hello"))];
    await client.unary(ConversationService.method.commit, { conversationId: "ledger/gone", deltas, idempotencyKey: "turn-1" });
    await client.unary(ContextService.method.reportUsage, {
      conversationId: "ledger/gone",
      reportId: "response-1",
      provider: Provider.OPENAI_CHAT,
      model: "gpt-4o",
      estimator: EstimatorKind.TOKENIZER,
      estimatedTokens: 90n,
      actualInputTokens: 100n,
      outputTokens: 10n,
    });
    const tenantBefore = await client.unary(ConversationService.method.listTenantUsage, { tenant: "ledger" });
    expect(tenantBefore.conversations.map((row) => row.conversationId)).toEqual(["ledger/gone"]);
    await client.unary(ConversationService.method.deleteConversation, { conversationId: "ledger/gone" });
    expect((await client.unary(ConversationService.method.getUsage, { conversationId: "ledger/gone" })).totals).toMatchObject({ reports: 0n, inputTokens: 0n });
    const tenantAfter = await client.unary(ConversationService.method.listTenantUsage, { tenant: "ledger" });
    expect(tenantAfter.conversations).toEqual([]);
    expect(tenantAfter.totals).toEqual(tenantBefore.totals);
    // The retry of the deleted conversation's keyed commit is a new commit, not a replay of version 1 of the deleted one.
    const retried = await client.unary(ConversationService.method.commit, { conversationId: "ledger/gone", deltas, idempotencyKey: "turn-1" });
    expect([retried.version, retried.replayed]).toEqual([1n, false]);
  });
});
