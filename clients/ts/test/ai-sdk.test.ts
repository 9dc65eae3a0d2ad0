// The AI SDK interop ("@contextd/client/ai-sdk") against a real sidecar, with the `ai` package's own
// mock language model (`ai/test`): compile → generateText/streamText → responseMessages → turn.
import assert from "node:assert/strict";
import { readFile, readdir } from "node:fs/promises";
import { describe, test } from "node:test";
import { generateText, stepCountIs, streamText, type ModelMessage } from "ai";
import { MockLanguageModelV4, convertArrayToReadableStream } from "ai/test";
import { create } from "@bufbuild/protobuf";
import { appendMessages, appendToolResult, appendUser, setToolDefinitions, systemText, textPayload } from "@contextd/client";
import { aiSdkPrompt, fromModelMessages, responseDeltas, toModelMessages } from "@contextd/client/ai-sdk";
import { CompileResultPart, EstimatorKind, MessageSchema, Provider, Role, Segment, TokenizerEncoding, ToolDefinitionSchema, type Message } from "@contextd/client/v1";
import { freshId, sidecarForFile } from "./sidecar.ts";

const usage = { inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 5, text: 5, reasoning: 0 } };
// The AI SDK takes the typed payload; these tests check the rendered body too, so they ask for both.
const render = { provider: Provider.OPENAI_CHAT, model: "gpt-4o" };
const include = [CompileResultPart.PAYLOAD];
const weather = create(ToolDefinitionSchema, {
  name: "weather",
  description: "The weather in a city",
  parameters: JSON.stringify({ type: "object", properties: { city: { type: "string" } }, required: ["city"] }),
});
const pixel = Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 1, 2, 3]);

function shape(messages: Message[]): string {
  return messages.map((m) => `${Role[m.role]}:${m.parts.map((p) => p.kind.case).join(",")}`).join(" ");
}

const file = sidecarForFile();

describe("AI SDK", () => {
  test("generateText runs a tool loop on a compiled prompt, and its responseMessages come back equal from the next compile", async () => {
    const request = { conversationId: freshId("ai-sdk-loop"), render, include };
    const question = create(MessageSchema, {
      role: Role.USER,
      parts: [
        { kind: { case: "text", value: { text: "Weather in Oslo? See the picture." } } },
        { kind: { case: "image", value: { url: "https://example.com/oslo.png", mimeType: "image/png" } } },
        { kind: { case: "image", value: { data: pixel, mimeType: "image/png" } } },
      ],
    });
    const first = await file.client.turn(request, 0n, [appendMessages(Segment.SYSTEM, systemText("You are terse.")), setToolDefinitions(weather), appendUser(question)]);
    const prompt = aiSdkPrompt(first, { weather: (input) => ({ city: (input as { city: string }).city, celsius: 4 }) });
    assert.deepEqual(prompt.instructions, [{ role: "system", content: "You are terse." }]);
    assert.deepEqual(Object.keys(prompt.tools), ["weather"]);

    // A model that takes image URLs itself (as OpenAI's does), so the SDK does not download them.
    const model = new MockLanguageModelV4({
      supportedUrls: { "image/*": [/^https:\/\//] },
      doGenerate: [
        { content: [{ type: "tool-call", toolCallId: "call-1", toolName: "weather", input: '{"city":"Oslo"}' }], finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] },
        { content: [{ type: "text", text: "4°C in Oslo." }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] },
      ],
    });
    const result = await generateText({ model, ...prompt, stopWhen: stepCountIs(5) });
    assert.equal(result.text, "4°C in Oslo.");

    // What the model was sent: the instructions, the user's text and both images, and the tool.
    const sent = model.doGenerateCalls[0]!;
    assert.deepEqual(plain([sent.prompt[0] as ModelMessage]), [{ role: "system", content: "You are terse." }]);
    const user = sent.prompt[1]!;
    assert.equal(user.role, "user");
    assert.deepEqual((user.content as { type: string }[]).map((p) => p.type), ["text", "file", "file"]);
    assert.equal(sent.tools?.[0]?.name, "weather");
    assert.deepEqual((sent.tools?.[0] as { inputSchema: unknown }).inputSchema, JSON.parse(weather.parameters));
    // The second step was sent the tool's result, computed by the execute given to aiSdkPrompt.
    const toolMessage = model.doGenerateCalls[1]!.prompt.at(-1)!;
    assert.equal(toolMessage.role, "tool");
    assert.match(JSON.stringify(toolMessage.content), /"celsius":4/);

    // In ai 7 the accumulated messages of all steps are `responseMessages`; the deprecated
    // `response` is the last step's, so its `messages` lack the tool round.
    const responseMessages = result.responseMessages;
    assert.deepEqual(result.response.messages.map((m) => m.role), ["assistant"]);
    assert.deepEqual(responseMessages.map((m) => m.role), ["assistant", "tool", "assistant"]);
    const second = await file.client.turn(request, first.committedVersion, responseDeltas(responseMessages));
    assert.equal(second.committedVersion, first.committedVersion + 1n);
    const state = await file.client.getState({ conversationId: request.conversationId });
    assert.equal(shape(state.state!.history), "USER:text,image,image ASSISTANT:toolCall TOOL:toolResult ASSISTANT:text");

    // The next compile gives the SDK back what it produced, and the question as it was asked.
    const again = aiSdkPrompt(second);
    assert.deepEqual(plain(again.messages.slice(1)), plain(responseMessages));
    assert.deepEqual(again.messages[0], toModelMessages([question])[0]);
    const rendered = new TextDecoder().decode(second.rendered!.json);
    for (const part of ["call-1", "celsius", "4°C in Oslo.", "https://example.com/oslo.png"]) assert.ok(rendered.includes(part), `the rendered body lacks ${part}`);
  });

  test("a finished streamText's responseMessages are stored like a generated answer, reasoning included", async () => {
    const request = { conversationId: freshId("ai-sdk-stream"), render, include };
    const first = await file.client.turn(request, 0n, [appendUser("Why is the sky blue?")]);
    const model = new MockLanguageModelV4({
      doStream: {
        stream: convertArrayToReadableStream([
          { type: "stream-start", warnings: [] },
          { type: "reasoning-start", id: "r1" },
          { type: "reasoning-delta", id: "r1", delta: "Rayleigh " },
          { type: "reasoning-delta", id: "r1", delta: "scattering." },
          { type: "reasoning-end", id: "r1" },
          { type: "text-start", id: "t1" },
          { type: "text-delta", id: "t1", delta: "Short waves " },
          { type: "text-delta", id: "t1", delta: "scatter more." },
          { type: "text-end", id: "t1" },
          { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage },
        ]),
      },
    });
    const result = streamText({ model, ...aiSdkPrompt(first) });
    let streamed = "";
    for await (const delta of result.textStream) streamed += delta;
    assert.equal(streamed, "Short waves scatter more.");
    const messages = await result.responseMessages;

    const second = await file.client.turn(request, first.committedVersion, responseDeltas(messages));
    const state = await file.client.getState({ conversationId: request.conversationId });
    assert.equal(shape(state.state!.history), "USER:text ASSISTANT:reasoning,text");
    const reasoning = state.state!.history[1]!.parts[0]!.kind;
    assert.ok(reasoning.case === "reasoning" && reasoning.value.text === "Rayleigh scattering.");
    assert.deepEqual(plain(aiSdkPrompt(second).messages.slice(1)), plain(messages));
  });

  test("a tool without execute ends the SDK's loop at its call; the call is stored open and answered later", async () => {
    const request = { conversationId: freshId("ai-sdk-open"), render, include };
    const first = await file.client.turn(request, 0n, [setToolDefinitions(weather), appendUser("Weather in Bergen?")]);
    const model = new MockLanguageModelV4({
      doGenerate: { content: [{ type: "tool-call", toolCallId: "call-9", toolName: "weather", input: '{"city":"Bergen"}' }], finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] },
    });
    const result = await generateText({ model, ...aiSdkPrompt(first), stopWhen: stepCountIs(5) });
    assert.equal(model.doGenerateCalls.length, 1);
    assert.deepEqual(result.toolCalls.map((c) => [c.toolCallId, c.input]), [["call-9", { city: "Bergen" }]]);
    const open = await file.client.turn(request, first.committedVersion, responseDeltas(result.responseMessages));
    assert.equal(shape(open.payload!.history), "USER:text ASSISTANT:toolCall");
    const answered = await file.client.turn(request, open.committedVersion, [appendToolResult("call-9", "weather", textPayload("rain"))]);
    const tail = aiSdkPrompt(answered).messages.at(-1)!;
    assert.deepEqual(tail, { role: "tool", content: [{ type: "tool-result", toolCallId: "call-9", toolName: "weather", output: { type: "text", value: "rain" } }] });
  });

  test("a compile without render carries the payload the SDK needs; a rendered one without PAYLOAD is refused by name", async () => {
    const conversationId = freshId("ai-sdk-unrendered");
    const estimator = { kind: EstimatorKind.TOKENIZER, encoding: TokenizerEncoding.O200K_BASE, provider: Provider.OPENAI_CHAT };
    const unrendered = await file.client.turn({ conversationId, budget: { maxTokens: 2000n, estimator } }, 0n, [appendUser("Hi!")]);
    assert.equal(unrendered.rendered, undefined);
    assert.deepEqual(plain(aiSdkPrompt(unrendered).messages), [{ role: "user", content: [{ type: "text", text: "Hi!" }] }]);
    const rendered = await file.client.turn({ conversationId, render }, unrendered.committedVersion, [appendUser("Again?")]);
    assert.equal(rendered.payload, undefined);
    assert.throws(() => aiSdkPrompt(rendered), /CompileResultPart\.PAYLOAD/);
  });

  test("what contextd has no typed form for is refused, naming the message and part; an unpaired result is stored and left out of the next prompt", async () => {
    const approval: ModelMessage[] = [{ role: "tool", content: [{ type: "tool-approval-response", approvalId: "a1", approved: true }] }];
    assert.throws(() => fromModelMessages(approval), /message 0 \(tool\) part 0 is a tool-approval-response/);
    const custom: ModelMessage[] = [{ role: "assistant", content: [{ type: "text", text: "hi" }, { type: "custom", kind: "acme.widget" }] }];
    assert.throws(() => fromModelMessages(custom), /message 0 \(assistant\) part 1 is a custom part/);
    const executed: ModelMessage[] = [{ role: "assistant", content: [{ type: "tool-result", toolCallId: "c", toolName: "web_search", output: { type: "text", value: "..." } }] }];
    assert.throws(() => fromModelMessages(executed), /message 0 \(assistant\) part 0 is a tool-result part/);
    const referenced: ModelMessage[] = [{ role: "user", content: [{ type: "file", mediaType: "application/pdf", data: { type: "reference", reference: { openai: "file-1" } } }] }];
    assert.throws(() => fromModelMessages(referenced), /message 0 \(user\) part 0 is a file given as a provider reference/);

    const conversationId = freshId("ai-sdk-unpaired");
    await file.client.commit({ conversationId, deltas: [appendUser("hi")] });
    const stray = responseDeltas([{ role: "tool", content: [{ type: "tool-result", toolCallId: "nope", toolName: "weather", output: { type: "text", value: "?" } }] }]);
    await file.client.commit({ conversationId, deltas: stray });
    const state = await file.client.getState({ conversationId });
    assert.equal(shape(state.state!.history), "USER:text TOOL:toolResult", "stored as it came");
    const next = await file.client.compile({ conversationId });
    assert.equal(shape(next.result!.payload!.history), "USER:text", "the compile's repair leaves it out");
    assert.deepEqual(next.result!.warnings.map((w) => w.code), ["tool_round_repaired"]);
  });
});

test("conversions that come back in another shape: the image part, a denied execution, a content output", () => {
  const given: ModelMessage[] = [
    { role: "user", content: [{ type: "image", image: pixel, mediaType: "image/png" }] },
    { role: "assistant", content: [{ type: "tool-call", toolCallId: "c1", toolName: "rm", input: { path: "/" } }, { type: "tool-call", toolCallId: "c2", toolName: "shot", input: {} }] },
    {
      role: "tool",
      content: [
        { type: "tool-result", toolCallId: "c1", toolName: "rm", output: { type: "execution-denied", reason: "not allowed" } },
        { type: "tool-result", toolCallId: "c2", toolName: "shot", output: { type: "content", value: [{ type: "text", text: "a screenshot" }, { type: "file", mediaType: "image/png", data: { type: "data", data: pixel } }] } },
      ],
    },
  ];
  const stored = fromModelMessages(given);
  assert.equal(shape(stored), "USER:image ASSISTANT:toolCall,toolCall TOOL:toolResult TOOL:toolResult");
  assert.deepEqual(toModelMessages(stored), [
    { role: "user", content: [{ type: "file", mediaType: "image/png", data: { type: "data", data: pixel } }] },
    given[1],
    { role: "tool", content: [{ type: "tool-result", toolCallId: "c1", toolName: "rm", output: { type: "error-text", value: "execution_denied: not allowed" } }] },
    { role: "tool", content: [{ type: "tool-result", toolCallId: "c2", toolName: "shot", output: { type: "content", value: [{ type: "text", text: "a screenshot" }, { type: "file", mediaType: "image/png", data: { type: "data", data: pixel } }] } }] },
  ]);
});

test("only the ai-sdk entry of the installed package imports ai, so the main entry runs without it", async () => {
  const dir = new URL("../node_modules/@contextd/client/dist/src/", import.meta.url);
  const importers = [];
  for (const name of await readdir(dir)) {
    if (name.endsWith(".js") && /from "ai(\/[^"]*)?"/.test(await readFile(new URL(name, dir), "utf8"))) importers.push(name);
  }
  assert.deepEqual(importers, ["ai-sdk.js"]);
});

/** The messages as JSON values (drops the `undefined` fields the SDK leaves on some parts). */
function plain(messages: ModelMessage[]): unknown {
  return JSON.parse(JSON.stringify(messages));
}
