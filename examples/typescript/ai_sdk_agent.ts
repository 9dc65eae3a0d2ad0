// An agent on the Vercel AI SDK (`ai` 7) that keeps its conversation in contextd: each turn compiles
// the prompt (budgeted, with the stored tool definitions), runs `generateText` with a tool loop and
// stores what the SDK produced. The model is the SDK's own MockLanguageModelV4 with canned replies.
// Run a sidecar (`npm start`), then, in a project with @contextd/client and ai installed,
// `node ai_sdk_agent.ts` (Node >= 24 runs TypeScript). CONTEXTD_ADDRESS overrides 127.0.0.1:7420.
import { randomUUID } from "node:crypto";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { create } from "@bufbuild/protobuf";
import { Client, appendMessages, appendUser, setToolDefinitions, systemText } from "@contextd/client";
import { aiSdkPrompt, responseDeltas } from "@contextd/client/ai-sdk";
import { EstimatorKind, Provider, Segment, TokenizerEncoding, ToolDefinitionSchema, type Delta } from "@contextd/client/v1";

const usage = { inputTokens: { total: 0, noCache: 0, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 0, text: 0, reasoning: 0 } };

/** STUB MODEL, NOT AN LLM: calls the weather tool for a weather question, then answers from its result. Replace it with e.g. `openai("gpt-4o")`. */
const model = new MockLanguageModelV4({
  doGenerate: async ({ prompt }) => {
    const last = prompt[prompt.length - 1]!;
    if (last.role === "tool") {
      const output = last.content[0]!.type === "tool-result" ? last.content[0]!.output : undefined;
      return { content: [{ type: "text", text: `It is ${JSON.stringify(output?.type === "json" ? output.value : output)}.` }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
    }
    const text = last.role === "user" ? last.content.map((p) => (p.type === "text" ? p.text : "")).join("") : "";
    if (text.includes("weather")) {
      return { content: [{ type: "tool-call", toolCallId: "call_" + randomUUID().slice(0, 8), toolName: "weather", input: '{"city":"Oslo"}' }], finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] };
    }
    return { content: [{ type: "text", text: `You said: ${text}` }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
  },
});

const weather = create(ToolDefinitionSchema, {
  name: "weather",
  description: "The current weather in a city",
  parameters: JSON.stringify({ type: "object", properties: { city: { type: "string" } }, required: ["city"] }),
});

const client = new Client({ address: process.env.CONTEXTD_ADDRESS });
await client.waitReady();
// No `render`: the AI SDK takes the typed payload (a rendered compile would send the provider body
// instead); the estimator counts gpt-4o's tokens with OpenAI Chat framing, as a gpt-4o render would.
const estimator = { kind: EstimatorKind.TOKENIZER, encoding: TokenizerEncoding.O200K_BASE, provider: Provider.OPENAI_CHAT };
const request = { conversationId: "ai-sdk-" + randomUUID(), budget: { maxTokens: 2000n, estimator } };
let version = 0n;
let produced: Delta[] = [appendMessages(Segment.SYSTEM, systemText("You are terse.")), setToolDefinitions(weather)];
let answer = "";
for (const [turn, question] of ["What's the weather in Oslo?", "Thanks!", "And the weather now?"].entries()) {
  const compiled = await client.turn(request, version, [...produced, appendUser(question)]);
  version = compiled.committedVersion;
  const result = await generateText({ model, ...aiSdkPrompt(compiled, { weather: ({ city }: { city: string }) => ({ city, celsius: 4 + turn }) }), stopWhen: stepCountIs(5) });
  produced = responseDeltas(result.responseMessages);
  answer = result.text;
}
await client.commit({ conversationId: request.conversationId, expectedVersion: version, deltas: produced });
const stored = await client.getState({ conversationId: request.conversationId });
console.log(`3 turns: version ${stored.state!.version}, ${stored.state!.history.length} messages stored, last answer: ${answer}`);
client.close();
