// A 20-turn agent loop on contextd with the TypeScript client, with a stub in place of the LLM:
// a tool call every other turn, a token budget that trims the oldest turns, the OpenAI Chat render.
// Run a sidecar (`npm start`), then, in a project with @contextd/client installed,
// `node agent_loop.ts` (Node >= 24 runs TypeScript). CONTEXTD_ADDRESS overrides 127.0.0.1:7420.
import { randomUUID } from "node:crypto";
import { Client, appendProviderResponse, appendToolResult, appendUser, renderedBody, textPayload, type ContextdError } from "@contextd/client";
import { Provider, type Delta } from "@contextd/client/v1";

interface ToolCall { id: string; type: "function"; function: { name: string; arguments: string } }
interface ChatMessage { role: string; content: string | null; tool_calls?: ToolCall[] }
interface ChatCompletion { id: string; object: "chat.completion"; model: string; choices: { index: number; finish_reason: string; message: ChatMessage }[] }

/** STUB MODEL, NOT AN LLM: answers an OpenAI Chat request body with canned replies. Replace it with `openai.chat.completions.create(body)`. */
async function model(body: { messages: ChatMessage[] }): Promise<ChatCompletion> {
  const last = body.messages[body.messages.length - 1]!;
  const message: ChatMessage =
    last.role === "user" && String(last.content).includes("weather")
      ? { role: "assistant", content: null, tool_calls: [{ id: "call_" + randomUUID().slice(0, 8), type: "function", function: { name: "weather", arguments: '{"city":"Oslo"}' } }] }
      : { role: "assistant", content: last.role === "tool" ? `It is ${last.content}.` : `You said: ${last.content}` };
  return { id: "stub", object: "chat.completion", model: "stub", choices: [{ index: 0, finish_reason: message.tool_calls ? "tool_calls" : "stop", message }] };
}

/** The user's side of the stub conversation: a question that needs a tool every other turn. */
function userMessage(turn: number): string {
  return turn % 2 === 1 ? `What's the weather in Oslo? (turn ${turn}) ${"Some context. ".repeat(20)}` : `Thanks! (turn ${turn})`;
}

/** Stub tool. */
function runTool(call: ToolCall): string {
  return call.function.name === "weather" ? "4°C, light rain" : `unknown tool ${call.function.name}`;
}

// --- the loop: docs/typescript-client.md counts the lines from here to the end marker ---
const client = new Client({ address: process.env.CONTEXTD_ADDRESS });
await client.waitReady();
const conversationId = "example-" + randomUUID();
const render = { provider: Provider.OPENAI_CHAT, model: "gpt-4o" };
const request = { conversationId, budget: { maxTokens: 600n }, render };
let version = 0n;
let produced: Delta[] = [];
for (let turn = 1; turn <= 20; turn++) {
  produced.push(appendUser(userMessage(turn)));
  for (;;) {
    const compiled = await client.turn(request, version, produced);
    version = compiled.committedVersion;
    const completion = await model(renderedBody(compiled));
    const calls = completion.choices[0]!.message.tool_calls ?? [];
    produced = [appendProviderResponse(Provider.OPENAI_CHAT, completion)];
    for (const c of calls) produced.push(appendToolResult(c.id, c.function.name, textPayload(runTool(c))));
    if (calls.length === 0) break;
  }
}
await client.commit({ conversationId, expectedVersion: version, deltas: produced }).catch((error: ContextdError) => {
  console.error(error.message);
  process.exit(1);
});
// --- end of the loop ---
const last = await client.compile(request);
const stored = await client.getState({ conversationId });
console.log(`20 turns: version ${stored.state!.version}, ${stored.state!.history.length} messages stored, ${renderedBody<{ messages: unknown[] }>(last.result!).messages.length} in the last prompt`);
client.close();
