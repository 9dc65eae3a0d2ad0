import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { RenderOptionsSchema, type CompiledPayload } from "#gen/contextd/v1/compile_pb";
import { PartSchema, Provider, type Part } from "#gen/contextd/v1/message_pb";
import { renderRequest } from "../../src/core/providers/render.js";
import { payload, text, user } from "./build-messages.js";
import { thrownConnectError } from "../support/thrown.js";

const file = (fields: { mimeType: string; data?: Uint8Array; uri?: string; name?: string }): Part => create(PartSchema, { kind: { case: "file", value: fields } });
const asked = (...parts: Part[]): CompiledPayload => payload({ history: [user("u1", text("read this"), ...parts)] });
const render = (p: CompiledPayload, provider: Provider, dropUnsupportedMedia = false) => renderRequest(p, create(RenderOptionsSchema, { provider, model: "m", dropUnsupportedMedia }));
const body = (p: CompiledPayload, provider: Provider) => JSON.parse(new TextDecoder().decode(render(p, provider).json));

describe("files and media by provider capability", () => {
  const pdfByUrl = file({ mimeType: "application/pdf", uri: "https://example.com/report.pdf" });

  it("refuses a file by URL for OpenAI Chat, naming the message, the part and what Chat takes", () => {
    const error = thrownConnectError(() => render(asked(pdfByUrl), Provider.OPENAI_CHAT));
    expect(error.code).toBe(Code.FailedPrecondition);
    expect(error.rawMessage).toMatch(/^provider rule openai_chat\.media_type violated at message "u1": part 1 \(file, application\/pdf, url\): OpenAI Chat Completions takes files inline \(application\/pdf\); as an uploaded id \(any type\)/);
    // The other providers take a PDF by URL.
    for (const provider of [Provider.OPENAI_RESPONSES, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI]) expect(() => render(asked(pdfByUrl), provider)).not.toThrow();
  });

  it("leaves the part out with a media_dropped warning under drop_unsupported_media", () => {
    const rendered = render(asked(pdfByUrl), Provider.OPENAI_CHAT, true);
    expect(JSON.parse(new TextDecoder().decode(rendered.json)).messages).toEqual([{ role: "user", content: "read this" }]);
    expect(rendered.warnings.map((warning) => warning.code)).toEqual(["media_dropped"]);
    expect(rendered.warnings[0]!.message).toMatch(/^message "u1" part 1 \(file, application\/pdf, url\): .*; the part was not sent$/);
  });

  it("sends inline text/plain as a text part to OpenAI, and as a document to Anthropic", () => {
    const notes = file({ mimeType: "text/plain", data: new TextEncoder().encode("line one"), name: "notes.txt" });
    expect(body(asked(notes), Provider.OPENAI_CHAT).messages[0].content).toEqual([
      { type: "text", text: "read this" },
      { type: "text", text: "notes.txt:\nline one" },
    ]);
    expect(body(asked(notes), Provider.OPENAI_RESPONSES).input[0].content[1]).toEqual({ type: "input_text", text: "notes.txt:\nline one" });
    expect(body(asked(notes), Provider.ANTHROPIC_MESSAGES).messages[0].content[1]).toEqual({ type: "document", source: { type: "text", media_type: "text/plain", data: "line one" }, title: "notes.txt" });
  });

  it("always sets filename on OpenAI inline files", () => {
    const pdf = file({ mimeType: "application/pdf", data: new Uint8Array([37, 80, 68, 70]) });
    expect(body(asked(pdf), Provider.OPENAI_RESPONSES).input[0].content[1]).toEqual({ type: "input_file", file_data: "data:application/pdf;base64,JVBERg==", filename: "u1-part1.pdf" });
    expect(body(asked(pdf), Provider.OPENAI_CHAT).messages[0].content[1]).toEqual({ type: "file", file: { file_data: "data:application/pdf;base64,JVBERg==", filename: "u1-part1.pdf" } });
  });

  it("refuses types a provider does not list, and upload ids Anthropic cannot read", () => {
    const csv = file({ mimeType: "text/csv", data: new TextEncoder().encode("a,b") });
    for (const [provider, rule] of [[Provider.OPENAI_CHAT, "openai_chat"], [Provider.OPENAI_RESPONSES, "openai_responses"], [Provider.ANTHROPIC_MESSAGES, "anthropic"], [Provider.GEMINI, "gemini"]] as const) {
      expect(thrownConnectError(() => render(asked(csv), provider)).rawMessage, rule).toContain(`provider rule ${rule}.media_type violated at message "u1": part 1 (file, text/csv, inline)`);
    }
    expect(thrownConnectError(() => render(asked(file({ mimeType: "application/pdf", uri: "file-abc123" })), Provider.ANTHROPIC_MESSAGES)).rawMessage).toContain("part 1 (file, application/pdf, uploaded id)");
    expect(body(asked(file({ mimeType: "application/pdf", uri: "file-abc123" })), Provider.OPENAI_CHAT).messages[0].content[1]).toEqual({ type: "file", file: { file_id: "file-abc123" } });
  });
});
