import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, RenderOptionsSchema } from "#gen/contextd/v1/compile_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { compile } from "../../src/core/compile/compile.js";
import { renderRequest } from "../../src/core/providers/render.js";
import { testContext } from "../core/compile-context.js";
import { message, payload, text } from "./build-messages.js";

/** Five cache hints: one more breakpoint than Anthropic accepts. */
const cachedHistory = ["u1", "a1", "u2", "a2", "u3"].map((id, index) => message(id, index % 2 === 0 ? Role.USER : Role.ASSISTANT, [text(`turn ${id}`)], { cacheTtl: "" }));
const anthropic = create(RenderOptionsSchema, { provider: Provider.ANTHROPIC_MESSAGES, model: "m" });
const codes = (warnings: ReadonlyArray<{ code: string }> | undefined) => (warnings ?? []).map((warning) => warning.code);

describe("render warnings", () => {
  it("are returned on the RenderedRequest, and a render without notices has none", () => {
    expect(codes(renderRequest(payload({ history: cachedHistory }), anthropic).warnings)).toEqual(["anthropic_cache_breakpoints_dropped"]);
    expect(codes(renderRequest(payload({ history: cachedHistory.slice(0, 4) }), anthropic).warnings)).toEqual([]);
    const gemini = create(RenderOptionsSchema, { provider: Provider.GEMINI, model: "m" });
    expect(codes(renderRequest(payload({ history: cachedHistory }), gemini).warnings)).toEqual([]);
  });

  it("reach the main render, the compile's warnings and a target's render", async () => {
    const result = await compile(
      create(CompileRequestSchema, {
        history: { messages: cachedHistory },
        render: anthropic,
        targets: [{ name: "history_only", segments: [Segment.HISTORY], render: anthropic }],
      }),
      testContext(),
    );
    expect(codes(result.rendered?.warnings)).toEqual(["anthropic_cache_breakpoints_dropped"]);
    // Copied once, from the main render; a target's notices stay on its projection.
    expect(codes(result.warnings).filter((code) => code === "anthropic_cache_breakpoints_dropped")).toHaveLength(1);
    expect(codes(result.projections[0]?.rendered?.warnings)).toEqual(["anthropic_cache_breakpoints_dropped"]);
  });

  it("keep the system prompt's hint and the last three when there are too many", () => {
    const system = message("sys", Role.SYSTEM, [text("stable instructions")], { cacheTtl: "1h" });
    const rendered = renderRequest(payload({ system: [system], history: cachedHistory }), anthropic);
    const body = JSON.parse(new TextDecoder().decode(rendered.json)) as { system: { cache_control?: object }[]; messages: { content: { text: string; cache_control?: object }[] }[] };
    expect(body.system[0]!.cache_control).toEqual({ type: "ephemeral", ttl: "1h" });
    const marked = body.messages.map((turn) => turn.content.some((block) => block.cache_control !== undefined));
    expect(marked).toEqual([false, false, true, true, true]);
    expect(rendered.warnings[0]!.message).toBe(
      'Anthropic allows 4 cache breakpoints; the request has 6, so the hints of messages "u1", "a1" were not sent (the first and the last 3 were kept)',
    );
  });
});
