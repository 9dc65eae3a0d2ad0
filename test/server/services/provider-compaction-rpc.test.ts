import { readFileSync } from "node:fs";
import * as grpc from "@grpc/grpc-js";
import { describe, expect, it } from "vitest";
import { EstimatorKind, TransformationAction, TransformationReason } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { rpcFailure } from "../../support/grpc-js.js";
import { sidecarForSuite, sidecarStores } from "../../support/sidecar.js";
import { appendHistory, delta, textMessage } from "../../store/fixtures.js";

// Provider compaction parts through a real sidecar on every store: a response (whole and streamed)
// with an Anthropic compaction block or an OpenAI compaction item is appended, stored, read back
// and rendered; the block or item in the body is the response's, byte for byte, and what is before
// it is neither sent nor counted. The responses are the shared stream golden vectors.

interface StreamGolden {
  provider: "ANTHROPIC_MESSAGES" | "OPENAI_RESPONSES";
  events: unknown[];
  body: { content?: unknown[]; output?: unknown[] };
}

const golden = (name: string) => JSON.parse(readFileSync(new URL(`../../golden/streams/${name}.json`, import.meta.url), "utf8")) as StreamGolden;
const anthropic = golden("anthropic_compaction_then_text");
const openai = golden("openai_responses_compaction_then_text");
const encode = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));
const decode = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
// Ten tokens a message, so usage says exactly which messages were counted.
const fixed = { estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } };

describe.each(sidecarStores)("provider compaction (real sidecar, %s)", (_name, backend) => {
  const running = sidecarForSuite(backend);
  const run = Date.now();


  /** u1, a1, u2, then the provider's answer (whole or streamed), then u3; returns the conversation id. */
  async function conversation(name: string, provider: Provider, answer: ReturnType<typeof delta>): Promise<string> {
    const conversationId = `${name}-${run}`;
    await running.client.unary(ConversationService.method.commit, {
      conversationId,
      deltas: [appendHistory(textMessage("u1", Role.USER, "Fix the failing test."), textMessage("a1", Role.ASSISTANT, "Reading src/app.ts."), textMessage("u2", Role.USER, "Go on."))],
    });
    await running.client.unary(ConversationService.method.commit, { conversationId, expectedVersion: 1n, deltas: [answer, appendHistory(textMessage("u3", Role.USER, "Run them."))] });
    expect(provider).toBeDefined();
    return conversationId;
  }

  const whole = (vector: StreamGolden) => delta({ case: "appendProviderResponse", value: { provider: Provider[vector.provider], json: encode(vector.body) } });
  const streamed = (vector: StreamGolden) => delta({ case: "appendProviderStream", value: { provider: Provider[vector.provider], events: vector.events.map(encode) } });

  it("sends an Anthropic compaction block back byte for byte, first, and never the turns before it", async () => {
    const block = JSON.stringify(anthropic.body.content![0]);
    for (const [name, answer] of [["anthropic-whole", whole(anthropic)], ["anthropic-stream", streamed(anthropic)]] as const) {
      const conversationId = await conversation(name, Provider.ANTHROPIC_MESSAGES, answer);
      const { state } = await running.client.unary(ConversationService.method.getState, { conversationId });
      expect(state!.history[3]!.parts[0]!.kind.case).toBe("providerCompaction");
      const { result } = await running.client.unary(ContextService.method.compile, { conversationId, budget: fixed, render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude" } });
      const json = decode(result!.rendered!.json);
      // The block the response carried, key order and bytes, is in the body as it came.
      expect(json).toContain(block);
      const body = JSON.parse(json) as { messages: { role: string; content: unknown[] }[] };
      expect(body.messages).toEqual([
        { role: "assistant", content: [anthropic.body.content![0], anthropic.body.content![1]] },
        { role: "user", content: [{ type: "text", text: "Run them." }] },
      ]);
      // The budget counted the two messages sent, not the three behind the compaction.
      expect(result!.usage!.history).toBe(20n);
      for (const id of [state!.history[0]!.id, state!.history[1]!.id, state!.history[2]!.id]) {
        expect(result!.transformations[id]).toMatchObject({ action: TransformationAction.DROPPED, reason: TransformationReason.PROVIDER_COMPACTION });
      }
      expect(result!.budgetDroppedMessages).toBe(0n);
    }
  });

  it("puts an automatic cache breakpoint on the compaction block", async () => {
    const conversationId = `anthropic-whole-${run}`;
    const { result } = await running.client.unary(ContextService.method.compile, { conversationId, render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude", autoCacheBreakpoints: true } });
    const body = JSON.parse(decode(result!.rendered!.json)) as { messages: { content: { type: string; cache_control?: unknown }[] }[] };
    expect(body.messages[0]!.content[0]).toMatchObject({ type: "compaction", cache_control: { type: "ephemeral" } });
  });

  it("refuses another provider until a contextd summary covers the compacted range, then sends the summary", async () => {
    const conversationId = `anthropic-whole-${run}`;
    const refused = await rpcFailure(running.client.unary(ContextService.method.compile, { conversationId, render: { provider: Provider.OPENAI_CHAT, model: "gpt" } }));
    expect(refused.code).toBe(grpc.status.FAILED_PRECONDITION);
    expect(refused.details).toMatch(/^provider rule openai_chat\.provider_compaction violated at message "[^"]+": part 0 is the Anthropic Messages compaction of the conversation before it, which only Anthropic Messages can read; no contextd summary stands for that range/);
    const { state } = await running.client.unary(ConversationService.method.getState, { conversationId });
    await running.client.unary(ConversationService.method.commit, {
      conversationId,
      expectedVersion: state!.version,
      deltas: [delta({ case: "compact", value: { summary: textMessage("", Role.USER, "Summary: fix the failing test in src/app.ts."), throughMessageId: state!.history[2]!.id } })],
    });
    const { result } = await running.client.unary(ContextService.method.compile, { conversationId, render: { provider: Provider.OPENAI_CHAT, model: "gpt" } });
    expect(JSON.parse(decode(result!.rendered!.json))).toMatchObject({
      messages: [
        { role: "user", content: "Summary: fix the failing test in src/app.ts." },
        { role: "assistant", content: "I will fix the undefined x first." },
        { role: "user", content: "Run them." },
      ],
    });
    // Anthropic still starts at its block: the summary is behind it too.
    const anthropicBody = await running.client.unary(ContextService.method.compile, { conversationId, render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude" } });
    expect(decode(anthropicBody.result!.rendered!.json)).toContain(`"messages":[{"role":"assistant","content":[${JSON.stringify(anthropic.body.content![0])}`);
  });

  it("sends an OpenAI Responses compaction item back byte for byte, first, and never the items before it", async () => {
    const item = openai.body.output![0] as { id: string; encrypted_content: string };
    for (const [name, answer] of [["openai-whole", whole(openai)], ["openai-stream", streamed(openai)]] as const) {
      const conversationId = await conversation(name, Provider.OPENAI_RESPONSES, answer);
      const { result } = await running.client.unary(ContextService.method.compile, { conversationId, budget: fixed, render: { provider: Provider.OPENAI_RESPONSES, model: "gpt" } });
      const json = decode(result!.rendered!.json);
      expect(json).toContain(`"input":[${JSON.stringify({ type: "compaction", id: item.id, encrypted_content: item.encrypted_content })},`);
      expect((JSON.parse(json) as { input: unknown[] }).input).toEqual([
        { type: "compaction", id: item.id, encrypted_content: item.encrypted_content },
        { type: "message", role: "assistant", content: "Two timeouts in /var/log/app.log." },
        { type: "message", role: "user", content: "Run them." },
      ]);
      expect(result!.usage!.history).toBe(20n);
      const refused = await rpcFailure(running.client.unary(ContextService.method.compile, { conversationId, render: { provider: Provider.GEMINI, model: "gemini" } }));
      expect(refused.code).toBe(grpc.status.FAILED_PRECONDITION);
      expect(refused.details).toContain("gemini.provider_compaction");
    }
  });
});
