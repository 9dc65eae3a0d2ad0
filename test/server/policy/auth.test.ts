import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { TelemetryService } from "#gen/contextd/v1/telemetry_service_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { appendHistory, textMessage } from "../../store/fixtures.js";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

const adminToken = "admin-token-0123456789abcdef";
const acmeToken = "acme-token-0123456789abcdef";

function bearer(token: string): grpc.Metadata {
  const metadata = new grpc.Metadata();
  metadata.set("authorization", `Bearer ${token}`);
  return metadata;
}

describe("bearer tokens and tenant scoping", () => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  beforeAll(async () => {
    sidecar = await startSidecar([], { CONTEXTD_AUTH_TOKENS: `${adminToken},${acmeToken}=acme` });
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
  });

  it("never prints the tokens", () => {
    const start = sidecar.logs.find((line) => line.includes("contextd listening"))!;
    expect(start).not.toContain(adminToken);
    expect(JSON.parse(start).config).toMatchObject({ authTokens: 2, tenants: ["acme"] });
  });

  it("rejects a missing or unknown token with UNAUTHENTICATED; health and reflection stay open", async () => {
    await expect(client.unary(ConversationService.method.getState, { conversationId: "acme/a" })).rejects.toMatchObject({
      code: grpc.status.UNAUTHENTICATED,
      details: expect.stringContaining("authorization: Bearer"),
    });
    await expect(client.unary(ConversationService.method.getState, { conversationId: "acme/a" }, bearer(adminToken + "x"))).rejects.toMatchObject({
      code: grpc.status.UNAUTHENTICATED,
      details: expect.stringContaining("unknown bearer token"),
    });
    expect((await client.unary(Health.method.check, { service: "" })).status).toBe(ServingStatus.SERVING);
    const viaConnect = await fetch(`${sidecar.url}/contextd.v1.ConversationService/GetState`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ conversationId: "acme/a" }),
    });
    expect(viaConnect.status).toBe(401);
  });

  it("a tenant's token forks only inside its tenant: new_conversation_id outside it is PERMISSION_DENIED, as conversation_id is", async () => {
    await client.unary(ConversationService.method.commit, { conversationId: "acme/fork-source", deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] }, bearer(acmeToken));
    await expect(
      client.unary(ConversationService.method.fork, { conversationId: "acme/fork-source", newConversationId: "other/copy" }, bearer(acmeToken)),
    ).rejects.toMatchObject({ code: grpc.status.PERMISSION_DENIED, details: expect.stringContaining('new_conversation_id "other/copy" is outside tenant "acme"') });
    await expect(
      client.unary(ConversationService.method.fork, { conversationId: "other/source", newConversationId: "acme/copy" }, bearer(acmeToken)),
    ).rejects.toMatchObject({ code: grpc.status.PERMISSION_DENIED });
    const forked = await client.unary(ConversationService.method.fork, { conversationId: "acme/fork-source", newConversationId: "acme/fork-copy" }, bearer(acmeToken));
    expect(forked.forkedFrom).toMatchObject({ conversationId: "acme/fork-source", version: 1n });
  });

  it("an unscoped token sees every conversation", async () => {
    const response = await client.unary(ConversationService.method.getState, { conversationId: "other/a" }, bearer(adminToken));
    expect(response.state?.conversationId).toBe("other/a");
  });

  it("a tenant token sees only ids under its tenant: PERMISSION_DENIED otherwise, also for listings", async () => {
    const own = await client.unary(ConversationService.method.getState, { conversationId: "acme/a" }, bearer(acmeToken));
    expect(own.state?.conversationId).toBe("acme/a");
    await expect(client.unary(ConversationService.method.getState, { conversationId: "other/a" }, bearer(acmeToken))).rejects.toMatchObject({
      code: grpc.status.PERMISSION_DENIED,
      details: expect.stringContaining('must start with "acme/"'),
    });
    await expect(client.unary(ConversationService.method.getState, { conversationId: "acme" }, bearer(acmeToken))).rejects.toMatchObject({
      code: grpc.status.PERMISSION_DENIED,
    });
    await expect(client.unary(ConversationService.method.listConversations, { prefix: "other/" }, bearer(acmeToken))).rejects.toMatchObject({
      code: grpc.status.PERMISSION_DENIED,
      details: expect.stringContaining("prefix"),
    });
    const listed = await client.unary(ConversationService.method.listConversations, { prefix: "acme/" }, bearer(acmeToken));
    expect(listed.conversations.every((conversation) => conversation.conversationId.startsWith("acme/"))).toBe(true);
  });

  // Was PERMISSION_DENIED: a tenant's caller (the inspector's first page) had to type "acme/".
  it("lists a tenant's own conversations with an empty prefix, over gRPC and Connect; an unscoped token lists all", async () => {
    for (const id of ["acme/listed-1", "acme/listed-2", "other/not-listed"]) {
      await client.unary(ConversationService.method.commit, { conversationId: id, deltas: [appendHistory(textMessage("m", Role.USER, "hi"))] }, bearer(adminToken));
    }
    const ids = (page: { conversations: { conversationId: string }[] }) => page.conversations.map((conversation) => conversation.conversationId);
    const overGrpc = ids(await client.unary(ConversationService.method.listConversations, {}, bearer(acmeToken)));
    expect(overGrpc).toEqual(expect.arrayContaining(["acme/listed-1", "acme/listed-2"]));
    expect(overGrpc.every((id) => id.startsWith("acme/"))).toBe(true);
    expect(overGrpc).toEqual(ids(await client.unary(ConversationService.method.listConversations, { prefix: "acme/" }, bearer(acmeToken))));
    // Paged, the next page stays inside the tenant.
    const first = await client.unary(ConversationService.method.listConversations, { pageSize: 1 }, bearer(acmeToken));
    const second = await client.unary(ConversationService.method.listConversations, { pageSize: 1, pageToken: first.nextPageToken }, bearer(acmeToken));
    expect([...ids(first), ...ids(second)]).toEqual(overGrpc.slice(0, 2));
    const overConnect = await fetch(`${sidecar.url}/contextd.v1.ConversationService/ListConversations`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${acmeToken}` },
      body: "{}",
    });
    expect(overConnect.status).toBe(200);
    expect(((await overConnect.json()) as { conversations: { conversationId: string }[] }).conversations.map((conversation) => conversation.conversationId)).toEqual(overGrpc);
    const everything = ids(await client.unary(ConversationService.method.listConversations, {}, bearer(adminToken)));
    expect(everything).toEqual(expect.arrayContaining(["acme/listed-1", "other/not-listed"]));
  });

  it("scopes DeleteConversations and ExportConversations to the tenant: an empty prefix is the tenant's, another tenant's is PERMISSION_DENIED", async () => {
    for (const id of ["acme/retained-1", "acme/retained-2", "other/retained"]) {
      await client.unary(ConversationService.method.commit, { conversationId: id, deltas: [appendHistory(textMessage("m", Role.USER, "hi"))] }, bearer(adminToken));
    }
    const exported = await new Promise<string[]>((resolve, reject) => {
      const ids: string[] = [];
      const stream = client.serverStream(ConversationService.method.exportConversations, {}, bearer(acmeToken));
      stream.on("data", (item: { state?: { conversationId: string } }) => ids.push(item.state!.conversationId));
      stream.on("error", reject);
      stream.on("end", () => resolve(ids));
    });
    expect(exported).toEqual(expect.arrayContaining(["acme/retained-1", "acme/retained-2"]));
    expect(exported.every((id) => id.startsWith("acme/"))).toBe(true);
    await expect(client.unary(ConversationService.method.deleteConversations, { prefix: "other/" }, bearer(acmeToken))).rejects.toMatchObject({
      code: grpc.status.PERMISSION_DENIED,
      details: expect.stringContaining("prefix"),
    });
    let token = "";
    do token = (await client.unary(ConversationService.method.deleteConversations, { pageToken: token }, bearer(acmeToken))).nextPageToken;
    while (token !== "");
    expect((await client.unary(ConversationService.method.listConversations, {}, bearer(acmeToken))).conversations).toEqual([]);
    expect((await client.unary(ConversationService.method.getState, { conversationId: "other/retained" }, bearer(adminToken))).state!.version).toBe(1n);
  });

  it("checks streaming requests too", async () => {
    const stream = client.serverStream(TelemetryService.method.watchEvents, { conversationId: "other/a" }, bearer(acmeToken));
    const error = await new Promise<grpc.ServiceError>((resolve) => stream.on("error", resolve));
    expect(error.code).toBe(grpc.status.PERMISSION_DENIED);
  });
});
