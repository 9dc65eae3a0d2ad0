import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, delta, textMessage } from "../../store/fixtures.js";

const encode = (value: unknown) => new TextEncoder().encode(typeof value === "string" ? value : JSON.stringify(value));
const chunk = (delta: unknown, finish: string | null = null) => ({ object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] });
const answer = [chunk({ role: "assistant", content: "It is " }), chunk({ content: "4°C." }), chunk({}, "stop"), "[DONE]"].map(encode);

describe("append_provider_stream over gRPC (real sidecar)", () => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;

  beforeAll(async () => {
    sidecar = await startSidecar([]);
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
  });

  it("is taken by a compile's commit.deltas, which then renders the streamed answer", async () => {
    const conversationId = "stream-compile-1";
    await client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage("u1", Role.USER, "Weather?"))] });
    const response = await client.unary(ContextService.method.compile, {
      conversationId,
      commit: {
        expectedVersion: 1n,
        deltas: [
          delta({ case: "appendProviderStream", value: { provider: Provider.OPENAI_CHAT, events: answer } }),
          appendHistory(textMessage("u2", Role.USER, "Thanks")),
        ],
      },
      render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude" },
    });
    expect(response.result!.committedVersion).toBe(2n);
    const body = JSON.parse(new TextDecoder().decode(response.result!.rendered!.json)) as { messages: unknown[] };
    expect(body.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Weather?" }] },
      { role: "assistant", content: [{ type: "text", text: "It is 4°C." }] },
      { role: "user", content: [{ type: "text", text: "Thanks" }] },
    ]);
  });
});
