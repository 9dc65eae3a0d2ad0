// What append_provider_stream costs over append_provider_response for the same answer: a text of
// N deltas (≈ N tokens streamed) plus one tool call whose arguments arrive in N/10 fragments, for
// each provider, at N = 900, 9,000 and 90,000 (with the call, 99,000 events: just under the limit). The anchor is appending the
// equivalent non-streaming body in the same run; the ratio and the time per event show whether
// merging stays linear. Run with `npm run bench:stream-merge`.
import { loadavg } from "node:os";
import { create } from "@bufbuild/protobuf";
import { Provider } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, type Delta } from "#gen/contextd/v1/state_pb";
import { applyDeltas } from "../src/core/deltas/apply-deltas.js";
import { emptyConversationState } from "../src/store/commit-plan.js";

const encode = (value: unknown) => new TextEncoder().encode(typeof value === "string" ? value : JSON.stringify(value));

interface Recording {
  events: unknown[];
  body: unknown;
}

function pieces(count: number): string[] {
  return Array.from({ length: count }, (_, index) => `w${index} `);
}

function argumentPieces(count: number): string[] {
  const values = Array.from({ length: count }, (_, index) => `"k${index}":${index}`);
  return ["{", ...values.map((value, index) => (index === 0 ? value : `,${value}`)), "}"];
}

function recording(provider: Provider, count: number): Recording {
  const text = pieces(count);
  const args = argumentPieces(Math.max(1, Math.floor(count / 10)));
  const fullText = text.join("");
  const fullArgs = args.join("");
  switch (provider) {
    case Provider.OPENAI_CHAT: {
      const chunk = (delta: unknown, finish: string | null = null) => ({ object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] });
      return {
        events: [
          chunk({ role: "assistant", content: "" }),
          ...text.map((piece) => chunk({ content: piece })),
          chunk({ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "f", arguments: "" } }] }),
          ...args.map((piece) => chunk({ tool_calls: [{ index: 0, function: { arguments: piece } }] })),
          chunk({}, "tool_calls"),
          "[DONE]",
        ],
        body: { choices: [{ message: { role: "assistant", content: fullText, tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: fullArgs } }] } }] },
      };
    }
    case Provider.OPENAI_RESPONSES:
      return {
        events: [
          { type: "response.output_item.added", output_index: 0, item: { id: "msg_1", type: "message", role: "assistant", content: [] } },
          ...text.map((delta) => ({ type: "response.output_text.delta", output_index: 0, content_index: 0, delta })),
          { type: "response.output_item.added", output_index: 1, item: { id: "fc_1", type: "function_call", call_id: "call_1", name: "f", arguments: "" } },
          ...args.map((delta) => ({ type: "response.function_call_arguments.delta", output_index: 1, delta })),
          { type: "response.completed", response: {} },
        ],
        body: {
          object: "response",
          output: [
            { id: "msg_1", type: "message", role: "assistant", content: [{ type: "output_text", text: fullText }] },
            { id: "fc_1", type: "function_call", call_id: "call_1", name: "f", arguments: fullArgs },
          ],
        },
      };
    case Provider.ANTHROPIC_MESSAGES:
      return {
        events: [
          { type: "message_start", message: { id: "m", type: "message", role: "assistant", content: [] } },
          { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
          ...text.map((piece) => ({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: piece } })),
          { type: "content_block_stop", index: 0 },
          { type: "content_block_start", index: 1, content_block: { type: "tool_use", id: "toolu_1", name: "f", input: {} } },
          ...args.map((piece) => ({ type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: piece } })),
          { type: "content_block_stop", index: 1 },
          { type: "message_stop" },
        ],
        body: { type: "message", role: "assistant", content: [{ type: "text", text: fullText }, { type: "tool_use", id: "toolu_1", name: "f", input: JSON.parse(fullArgs) }] },
      };
    default: {
      const chunk = (parts: unknown[], finishReason?: string) => ({ candidates: [{ content: { role: "model", parts }, ...(finishReason ? { finishReason } : {}) }] });
      return {
        events: [...text.map((piece) => chunk([{ text: piece }])), chunk([{ functionCall: { id: "call_1", name: "f", args: JSON.parse(fullArgs) } }], "STOP")],
        body: chunk([{ text: fullText }, { functionCall: { id: "call_1", name: "f", args: JSON.parse(fullArgs) } }]),
      };
    }
  }
}

function timeAppend(delta: Delta): number {
  let counter = 0;
  const started = process.hrtime.bigint();
  applyDeltas(emptyConversationState("bench"), [delta], { newMessageId: () => `m${++counter}` });
  return Number(process.hrtime.bigint() - started) / 1e6;
}

function best(delta: Delta, runs: number): number {
  let fastest = Infinity;
  for (let run = 0; run < runs; run++) fastest = Math.min(fastest, timeAppend(delta));
  return fastest;
}

const pad = (value: string | number, width: number) => String(value).padStart(width);
console.log(`node ${process.version}, load average ${loadavg().map((value) => value.toFixed(2)).join(" ")}`);
console.log(`${"provider".padEnd(20)}${pad("events", 9)}${pad("stream MB", 11)}${pad("body ms", 10)}${pad("stream ms", 11)}${pad("ratio", 8)}${pad("µs/event", 10)}`);
for (const provider of [Provider.OPENAI_CHAT, Provider.OPENAI_RESPONSES, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI]) {
  for (const count of [900, 9_000, 90_000]) {
    const { events, body } = recording(provider, count);
    const encoded = events.map(encode);
    const bytes = encoded.reduce((total, event) => total + event.length, 0);
    const stream = create(DeltaSchema, { operation: { case: "appendProviderStream", value: { provider, events: encoded } } });
    const whole = create(DeltaSchema, { operation: { case: "appendProviderResponse", value: { provider, json: encode(body) } } });
    const runs = count >= 90_000 ? 3 : 7;
    const bodyMs = best(whole, runs);
    const streamMs = best(stream, runs);
    console.log(
      `${Provider[provider]!.padEnd(20)}${pad(encoded.length, 9)}${pad((bytes / 1e6).toFixed(2), 11)}${pad(bodyMs.toFixed(2), 10)}${pad(streamMs.toFixed(1), 11)}${pad((streamMs / bodyMs).toFixed(0) + "x", 8)}${pad(((streamMs * 1000) / encoded.length).toFixed(2), 10)}`,
    );
  }
}
