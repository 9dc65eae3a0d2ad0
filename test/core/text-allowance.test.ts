import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, RedactionPattern, type SegmentFormatter } from "#gen/contextd/v1/compile_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { compile } from "../../src/core/compile/compile.js";
import { compileTextFactor, compileTextFloor, TextAllowance } from "../../src/core/compile/text-allowance.js";
import { messageText } from "../../src/core/model/message-text.js";
import { testContext } from "./compile-context.js";
import { system, user } from "./messages.js";
import { rejectsWith } from "./rejects.js";

type Init = Parameters<typeof create<typeof CompileRequestSchema>>[1];
const request = (init: Init) => create(CompileRequestSchema, init);
const template = (text: string): SegmentFormatter =>
  create(CompileRequestSchema, { formatters: [{ segment: Segment.SYSTEM, kind: { case: "template", value: { template: text } } }] }).formatters[0]!;

describe("the text a compile may produce", () => {
  it("refuses 28 doubling templates over a 1 KB message before building the text, naming formatter, message and limit", async () => {
    const formatters = Array.from({ length: 28 }, () => template("{{content}}{{content}}"));
    const message = await rejectsWith(
      compile(request({ system: { messages: [system("s1", "x".repeat(1_000))] }, formatters }), testContext()),
      Code.ResourceExhausted,
      /^formatters\[\d+\] \(message "s1"\): the compile's text would grow to \d+ characters, over its limit of \d+ /,
    );
    // Limit = floor + factor × 1,000 characters. Everything produced counts: after formatter k the
    // compile has made 1,000 × (2 + 4 + ... + 2^(k+1)) characters, 2,046,000 at k = 9.
    const limit = compileTextFloor + compileTextFactor * 1_000;
    expect(message).toContain(`over its limit of ${limit} (${compileTextFloor} + ${compileTextFactor} × the 1000 characters of text in the request`);
    expect(message).toMatch(/^formatters\[9\] \(message "s1"\): the compile's text would grow to 2046000 characters/);
    expect(message).toContain("--max-compile-text-bytes");
  });

  it("lets a compile produce what ordinary formatters make of its text", async () => {
    const result = await compile(
      request({
        system: { messages: [system("s1", "be brief")] },
        formatters: [
          { segment: Segment.SYSTEM, kind: { case: "xmlTag", value: { tag: "rules" } } },
          { segment: Segment.SYSTEM, kind: { case: "template", value: { template: "{{content}}\n---\n{{content}}" } } },
        ],
      }),
      testContext(),
    );
    expect(messageText(result.payload!.system[0]!)).toBe("<rules>be brief</rules>\n---\n<rules>be brief</rules>");
  });

  // Refused as soon as the length so far passes the limit (checked every 1,024 placeholders).
  it("refuses resolve_vars that would repeat a value a million times, before substituting", async () => {
    const block = { segment: Segment.MEMORY, messages: [user("d1", "{{v}}".repeat(1_000_000))] };
    await rejectsWith(
      compile(request({ deferredBlocks: [block], resolveVars: { v: "y".repeat(400) } }), testContext()),
      Code.ResourceExhausted,
      /^deferred_blocks\[0\]\.messages\[0\] \(message "d1"\): resolve_vars: the compile's text would grow to 414\d{5} characters, over its limit of 41048576 /,
    );
  });

  it("refuses a join whose separator repeats past the limit", async () => {
    const messages = Array.from({ length: 200 }, (_, index) => user(`u${index}`, "hi"));
    await rejectsWith(
      compile(request({ history: { messages }, formatters: [{ segment: Segment.HISTORY, kind: { case: "join", value: { separator: "-".repeat(20_000) } } }] }), testContext()),
      Code.ResourceExhausted,
      /^formatters\[0\]\.join \(segment history\): the compile's text would grow to 3980400 characters/,
    );
  });

  it("refuses a redaction replacement that grows every match past the limit", async () => {
    const hooks = [{ kind: { case: "redaction" as const, value: { customPatterns: [{ name: "a", regex: "a" }], replacement: "r".repeat(10_000) } } }];
    await rejectsWith(
      compile(request({ history: { messages: [user("u1", "a".repeat(1_000))] }, hooks }), testContext()),
      Code.ResourceExhausted,
      /^hooks \(redaction a\): the compile's text would grow to/,
    );
  });

  it("counts warnings as produced text: a million unknown variables do not make a million warnings", async () => {
    const block = { segment: Segment.MEMORY, messages: [user("d1", "{{nope}}".repeat(200_000))] };
    await rejectsWith(compile(request({ deferredBlocks: [block] }), testContext()), Code.ResourceExhausted, /^warnings \(unknown_variable\): /);
  });

  it("takes its absolute limit from the context (--max-compile-text-bytes)", async () => {
    const formatters = [{ segment: Segment.SYSTEM, kind: { case: "prefix" as const, value: { text: "p".repeat(600) } } }];
    await rejectsWith(
      compile(request({ system: { messages: [system("s1", "x")] }, formatters }), testContext({ maxCompileTextBytes: 500 })),
      Code.ResourceExhausted,
      /over its limit of 500 \(.*at most 500: --max-compile-text-bytes\)/,
    );
    expect(new TextAllowance(10, 500).limit).toBe(500);
    expect(new TextAllowance(10).limit).toBe(compileTextFloor + compileTextFactor * 10);
  });

  it("charges text replacements and leaves the built-in redactions' default token alone", async () => {
    const result = await compile(
      request({
        history: { messages: [user("u1", "write to a@example.com")] },
        hooks: [{ kind: { case: "redaction", value: { patterns: [RedactionPattern.EMAIL] } } }],
        textReplacements: [{ segment: Segment.HISTORY, messageId: "u1", text: "short" }],
      }),
      testContext(),
    );
    expect(messageText(result.payload!.history[0]!)).toBe("short");
    await rejectsWith(
      compile(
        request({ history: { messages: [user("u1", "x")] }, textReplacements: [{ segment: Segment.HISTORY, messageId: "u1", text: "t".repeat(600) }] }),
        testContext({ maxCompileTextBytes: 500 }),
      ),
      Code.ResourceExhausted,
      /^text_replacements\[0\] \(message "u1"\): the compile's text would grow to 600 characters/,
    );
  });
});
