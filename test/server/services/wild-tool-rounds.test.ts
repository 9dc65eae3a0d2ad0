import { create } from "@bufbuild/protobuf";
import { status, type ServiceError } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Provider, Role } from "#gen/contextd/v1/message_pb";
import type { Delta } from "#gen/contextd/v1/state_pb";
import { analyzeToolRounds } from "../../../src/core/model/tool-rounds.js";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startRedis, type RedisProcess } from "../../support/redis.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, delta, textMessage } from "../../store/fixtures.js";

// The sequences of issue 28 that commits refused (TOOL_ROUND_INVALID, the model's answer lost),
// committed to a real sidecar on a real Redis, then compiled for every provider: each body must
// pair every call with its results and hold no result without its call.

const encode = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));
/** An OpenAI Chat completion, as an OpenAI-compatible server answers it. */
const chatResponse = (message: Record<string, unknown>) =>
  delta({ case: "appendProviderResponse", value: { provider: Provider.OPENAI_CHAT, json: encode({ choices: [{ index: 0, message: { role: "assistant", ...message }, finish_reason: "stop" }] }) } });
const callsCompletion = (...calls: [string, string][]) => chatResponse({ content: null, tool_calls: calls.map(([id, name]) => ({ id, type: "function", function: { name, arguments: "{}" } })) });
const toolMessage = (id: string, callId: string, text: string) =>
  create(MessageSchema, { id, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, payload: { text } } } }] });
const user = (id: string, text: string) => appendHistory(textMessage(id, Role.USER, text));

const sequences: Record<string, Delta[][]> = {
  // `call_0` on every response, as some OpenAI-compatible servers answer.
  "call_0 reused across turns": [
    [user("u1", "weather in Oslo?")],
    [callsCompletion(["call_0", "get_weather"])],
    [appendHistory(toolMessage("t1", "call_0", "4C"))],
    [chatResponse({ content: "It is 4C." }), user("u2", "and in Rome?")],
    [callsCompletion(["call_0", "get_weather"])],
    [appendHistory(toolMessage("t2", "call_0", "18C"))],
    [chatResponse({ content: "It is 18C." })],
  ],
  // A LangChain AIMessage whose tool call has no id, and its ToolMessage.
  "a LangChain call without id": [
    [user("u1", "find the report")],
    [appendHistory(create(MessageSchema, { id: "lc-a", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { name: "search", arguments: { data: '{"q":"report"}' } } } }] }), toolMessage("lc-t", "", "report.pdf"))],
    [chatResponse({ content: "Found report.pdf." })],
  ],
  // The Agents SDK stores a function_call_output whose call lives in another session.
  "a result without its call": [[user("u1", "go on")], [appendHistory(toolMessage("orphan", "call_elsewhere", "done"))], [chatResponse({ content: "Carried on." })]],
  // The Agents SDK approval flow: the run stops for approval and the user speaks meanwhile.
  "a user message while an approval is pending": [
    [user("u1", "refund order 7")],
    [callsCompletion(["call_refund", "refund"])],
    [delta({ case: "appendUser", value: { message: textMessage("u2", Role.USER, "and email me the receipt") } })],
    [delta({ case: "appendToolResult", value: { toolCallId: "call_refund", payload: { text: "refunded" } } })],
    [chatResponse({ content: "Refunded; the receipt is on its way." })],
  ],
  // A detached resume: the tool ran in the resumed run, its result never reached this conversation.
  "a detached resume whose result never arrives": [
    [user("u1", "run the report")],
    [callsCompletion(["call_run", "run_report"], ["call_mail", "send_mail"])],
    [delta({ case: "appendToolResult", value: { toolCallId: "call_mail", payload: { text: "sent" } } })],
    [chatResponse({ content: "The report is ready." })],
    [user("u2", "thanks")],
  ],
};

const providers = [Provider.OPENAI_CHAT, Provider.OPENAI_RESPONSES, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI] as const;
/**
 * The providers whose bodies carry one stored call id in two rounds: all of them, since the
 * renderers give a reused id a collision-free rendered id per provider (docs/provider-bodies.md).
 */
const rendersReusedCallIds: readonly Provider[] = providers;

describe("what frameworks produce is stored and compiled into valid bodies (real sidecar on Redis)", () => {
  let redis: RedisProcess;
  let sidecar: Sidecar;
  let strict: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  let strictClient: ReturnType<typeof grpcJsClient>;

  beforeAll(async () => {
    redis = await startRedis();
    [sidecar, strict] = await Promise.all([startSidecar(["--redis-url", redis.url]), startSidecar(["--strict-tool-rounds", "true"])]);
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    strictClient = grpcJsClient(`127.0.0.1:${strict.port}`);
  }, 30_000);
  afterAll(async () => {
    client?.close();
    strictClient?.close();
    await Promise.all([sidecar?.stop(), strict?.stop()]);
    await redis?.stop();
  });

  for (const [name, batches] of Object.entries(sequences)) {
    it(`${name}: every commit is stored, and every provider's body pairs calls and results`, async () => {
      const conversationId = `wild-${name.replaceAll(" ", "-")}`;
      for (const deltas of batches) await client.unary(ConversationService.method.commit, { conversationId, deltas });
      const stored = (await client.unary(ConversationService.method.getState, { conversationId })).state!;
      expect(stored.version).toBe(BigInt(batches.length));
      const reusesIds = name.startsWith("call_0");
      if (reusesIds) {
        const payload = (await client.unary(ContextService.method.compile, { conversationId })).result!.payload!;
        expect(analyzeToolRounds(payload.history, { allowOpenTail: false }).violations).toEqual([]);
        expect(payload.history.filter((message) => message.role === Role.TOOL).map((message) => (message.parts[0]!.kind.value as { toolCallId: string }).toolCallId)).toEqual(["call_0", "call_0"]);
      }
      for (const provider of reusesIds ? rendersReusedCallIds : providers) {
        const compiled = await client.unary(ContextService.method.compile, { conversationId, render: { provider, model: "m" } });
        const body = JSON.parse(new TextDecoder().decode(compiled.result!.rendered!.json)) as Record<string, unknown>;
        expect(pairingProblems(provider, body), `${name}, ${Provider[provider]}: ${JSON.stringify(body)}`).toEqual([]);
      }
    });
  }

  it("stores the LangChain call under call_<message id>_0 and pairs its result; repairs are named in warnings", async () => {
    const history = (await client.unary(ConversationService.method.getState, { conversationId: "wild-a-LangChain-call-without-id" })).state!.history;
    const call = history.find((message) => message.id === "lc-a")!.parts[0]!.kind.value as { id: string };
    const result = history.find((message) => message.id === "lc-t")!.parts[0]!.kind.value as { toolCallId: string };
    expect([call.id, result.toolCallId]).toEqual(["call_lc-a_0", "call_lc-a_0"]);
    const detached = await client.unary(ContextService.method.compile, { conversationId: "wild-a-detached-resume-whose-result-never-arrives" });
    expect(detached.result!.warnings.map((warning) => warning.code)).toEqual(["tool_round_repaired"]);
    expect(detached.result!.warnings[0]!.message).toMatch(/^closed the unanswered calls of 1 round\(s\) with a "no result was recorded" result: history\[1\] \(message "[^"]+": "call_run"\)$/);
  });

  it("refuses the pairing breaks at commit on a sidecar started with --strict-tool-rounds, and stores reused ids and calls without ids there too", async () => {
    const refused: Record<string, RegExp> = {
      "a result without its call": /deltas\[0\]\.append_messages: invalid tool round \(tool_result_without_call\) at history\[1\] \(message "orphan"\)/,
      "a user message while an approval is pending": /deltas\[0\]\.append_user: tool round still open, missing results for call_refund/,
      "a detached resume whose result never arrives": /deltas\[0\]\.append_provider_response: tool round still open, missing results for call_run/,
    };
    for (const [name, batches] of Object.entries(sequences)) {
      const conversationId = `strict-${name.replaceAll(" ", "-")}`;
      let failure: ServiceError | undefined;
      for (const deltas of batches) {
        try {
          await strictClient.unary(ConversationService.method.commit, { conversationId, deltas });
        } catch (error) {
          failure = error as ServiceError;
          break;
        }
      }
      if (refused[name]) {
        expect(failure?.details, name).toMatch(refused[name]!);
        expect(failure!.code, name).toBe(status.INVALID_ARGUMENT);
      } else expect(failure, name).toBeUndefined();
    }
  });
});

/**
 * What breaks call/result pairing in a provider body, read from the body alone: a call without its
 * results right after it, a result that does not answer a call of the turn before it.
 */
function pairingProblems(provider: Provider, body: Record<string, unknown>): string[] {
  const problems: string[] = [];
  if (provider === Provider.OPENAI_CHAT) {
    const messages = body["messages"] as { role: string; tool_calls?: { id: string }[]; tool_call_id?: string }[];
    messages.forEach((message, index) => {
      if (message.role === "tool") {
        let back = index - 1;
        while (back >= 0 && messages[back]!.role === "tool") back--;
        if (!messages[back]?.tool_calls?.some((call) => call.id === message.tool_call_id)) problems.push(`messages[${index}]: result without its call`);
      }
      for (const call of message.tool_calls ?? []) {
        let next = index + 1;
        let answers = 0;
        while (messages[next]?.role === "tool") answers += messages[next++]!.tool_call_id === call.id ? 1 : 0;
        if (answers !== 1) problems.push(`messages[${index}]: call ${call.id} answered ${answers} times`);
      }
    });
  } else if (provider === Provider.OPENAI_RESPONSES) {
    const open = new Map<string, number>();
    (body["input"] as { type?: string; call_id?: string }[]).forEach((item, index) => {
      if (item.type === "function_call") open.set(item.call_id!, index);
      else if (item.type === "function_call_output") {
        if (!open.delete(item.call_id!)) problems.push(`input[${index}]: output without its call`);
      } else if (open.size > 0) problems.push(`input[${index}]: follows calls ${[...open.keys()].join(", ")} still open`);
    });
    if (open.size > 0) problems.push(`calls never answered: ${[...open.keys()].join(", ")}`);
  } else if (provider === Provider.ANTHROPIC_MESSAGES) {
    const messages = body["messages"] as { role: string; content: { type: string; id?: string; tool_use_id?: string }[] }[];
    messages.forEach((message, index) => {
      const uses = message.content.filter((block) => block.type === "tool_use").map((block) => block.id!);
      const results = message.content.filter((block) => block.type === "tool_result").map((block) => block.tool_use_id!);
      const before = index > 0 ? messages[index - 1]!.content.filter((block) => block.type === "tool_use").map((block) => block.id!) : [];
      for (const id of results) if (!before.includes(id)) problems.push(`messages[${index}]: tool_result ${id} without its tool_use`);
      const after = messages[index + 1]?.content.filter((block) => block.type === "tool_result").map((block) => block.tool_use_id!) ?? [];
      for (const id of uses) if (!after.includes(id)) problems.push(`messages[${index}]: tool_use ${id} without its tool_result`);
    });
  } else {
    const contents = body["contents"] as { role: string; parts: { functionCall?: { name: string }; functionResponse?: { name: string } }[] }[];
    contents.forEach((content, index) => {
      const calls = content.parts.filter((part) => part.functionCall).map((part) => part.functionCall!.name);
      const responses = content.parts.filter((part) => part.functionResponse).map((part) => part.functionResponse!.name);
      const before = index > 0 ? contents[index - 1]!.parts.filter((part) => part.functionCall).map((part) => part.functionCall!.name) : [];
      // Gemini pairs responses with calls by name (and id), not by order.
      if (responses.length > 0 && [...responses].sort().join() !== [...before].sort().join()) problems.push(`contents[${index}]: responses ${responses.join()} do not answer the calls ${before.join()}`);
      const after = contents[index + 1]?.parts.filter((part) => part.functionResponse).map((part) => part.functionResponse!.name) ?? [];
      if (calls.length > 0 && [...calls].sort().join() !== [...after].sort().join()) problems.push(`contents[${index}]: calls ${calls.join()} not answered by the next turn`);
    });
  }
  return problems;
}

