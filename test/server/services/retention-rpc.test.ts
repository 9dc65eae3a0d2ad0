import * as grpc from "@grpc/grpc-js";
import { describe, expect, it } from "vitest";
import { ConversationService, type ExportConversationsResponse } from "#gen/contextd/v1/conversation_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
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
  const running = sidecarForSuite(backend, ["--idle-ttl-per-tenant", "brief=1000"]);
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
});
