import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { RenderOptionsSchema } from "#gen/contextd/v1/compile_pb";
import { PartSchema, Provider } from "#gen/contextd/v1/message_pb";
import { renderRequest } from "../../src/core/providers/render.js";
import { assistant, call, image, payload, result, text, tool, user } from "./build-messages.js";

const gemini = create(RenderOptionsSchema, { provider: Provider.GEMINI, model: "gemini-2.5-pro" });
const file = (mimeType: string, data: number[]) => create(PartSchema, { kind: { case: "file", value: { mimeType, data: new Uint8Array(data) } } });

describe("Gemini media returned by a tool", () => {
  it("go inside the functionResponse when Gemini takes their type there; the rest follows in a user content", () => {
    const p = payload({
      history: [
        user("u1", "Fetch the report."),
        assistant("a1", call("c1", "fetch")),
        tool(
          "t1",
          result("c1", "fetch", { text: "done" }, {
            contentParts: [file("application/pdf", [37, 80, 68, 70]), image({ data: new Uint8Array([1]), mimeType: "image/heic" }), image({ url: "https://example.com/chart.png" }), text("see attached")],
          }),
        ),
      ],
    });
    const body = JSON.parse(new TextDecoder().decode(renderRequest(p, gemini).json)) as { contents: { role: string; parts: Record<string, unknown>[] }[] };
    expect(body.contents[2]).toEqual({
      role: "user",
      parts: [{ functionResponse: { id: "c1", name: "fetch", response: { output: "done" }, parts: [{ inlineData: { mimeType: "application/pdf", data: "JVBERg==" } }] } }],
    });
    // GIF is not a function-response type, URLs are not inline, text is not media.
    expect(body.contents[3]).toEqual({
      role: "user",
      parts: [{ inlineData: { mimeType: "image/heic", data: "AQ==" } }, { fileData: { fileUri: "https://example.com/chart.png" } }, { text: "see attached" }],
    });
  });
});
