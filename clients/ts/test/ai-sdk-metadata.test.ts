// The AI SDK interop keeps provider metadata (providerOptions of messages and parts, such as an
// Anthropic reasoning signature) through contextd, and budgetedPrepareStep budgets each step of a
// tool loop, against a real sidecar with the `ai` package's own mock language model.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { generateText, stepCountIs, tool, jsonSchema, type ModelMessage } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { appendUser } from "@contextd/client";
import { aiSdkPrompt, budgetedPrepareStep, fromModelMessages, responseDeltas, toModelMessages } from "@contextd/client/ai-sdk";
import { EstimatorKind, Provider, type CompileResult } from "@contextd/client/v1";
import { freshId, sidecarForFile } from "./sidecar.ts";

const usage = { inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 5, text: 5, reasoning: 0 } };
const signature = "EqQBCkYIBxgCKkD+sig/with+bytes==";

function plain(messages: ModelMessage[]): unknown {
  return JSON.parse(JSON.stringify(messages));
}

const file = sidecarForFile();

describe("AI SDK provider metadata", () => {
  test("providerOptions of messages and parts come back from a compile as they were given", async () => {
    const messages: ModelMessage[] = [
      { role: "user", content: [{ type: "text", text: "Think, then call.", providerOptions: { anthropic: { cacheControl: { type: "ephemeral" } } } }], providerOptions: { openai: { user: "u-1" } } },
      {
        role: "assistant",
        content: [
          { type: "reasoning", text: "The user wants a call.", providerOptions: { anthropic: { signature } } },
          { type: "reasoning", text: "", providerOptions: { anthropic: { redactedData: "cmVkYWN0ZWQ=" } } },
          { type: "text", text: "Calling.", providerOptions: { openai: { itemId: "msg_1" } } },
          { type: "tool-call", toolCallId: "call_1", toolName: "lookup", input: { q: "x" }, providerOptions: { openai: { itemId: "fc_1" } } },
        ],
      },
      { role: "tool", content: [{ type: "tool-result", toolCallId: "call_1", toolName: "lookup", output: { type: "text", value: "found" }, providerOptions: { anthropic: { cacheControl: { type: "ephemeral" } } } }] },
    ];
    const conversationId = freshId("ai-sdk-metadata");
    await file.client.commit({ conversationId, deltas: responseDeltas(messages as never) });
    const state = (await file.client.getState({ conversationId })).state!;
    // The typed reasoning parts carry what contextd's own rendering needs.
    const [thinking, redacted] = state.history[1]!.parts.map((part) => part.kind);
    assert.ok(thinking?.case === "reasoning" && thinking.value.signature === signature && thinking.value.provider === Provider.ANTHROPIC_MESSAGES);
    assert.ok(redacted?.case === "reasoning" && redacted.value.redactedData === "cmVkYWN0ZWQ=");
    const compiled = (await file.client.compile({ conversationId })).result!;
    assert.deepEqual(plain(aiSdkPrompt(compiled).messages), plain(messages));
    // Rendered for Anthropic by contextd itself, the signature is there too.
    const anthropic = (await file.client.compile({ conversationId, render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude-sonnet-4-5" } })).result!;
    assert.ok(new TextDecoder().decode(anthropic.rendered!.json).includes(signature));
  });

  test("a generateText answer's reasoning signature reaches the next request's prompt", async () => {
    const conversationId = freshId("ai-sdk-signature");
    const first = await file.client.turn({ conversationId }, 0n, [appendUser("Why is the sky blue?")]);
    const model = new MockLanguageModelV4({
      doGenerate: [
        { content: [{ type: "reasoning", text: "Rayleigh scattering.", providerMetadata: { anthropic: { signature } } }, { type: "text", text: "Short waves scatter more." }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] },
        { content: [{ type: "text", text: "You're welcome." }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] },
      ],
    });
    const answer = await generateText({ model, ...aiSdkPrompt(first) });
    const second = await file.client.turn({ conversationId }, first.committedVersion, [...responseDeltas(answer.responseMessages), appendUser("Thanks")]);
    await generateText({ model, ...aiSdkPrompt(second) });
    const sent = model.doGenerateCalls[1]!.prompt.find((message) => message.role === "assistant")!;
    const reasoning = (sent.content as { type: string; providerOptions?: unknown }[]).find((part) => part.type === "reasoning");
    assert.deepEqual(reasoning?.providerOptions, { anthropic: { signature } });
  });

  test("a message contextd got from a provider stream gives its signature to the SDK", () => {
    const [message] = toModelMessages(fromModelMessages([{ role: "assistant", content: [{ type: "reasoning", text: "t", providerOptions: { anthropic: { signature } } }] }]).map((m) => ({ ...m, extensions: [] })));
    assert.deepEqual(plain([message!]), [{ role: "assistant", content: [{ type: "reasoning", text: "t", providerOptions: { anthropic: { signature } } }] }]);
  });
});

describe("budgetedPrepareStep", () => {
  test("each step of a tool loop is sent its messages with old tool results cleared; the SDK's own objects otherwise", async () => {
    const big = "row ".repeat(200);
    let calls = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async () => {
        calls += 1;
        if (calls <= 3) return { content: [{ type: "tool-call", toolCallId: `call_${calls}`, toolName: "lookup", input: "{}" }], finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] };
        return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
      },
    });
    const results: CompileResult[] = [];
    const prepareStep = budgetedPrepareStep(file.client, {
      template: { budget: { toolResultClearing: { triggerTokens: 400n, keepRecent: 1, placeholder: "[cleared {name}]" } } },
      onResult: (result) => results.push(result),
    });
    const question: ModelMessage = { role: "user", content: "look it up three times" };
    const lookup = tool({ inputSchema: jsonSchema({ type: "object", properties: {} }), execute: async () => big });
    const answer = await generateText({ model, instructions: "Be brief.", messages: [question], tools: { lookup }, stopWhen: stepCountIs(6), prepareStep });
    assert.equal(answer.text, "done");
    const last = model.doGenerateCalls.at(-1)!.prompt;
    const outputs = last.filter((m) => m.role === "tool").map((m) => JSON.stringify(m.content));
    assert.equal(outputs.length, 3);
    assert.ok(outputs[0]!.includes("[cleared lookup]") && outputs[1]!.includes("[cleared lookup]") && outputs[2]!.includes("row row"));
    assert.equal(results.length, 4);
    assert.ok(results.at(-1)!.usage!.clearedTokens > 0n);
    assert.ok(results.every((result) => result.payload!.system.length === 1));
  });

  test("a budget keeps the newest whole turns and the latest user message", async () => {
    const messages: ModelMessage[] = [];
    for (let turn = 0; turn < 5; turn++) messages.push({ role: "user", content: `q${turn} ${"x".repeat(200)}` }, { role: "assistant", content: `a${turn} ${"y".repeat(200)}` });
    messages.push({ role: "user", content: "last" });
    const step = await budgetedPrepareStep(file.client, { budget: { maxTokens: 900n, estimator: { kind: EstimatorKind.CHARS } } })({ messages });
    assert.ok(step.messages.length > 1 && step.messages.length < messages.length);
    assert.deepEqual(step.messages, messages.slice(-step.messages.length));
    assert.ok(step.messages.every((message, at) => message === messages[messages.length - step.messages.length + at]));
    assert.equal(step.messages[0]!.role, "user");
  });
});
