import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, RedactionPattern, TransformationReason } from "#gen/contextd/v1/compile_pb";
import { PartSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { compile } from "../../src/core/compile/compile.js";
import { readToolResultName } from "../../src/core/compile/large-tool-results.js";
import { utf8Head, utf8Slice, utf8SliceOf } from "../../src/core/model/utf8-slice.js";
import { testContext } from "./compile-context.js";
import { call, message, user } from "./messages.js";
import { rejectsWith } from "./rejects.js";

// The plain-object form of a request init (not a CompileRequest itself), so that fields can be spread.
type Init = Extract<MessageInitShape<typeof CompileRequestSchema>, { $typeName?: undefined }>;

const resultMessage = (id: string, callId: string, payload: { text?: string; data?: string }, name = "read_file") =>
  message(Role.TOOL, id, create(PartSchema, { kind: { case: "toolResult", value: { toolCallId: callId, name, payload } } }));

const round = (index: number, payload: { text?: string; data?: string }, name = "read_file"): Message[] => [
  user(`u${index}`, `question ${index}`),
  message(Role.ASSISTANT, `a${index}`, call(`c${index}`, name)),
  resultMessage(`t${index}`, `c${index}`, payload, name),
];

const sentText = (item: Message) => (item.parts[0]!.kind.case === "toolResult" ? item.parts[0]!.kind.value.payload!.text : "");
const run = (history: Message[], options: Init["largeToolResults"], extra: Partial<Init> = {}) =>
  compile(create(CompileRequestSchema, { history: { messages: history }, largeToolResults: options, ...extra }), testContext());

describe("large tool results by reference", () => {
  it("sends a result over min_bytes as its preview: the tool, the size, the handle and the head", async () => {
    const big = "line of the file\n".repeat(2_000);
    const history = [...round(0, { text: big }), ...round(1, { text: "short result" })];
    const compiled = await run(history, {});
    const sent = compiled.payload!.history;
    const preview = sentText(sent[2]!);
    expect(preview.split("\n")[0]).toBe(`[read_file result of ${big.length} bytes, the first 1024 shown; read more with ${readToolResultName}(tool_call_id "c0", offset 1024)]`);
    expect(preview.slice(preview.indexOf("\n") + 1)).toBe(big.slice(0, 1_024));
    expect(sentText(sent[5]!)).toBe("short result");
    expect(compiled.transformations["t0"]!.reason).toBe(TransformationReason.TOOL_RESULT_REFERENCED);
    expect(compiled.transformations["t1"]!.reason).toBe(TransformationReason.UNCHANGED);
    // What is stored keeps the whole result.
    expect(sentText(compiled.persistence!.history[2]!)).toBe(big);
  });

  it("sends the same bytes for the same message in every compile, whatever follows it", async () => {
    const history = round(0, { text: "é".repeat(20_000) });
    const first = await run(history, { minBytes: 1_000, previewBytes: 301 });
    const later = await run([...history, ...round(1, { text: "x".repeat(50_000) }), user("u2", "more")], { minBytes: 1_000, previewBytes: 301 });
    expect(later.payload!.history[2]).toEqual(first.payload!.history[2]);
    // 301 bytes end inside a two-byte character: the head stops before it.
    expect(sentText(first.payload!.history[2]!)).toContain("the first 300 shown");
  });

  it("previews JSON payloads by their text, leaves excluded tools whole, and adds the read tool once", async () => {
    const data = JSON.stringify({ rows: Array.from({ length: 2_000 }, (_, index) => ({ index })) });
    const history = [...round(0, { data }), ...round(1, { text: "y".repeat(40_000) }, "plan")];
    const compiled = await run(history, { excludeTools: ["plan"], addReadTool: true }, { toolDefinitions: { toolDefinitions: [{ name: "read_file", parameters: "{}" }] } });
    expect(sentText(compiled.payload!.history[2]!)).toMatch(/^\[read_file result of \d+ bytes, the first 1024 shown/);
    expect(sentText(compiled.payload!.history[5]!)).toBe("y".repeat(40_000));
    expect(compiled.payload!.toolDefinitions.map((definition) => definition.name)).toEqual(["read_file", readToolResultName]);
    const again = await run(history, { addReadTool: true }, { toolDefinitions: { toolDefinitions: [{ name: readToolResultName, description: "mine" }] } });
    expect(again.payload!.toolDefinitions.map((definition) => definition.description)).toEqual(["mine"]);
  });

  it("runs before hooks, so redaction sees the preview, and renders for every provider", async () => {
    const secret = "mail me at someone@example.com " + "z".repeat(30_000);
    for (const provider of [Provider.OPENAI_CHAT, Provider.OPENAI_RESPONSES, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI]) {
      const compiled = await run(round(0, { text: secret }), {}, { hooks: [{ kind: { case: "redaction", value: { patterns: [RedactionPattern.EMAIL] } } }], render: { provider, model: "m" } });
      const body = new TextDecoder().decode(compiled.rendered!.json);
      expect(body).toContain("[REDACTED:email]");
      expect(body).toContain(readToolResultName);
      expect(body).not.toContain("z".repeat(2_000));
    }
  });

  it("refuses a preview longer than min_bytes and too many excluded tools", async () => {
    await rejectsWith(run(round(0, { text: "x" }), { minBytes: 100, previewBytes: 101 }), Code.InvalidArgument, /large_tool_results\.preview_bytes \(101\) must not be over min_bytes \(100\)/);
    await rejectsWith(run(round(0, { text: "x" }), { excludeTools: Array.from({ length: 257 }, (_, index) => `t${index}`) }), Code.InvalidArgument, /exclude_tools lists 257 names, at most 256/);
  });
});

describe("utf8Slice", () => {
  it("puts a text with characters of every width back together from slices of any size, always moving forward", () => {
    const text = "aé€😀b".repeat(50);
    for (const size of [1, 2, 3, 4, 5, 7, 64]) {
      let offset = 0;
      let joined = "";
      for (;;) {
        const slice = utf8Slice(text, offset, size);
        expect(slice.end).toBeGreaterThan(slice.start);
        // Never more than asked, but for the one whole character that does not fit.
        if (slice.end - slice.start > size) expect([...slice.text]).toHaveLength(1);
        joined += slice.text;
        if (slice.end === slice.totalBytes) break;
        offset = slice.end;
      }
      expect(joined).toBe(text);
    }
    // Smaller than the character at the offset: that character, whole (issue 29 #13: an empty
    // slice ending at its start left a reader paging by next_offset in place).
    expect(utf8Slice("😀", 0, 3)).toMatchObject({ start: 0, end: 4, text: "😀" });
    expect(utf8Slice("aé", 1, 1)).toMatchObject({ start: 1, end: 3, text: "é" });
    expect(utf8Slice("é", 1, 10)).toMatchObject({ start: 0, text: "é" });
    expect(utf8Slice("abc", 99, 10)).toMatchObject({ start: 3, end: 3, text: "" });
    expect(utf8Slice("abc", 1, 0)).toMatchObject({ start: 1, end: 1, text: "" });
    // Encoded once, sliced the same.
    const bytes = Buffer.from(text, "utf8");
    for (const [start, size] of [[0, 1], [2, 1], [4, 2], [6, 100], [1_000, 5]] as const) expect(utf8SliceOf(bytes, start, size)).toEqual(utf8Slice(text, start, size));
  });

  it("utf8Head equals the slice from the start, without encoding the whole text, and is never over max_bytes", () => {
    const texts = ["😀".repeat(400), "a😀".repeat(300), "é€".repeat(500), "x".repeat(1_000), "short"];
    for (const text of texts) {
      for (const maxBytes of [1, 3, 4, 300, 301, 1_024]) {
        const slice = utf8Slice(text, 0, maxBytes);
        if (slice.end > maxBytes) {
          expect(utf8Head(text, maxBytes)).toEqual({ text: "", bytes: 0, totalBytes: slice.totalBytes });
          continue;
        }
        expect(utf8Head(text, maxBytes)).toEqual({ text: slice.text, bytes: slice.end, totalBytes: slice.totalBytes });
      }
    }
  });
});
