import { create } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { grpcJsClient, rpcFailure } from "../../support/grpc-js.js";
import { sidecarForSuite, sidecarStores, startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";

// What the budget drops stays recallable: a compile with recall_tools sends the two tools, the
// model's call of one is answered by Recall from the stored history. Real sidecar, grpc-js, every store.

function codingRounds(rounds: number): Message[] {
  const messages: Message[] = [];
  for (let index = 0; index < rounds; index++) {
    messages.push(textMessage(`u${index}`, Role.USER, `step ${index}: fix the failing test`));
    messages.push(create(MessageSchema, { id: `a${index}`, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: `c${index}`, name: "run_command", arguments: { data: JSON.stringify({ command: `pytest tests/unit/test_module${index}.py -x` }) } } } }] }));
    messages.push(create(MessageSchema, { id: `t${index}`, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: `c${index}`, name: "run_command", payload: { text: `FAILED tests/unit/test_module${index}.py::test_case - AssertionError\n${"log line\n".repeat(200)}` } } } }] }));
  }
  return messages;
}

describe.each(sidecarStores)("Recall (real sidecar, %s)", (_name, backend) => {
  const suite = sidecarForSuite(backend);
  const conversationId = `recall-${Date.now()}`;

  it("answers the model's recall tool calls with what the budget dropped", async () => {
    const { client } = suite;
    await client.unary(ConversationService.method.commit, { conversationId, expectedVersion: 0n, deltas: [appendHistory(...codingRounds(40))] });
    const { result } = await client.unary(ContextService.method.compile, {
      conversationId,
      budget: { maxTokens: 3_000n },
      recallTools: true,
      render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-sonnet-4-5" },
    });
    const body = new TextDecoder().decode(result!.rendered!.json);
    expect(result!.budgetDroppedMessages).toBeGreaterThan(0n);
    expect(body).toContain('"name":"contextd_search_history"');
    expect(body).toContain('"name":"contextd_recall_message"');
    expect(body).not.toContain("test_module3.py");
    // The tools exist in the prompt only: a compile-commit leaves the stored definitions as they were.
    const committed = await client.unary(ContextService.method.compile, { conversationId, budget: { maxTokens: 3_000n }, recallTools: true, commit: { expectedVersion: 1n } });
    expect(committed.result!.payload!.toolDefinitions.map((definition) => definition.name)).toEqual(["contextd_recall_message", "contextd_search_history"]);
    const stored = await client.unary(ConversationService.method.getState, { conversationId, withoutMessages: true });
    expect(stored.state!.toolDefinitions).toEqual([]);

    const search = await client.unary(ConversationService.method.recall, {
      conversationId,
      toolCall: { name: "contextd_search_history", arguments: JSON.stringify({ query: "test_module3.py", max_results: 2 }) },
    });
    expect(search.hits.map((hit) => hit.messageId).sort()).toEqual(["a3", "t3"]);
    expect(search.text).toContain("pytest tests/unit/test_module3.py -x");
    expect(search.complete).toBe(true);
    expect(search.historyMessages).toBe(120n);
    expect(search.version).toBe(stored.state!.version);

    const byId = await client.unary(ConversationService.method.recall, { conversationId, toolCall: { name: "contextd_recall_message", arguments: '{"message_ids":["t3"]}' } });
    expect(byId.hits[0]!.position).toBe(11n);
    expect(byId.text).toContain("FAILED tests/unit/test_module3.py::test_case - AssertionError");
    expect(byId.text).toContain("--- message t3 · position 11 · tool · run_command");
  });

  it("searches a history longer than one window read (1,000 messages) down to its first message", async () => {
    const { client } = suite;
    const longId = `${conversationId}-long`;
    const messages = Array.from({ length: 2_500 }, (_, index) => textMessage(`m${index}`, Role.USER, `note ${index} about lib/part_${index}.rs`));
    await client.unary(ConversationService.method.commit, { conversationId: longId, expectedVersion: 0n, deltas: [appendHistory(...messages)] });
    const answer = await client.unary(ConversationService.method.recall, { conversationId: longId, query: "lib/part_3.rs", maxResults: 1 });
    expect(answer.hits.map((hit) => [hit.messageId, hit.position])).toEqual([["m3", 3n]]);
    expect(answer.examinedMessages).toBe(2_500n);
    expect(answer.complete).toBe(true);
    expect(answer.scannedBytes).toBeGreaterThan(0n);
    // The store hands out the messages it keeps decoded: their terms were kept, nothing is read again.
    const again = await client.unary(ConversationService.method.recall, { conversationId: longId, query: "lib/part_7.rs", maxResults: 1 });
    expect(again.hits[0]!.messageId).toBe("m7");
    expect(again.scannedBytes).toBe(0n);
    const byId = await client.unary(ConversationService.method.recall, { conversationId: longId, messageIds: ["m0", "m2499"] });
    expect(byId.hits.map((hit) => hit.position)).toEqual([0n, 2_499n]);
  });

  it("refuses a bad request with INVALID_ARGUMENT naming the field and the limit, and a clash of tool names", async () => {
    const { client } = suite;
    const tooMany = await rpcFailure(client.unary(ConversationService.method.recall, { conversationId, query: "x", maxResults: 51 }));
    expect(tooMany.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(tooMany.details).toContain("max_results: at most 50, got 51");
    const notATool = await rpcFailure(client.unary(ConversationService.method.recall, { conversationId, toolCall: { name: "read_file", arguments: "{}" } }));
    expect(notATool.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(notATool.details).toContain('tool_call.name: "read_file" is not a recall tool');
    const clash = await rpcFailure(
      client.unary(ContextService.method.compile, { conversationId, recallTools: true, toolDefinitions: { toolDefinitions: [{ name: "contextd_recall_message" }] } }),
    );
    expect(clash.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(clash.details).toContain('the name "contextd_recall_message" is reserved');
  });
});

describe("Recall at the door (real sidecar, memory store, tenant tokens)", () => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  const acme = new grpc.Metadata();
  acme.set("authorization", "Bearer acme-token-0123456789abcdef");
  beforeAll(async () => {
    sidecar = await startSidecar([], { CONTEXTD_AUTH_TOKENS: "acme-token-0123456789abcdef=acme" });
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
  });

  it("searches only the tenant's own conversations and bounds ids and tool names like every request", async () => {
    await client.unary(ConversationService.method.commit, { conversationId: "acme/c", deltas: [appendHistory(textMessage("u0", Role.USER, "see src/app.ts"))] }, acme);
    const own = await client.unary(ConversationService.method.recall, { conversationId: "acme/c", query: "app.ts" }, acme);
    expect(own.hits.map((hit) => hit.messageId)).toEqual(["u0"]);
    const other = await rpcFailure(client.unary(ConversationService.method.recall, { conversationId: "other/c", query: "app.ts" }, acme));
    expect(other.code).toBe(grpc.status.PERMISSION_DENIED);
    const longId = await rpcFailure(client.unary(ConversationService.method.recall, { conversationId: "acme/c", messageIds: ["x".repeat(1_025)] }, acme));
    expect(longId.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(longId.details).toContain("message_ids[0]");
    const longName = await rpcFailure(client.unary(ConversationService.method.recall, { conversationId: "acme/c", toolCall: { name: "n".repeat(257), arguments: "{}" } }, acme));
    expect(longName.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(longName.details).toContain("tool_call.name");
  });
});
