import { create } from "@bufbuild/protobuf";
import type { CompiledPayload } from "#gen/contextd/v1/compile_pb";
import { ImageDetail, MessageSchema, PartSchema, Provider, Role } from "#gen/contextd/v1/message_pb";
import {
  assistant,
  call,
  definition,
  developer,
  image,
  message,
  payload,
  reasoning,
  result,
  system,
  text,
  tool,
  user,
} from "./build-messages.js";

/** The conversations behind test/golden/providers/*.json (see its README). */
export interface GoldenCase {
  name: string;
  description: string;
  payload: CompiledPayload;
  model: string;
  /**
   * Through the Compile RPC, send the history message with this id (the last) as the current turn
   * instead: the only way a compile puts a message after an open round of history.
   */
  currentTurnId?: string;
}

const weather = definition("get_weather", "Current weather for a city", {
  type: "object",
  properties: { city: { type: "string" } },
  required: ["city"],
});
const pixel = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

export const goldenCases: GoldenCase[] = [
  {
    name: "plain_chat",
    description: "A system prompt and a short exchange ending in the user's turn.",
    model: "test-model",
    payload: payload({
      system: [system("sys", "You are a concise assistant.")],
      history: [user("u1", "Hi!"), assistant("a1", "Hello. How can I help?"), user("u2", "What is 2+2?")],
    }),
  },
  {
    name: "system_and_developer",
    description: "SYSTEM and DEVELOPER messages in the system segment, a sender name on the user turn.",
    model: "test-model",
    payload: payload({
      system: [system("sys", "You are a support agent for Acme."), developer("dev", "Answer in French.")],
      history: [message("u1", Role.USER, [text("Where is my order?")], { senderName: "alice" })],
    }),
  },
  {
    name: "parallel_calls",
    description: "Two parallel calls answered by two TOOL messages, then the final answer; tool definitions.",
    model: "test-model",
    payload: payload({
      system: [system("sys", "Use tools when needed.")],
      history: [
        user("u1", "Weather in Paris and Oslo?"),
        assistant("a1", "Checking both.", call("call_paris", "get_weather", '{"city":"Paris"}'), call("call_oslo", "get_weather", '{"city": "Oslo"}')),
        tool("t1", result("call_paris", "get_weather", { data: '{"temp_c":18,"sky":"clear"}' })),
        tool("t2", result("call_oslo", "get_weather", { text: "4C, rain" })),
        assistant("a2", "Paris: 18C and clear. Oslo: 4C with rain."),
      ],
      toolDefinitions: [weather],
    }),
  },
  {
    name: "tool_error",
    description: "A failed tool call (is_error with a structured error), then the user's next turn.",
    model: "test-model",
    payload: payload({
      history: [
        user("u1", "Weather in Atlantis?"),
        assistant("a1", call("call_1", "get_weather", '{"city":"Atlantis"}')),
        tool("t1", result("call_1", "get_weather", { error: { code: "not_found", message: "unknown city: Atlantis" } }, { isError: true })),
        assistant("a2", "I could not find Atlantis."),
        user("u2", "Try Athens."),
      ],
      toolDefinitions: [weather],
    }),
  },
  {
    name: "images_in_user_and_tool_results",
    description: "A user image by URL (high detail) and inline bytes, and a tool that returns an image.",
    model: "test-model",
    payload: payload({
      history: [
        user("u1", "What is in these?", image({ url: "https://example.com/cat.jpg", detail: ImageDetail.HIGH }), image({ data: pixel, mimeType: "image/png" })),
        assistant("a1", call("call_shot", "screenshot", '{"url":"https://example.com"}')),
        tool("t1", result("call_shot", "screenshot", { text: "Screenshot taken." }, { contentParts: [image({ data: pixel, mimeType: "image/png" })] })),
      ],
      toolDefinitions: [definition("screenshot", "Screenshot of a web page", { type: "object", properties: { url: { type: "string" } } })],
    }),
  },
  {
    name: "thinking_with_signature",
    description:
      "Reasoning from three providers in one assistant turn: each provider receives only its own (Anthropic thinking + redacted_thinking, Responses reasoning item and the function_call item id, Gemini thought, text and call signatures); OpenAI Chat receives none.",
    model: "test-model",
    payload: payload({
      history: [
        user("u1", "Plan a trip."),
        assistant(
          "a1",
          reasoning(Provider.ANTHROPIC_MESSAGES, { text: "The user wants a plan.", signature: "EqQBCkYIARgCIkD+anthropic/sig==" }),
          reasoning(Provider.ANTHROPIC_MESSAGES, { redactedData: "EmwKAhgBEgy+redacted==" }),
          reasoning(Provider.OPENAI_RESPONSES, { itemId: "rs_0123abcd", text: "Considering options.", redactedData: "gAAAAABo+encrypted==" }),
          reasoning(Provider.GEMINI, { text: "Thinking about destinations.", signature: "CiQB+gemini/thought==" }),
          text("Checking the weather first.", "CiQB+gemini/text=="),
          call("call_1", "get_weather", '{"city":"Lisbon"}', { signature: "CiQB+gemini/call==", itemId: "fc_0123abcd" }),
        ),
        tool("t1", result("call_1", "get_weather", { text: "22C, sunny" })),
      ],
      toolDefinitions: [weather],
    }),
  },
  {
    name: "cache_hints",
    description:
      "Five cache hints (system 1h, then 5m and default ones in history): Anthropic keeps the first (the system prompt's) and the last 3 breakpoints and warns; other providers ignore hints.",
    model: "test-model",
    payload: payload({
      system: [message("sys", Role.SYSTEM, [text("Long, stable instructions.")], { cacheTtl: "1h" })],
      history: [
        message("u1", Role.USER, [text("First question.")], { cacheTtl: "1h" }),
        message("a1", Role.ASSISTANT, [text("First answer.")], { cacheTtl: "5m" }),
        message("u2", Role.USER, [text("Second question.")], { cacheTtl: "" }),
        message("a2", Role.ASSISTANT, [text("Second answer.")]),
        message("u3", Role.USER, [text("Third question.")], { cacheTtl: "5m" }),
      ],
    }),
  },
  {
    name: "summary_at_head",
    description: "History starts with a SYSTEM summary of earlier turns (provenance summary), followed by the recent turns.",
    model: "test-model",
    payload: payload({
      system: [system("sys", "You are a helpful assistant.")],
      history: [
        create(MessageSchema, {
          id: "summary:1",
          role: Role.SYSTEM,
          parts: [text("Summary of earlier conversation: the user is planning a move to Oslo in May.")],
          provenance: { kind: { case: "summary", value: { coveredMessageIds: ["u1", "a1", "u2", "a2"] } } },
        }),
        user("u3", "What should I pack?"),
        assistant("a3", "Layers and a rain jacket."),
        user("u4", "And shoes?"),
      ],
    }),
  },
  {
    name: "prompt_safe_current_turn",
    description:
      "The current turn in its prompt-safe form at the end of history, then memory (a retrieved document) and scratch notes, which render after it.",
    model: "test-model",
    payload: payload({
      system: [system("sys", "You help with billing.")],
      history: [
        user("u1", "Hello"),
        assistant("a1", "Hi, how can I help?"),
        user("event:current", "Please charge my card [REDACTED:card_number] for the renewal."),
      ],
      memory: [message("artifact:doc1", Role.USER, [text("<document>Renewal price: 120 EUR.</document>")])],
      scratch: [system("scratch:time", "Current time: 2025-05-01T10:00:00Z")],
    }),
  },
  {
    name: "open_round_at_tail",
    description:
      "An open tool round at the tail (one of two results still missing): allowed as the last assistant turn; memory and scratch are placed before the round so it stays last.",
    model: "test-model",
    payload: payload({
      history: [
        user("u1", "Weather in Paris and Oslo?"),
        assistant("a1", call("call_paris", "get_weather", '{"city":"Paris"}'), call("call_oslo", "get_weather", '{"city":"Oslo"}')),
        tool("t1", result("call_paris", "get_weather", { text: "18C" })),
      ],
      scratch: [system("scratch:cwd", "cwd=/home/agent")],
      toolDefinitions: [weather],
    }),
  },
  {
    name: "open_round_before_user_turn",
    description:
      "An assistant call without a result followed by the user's next turn: every provider refuses it with <provider>.open_call_position naming the assistant message (expected_errors).",
    model: "test-model",
    currentTurnId: "u2",
    payload: payload({
      history: [user("u1", "Weather in Oslo?"), assistant("a1", call("oc1", "get_weather", '{"city":"Oslo"}')), user("u2", "Never mind, what time is it?")],
      toolDefinitions: [weather],
    }),
  },
  {
    name: "tool_media_then_next_turn",
    description:
      "A tool returns two inline images and text; the answer and the user's next turn follow. Gemini gets the images inside the functionResponse (parts[].inlineData), so contents alternate user, model, user, model, user.",
    model: "test-model",
    payload: payload({
      history: [
        user("u1", "Show me the two charts."),
        assistant("a1", call("call_charts", "render_charts", '{"ids":[1,2]}')),
        tool(
          "t1",
          result("call_charts", "render_charts", { text: "Rendered 2 charts." }, {
            contentParts: [image({ data: pixel, mimeType: "image/png" }), image({ url: "data:image/jpeg;base64,/9j/4AAQ" })],
          }),
        ),
        assistant("a2", "Chart 1 rises, chart 2 falls."),
        user("u2", "Why does chart 2 fall?"),
      ],
      toolDefinitions: [definition("render_charts", "Render charts as images", { type: "object", properties: { ids: { type: "array", items: { type: "integer" } } } })],
    }),
  },
  {
    name: "foreign_call_ids_and_names",
    description:
      "Call ids other frameworks write (call/1@373, functions.get_weather:0, a 50-character id) and a sender name with a space and an accent: each provider gets them in its alphabet and length (docs/provider-bodies.md), the results carry their call's form.",
    model: "test-model",
    payload: payload({
      history: [
        message("u1", Role.USER, [text("Weather in Oslo and Rome?")], { senderName: "Ana María" }),
        assistant("a1", call("call/1@373", "get_weather", '{"city":"Oslo"}'), call("functions.get_weather:0", "get_weather", '{"city":"Rome"}')),
        tool("t1", result("call/1@373", "get_weather", { text: "4C" }), result("functions.get_weather:0", "get_weather", { text: "19C" })),
        assistant("a2", call("chatcmpl-tool-0123456789abcdef0123456789abcdef0123", "get_weather", '{"city":"Paris"}')),
        tool("t2", result("chatcmpl-tool-0123456789abcdef0123456789abcdef0123", "get_weather", { text: "11C" })),
        assistant("a3", "Oslo 4C, Rome 19C, Paris 11C."),
      ],
      toolDefinitions: [weather],
    }),
  },
  {
    name: "responses_reasoning_pairs",
    description:
      "Responses reasoning with and without its items: a call whose reasoning was cleared goes without its fc_ id, a reasoning item and its call go together, a lone reasoning item before the next user turn is left out. Other providers never see Responses reasoning.",
    model: "test-model",
    payload: payload({
      history: [
        user("u1", "Look up Oslo."),
        assistant("a1", call("call_a", "get_weather", '{"city":"Oslo"}', { itemId: "fc_a" })),
        tool("t1", result("call_a", "get_weather", { text: "4C" })),
        assistant("a2", reasoning(Provider.OPENAI_RESPONSES, { itemId: "rs_b", redactedData: "ZW5jLWI=" }), call("call_b", "get_weather", '{"city":"Rome"}', { itemId: "fc_b" })),
        tool("t2", result("call_b", "get_weather", { text: "19C" })),
        assistant("a3", reasoning(Provider.OPENAI_RESPONSES, { itemId: "rs_c", redactedData: "ZW5jLWM=" })),
        user("u4", "And Paris?"),
      ],
      toolDefinitions: [weather],
    }),
  },
  {
    name: "summary_and_files",
    description:
      "An assistant-role summary heads history (Anthropic and Gemini get it as user context, so the body starts on the user's turn), then a user turn with an inline text file (a text part for OpenAI, a document for Anthropic, inline data for Gemini) and an inline PDF without a name (OpenAI gets a generated filename).",
    model: "test-model",
    payload: payload({
      history: [
        create(MessageSchema, { id: "summary1", role: Role.ASSISTANT, parts: [text("Summary: the user compares two offers.")], provenance: { kind: { case: "summary", value: { coveredMessageIds: ["u0", "a0"] } } } }),
        user("u1", text("Which offer is cheaper?"), file("text/plain", new TextEncoder().encode("Offer A: 10 EUR"), "offer-a.txt"), file("application/pdf", new Uint8Array([0x25, 0x50, 0x44, 0x46]))),
      ],
    }),
  },
  {
    name: "file_by_url",
    description:
      "A PDF by URL: OpenAI Chat takes files only inline or as an uploaded id and refuses it (openai_chat.media_type, expected_errors); Responses, Anthropic and Gemini take the URL.",
    model: "test-model",
    payload: payload({
      history: [user("u1", text("Summarize this report."), fileByUrl("application/pdf", "https://example.com/report.pdf"))],
    }),
  },
  {
    name: "anthropic_compaction",
    description:
      "An Anthropic compaction block (beta compact_20260112) at the head of the answer that compacted the conversation: Anthropic gets the body from that block on (the turns before it are what it summarizes), the block byte for byte, tool_changes included. No contextd summary covers those turns, so the other providers refuse (<provider>.provider_compaction at the compaction's message).",
    model: "test-model",
    payload: payload({
      system: [system("sys", "You are a coding agent.")],
      history: [
        user("u1", "Fix the failing test in src/app.ts."),
        assistant("a1", "Looking at src/app.ts."),
        user("u2", "Go on."),
        assistant("a2", anthropicCompaction({ summary: "The user asked to fix the failing test in src/app.ts; the agent is reading it.", encryptedContent: "EuYBCkYIBRgCKkD+compact/enc==", signature: "EqQBCkYIARgCIkD+compact/sig==", toolChangesJson: '[{"type":"tool_removal","tool":{"type":"tool_reference","name":"get_weather"}}]' }), text("Next I will run the tests.")),
        user("u3", "Run them."),
      ],
    }),
  },
  {
    name: "anthropic_compaction_after_summary",
    description:
      "A contextd summary covers every turn before an Anthropic compaction block: Anthropic gets the body from the block on (the summary is behind it too); the other providers get the summary, the rest of the compaction's message without the block, and what follows.",
    model: "test-model",
    payload: payload({
      history: [
        create(MessageSchema, { id: "summary1", role: Role.USER, parts: [text("Summary: the user wants the failing test in src/app.ts fixed.")], provenance: { kind: { case: "summary", value: { coveredMessageIds: ["u1", "a1", "u2"] } } } }),
        assistant("a2", anthropicCompaction({ summary: "The user wants the failing test in src/app.ts fixed.", encryptedContent: "EuYBCkYIBRgCKkD+compact/enc==", signature: "EqQBCkYIARgCIkD+compact/sig==" }), text("I will run the tests.")),
        user("u3", "Run them."),
      ],
    }),
  },
  {
    name: "openai_responses_compaction",
    description:
      "An OpenAI Responses compaction item (context_management compact_threshold) after the turns it compacted: Responses gets the input from the item on, id and encrypted_content byte for byte; the earlier compaction item is behind it too. No contextd summary covers those turns, so the other providers refuse (<provider>.provider_compaction).",
    model: "test-model",
    payload: payload({
      history: [
        user("u1", "Summarize the logs in /var/log/app.log."),
        assistant("a1", responsesCompaction("cmp_0001", "gAAAAABo+compact-early==")),
        user("u2", "And the errors?"),
        assistant("a2", responsesCompaction("cmp_0002", "gAAAAABo+compact-latest=="), text("The log shows two timeouts.")),
        user("u3", "Which service?"),
      ],
    }),
  },
];

function anthropicCompaction(fields: { summary?: string; encryptedContent?: string; signature?: string; toolChangesJson?: string }) {
  return create(PartSchema, { kind: { case: "providerCompaction", value: { provider: Provider.ANTHROPIC_MESSAGES, ...fields } } });
}

function responsesCompaction(itemId: string, encryptedContent: string) {
  return create(PartSchema, { kind: { case: "providerCompaction", value: { provider: Provider.OPENAI_RESPONSES, itemId, encryptedContent } } });
}

function file(mimeType: string, data: Uint8Array, name = "") {
  return create(PartSchema, { kind: { case: "file", value: { mimeType, data, name } } });
}

function fileByUrl(mimeType: string, uri: string) {
  return create(PartSchema, { kind: { case: "file", value: { mimeType, uri } } });
}
