// An AI SDK (`ai` 7) tool loop whose every step is budgeted by contextd: `budgetedPrepareStep`
// compiles the step's messages inline (nothing stored) with tool-result clearing, so the model is
// sent the newest tool result whole and older ones as a placeholder. The model is the SDK's own
// MockLanguageModelV4: it calls a tool four times, then says what it was sent.
// Run a sidecar (`npm start`), then, in a project with @contextd/client and ai installed,
// `node ai_sdk_prepare_step.ts` (Node >= 24 runs TypeScript). CONTEXTD_ADDRESS overrides 127.0.0.1:7420.
import { generateText, jsonSchema, stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { Client } from "@contextd/client";
import { budgetedPrepareStep } from "@contextd/client/ai-sdk";

const usage = { inputTokens: { total: 0, noCache: 0, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 0, text: 0, reasoning: 0 } };

/** STUB MODEL, NOT AN LLM: reads a page four times, then reports how many results it was sent whole. Replace it with e.g. `openai("gpt-4o")`. */
let step = 0;
const model = new MockLanguageModelV4({
  doGenerate: async ({ prompt }) => {
    step += 1;
    if (step <= 4) return { content: [{ type: "tool-call", toolCallId: `call_${step}`, toolName: "readPage", input: JSON.stringify({ page: step }) }], finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] };
    const results = prompt.filter((message) => message.role === "tool").map((message) => JSON.stringify(message.content));
    const whole = results.filter((text) => text.includes("line of page")).length;
    return { content: [{ type: "text", text: `I was sent ${results.length} tool results, ${whole} of them whole.` }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
  },
});

const readPage = tool({
  description: "Reads a page of a long document",
  inputSchema: jsonSchema<{ page: number }>({ type: "object", properties: { page: { type: "number" } }, required: ["page"] }),
  execute: async ({ page }) => `line of page ${page}. `.repeat(100),
});

const client = new Client({ address: process.env.CONTEXTD_ADDRESS });
await client.waitReady();
const answer = await generateText({
  model,
  instructions: "Summarise the document.",
  messages: [{ role: "user", content: "Read pages 1 to 4." }],
  tools: { readPage },
  stopWhen: stepCountIs(8),
  // Over 500 estimated tokens, clear old tool results (the newest one stays whole).
  prepareStep: budgetedPrepareStep(client, { template: { budget: { toolResultClearing: { triggerTokens: 500n, keepRecent: 1 } } } }),
});
console.log(`${answer.steps.length} steps; ${answer.text}`);
client.close();
