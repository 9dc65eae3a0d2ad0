import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, EstimatorKind, RedactionPattern, TokenizerEncoding } from "#gen/contextd/v1/compile_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { compile } from "../../src/core/compile/compile.js";
import { DeadlineCheck } from "../../src/core/compile/deadline.js";
import { maxCustomPatternText } from "../../src/core/compile/redaction.js";
import { toolGuidanceText } from "../../src/core/compile/system-prompt.js";
import { loadEncoding, loadPacedEncoding } from "../../src/core/tokens/encodings.js";
import { testContext } from "./compile-context.js";
import { user } from "./messages.js";
import { rejectsWith } from "./rejects.js";

/** A clock that moves 1 ms every time it is read. */
function movingClock(): () => number {
  let ms = 0;
  return () => ++ms;
}

/** A yield to the event loop that counts how often it is asked for (and yields for real). */
function countingYield(): { yieldToEventLoop: () => Promise<void>; turns: () => number } {
  let turns = 0;
  return { yieldToEventLoop: () => (turns++, new Promise<void>((resolve) => setImmediate(resolve))), turns: () => turns };
}

function letters(length: number, seed: number): string {
  const bytes = Buffer.alloc(length);
  let state = seed;
  for (let index = 0; index < length; index++) bytes[index] = 97 + (((state = (Math.imul(state, 1103515245) + 12345) >>> 0) >>> 8) % 26);
  return bytes.toString("latin1");
}

describe("DeadlineCheck says when the event loop is due a turn", () => {
  it("is due once a slice has passed since the last turn, and not before", async () => {
    let now = 0;
    const { yieldToEventLoop, turns } = countingYield();
    const clock = new DeadlineCheck(undefined, () => now, yieldToEventLoop, 20);
    now = 19;
    expect(clock.checkNow("stage")).toBe(false);
    now = 20;
    expect(clock.checkNow("stage")).toBe(true);
    await clock.pause("stage");
    expect(turns()).toBe(1);
    // The slice starts again at the turn.
    now = 39;
    expect(clock.checkNow("stage")).toBe(false);
    await clock.pause("stage");
    expect(turns()).toBe(1);
  });

  it("reads no clock and never yields without a deadline or a yield", () => {
    let readings = 0;
    const clock = new DeadlineCheck(undefined, () => ++readings);
    for (let index = 0; index < 1_000; index++) expect(clock.check("stage", 32)).toBe(false);
    expect(clock.checkNow("stage")).toBe(false);
    expect(readings).toBe(0);
  });

  it("checks the deadline again after a turn: a call aborted meanwhile gives up with the signal's code", async () => {
    const controller = new AbortController();
    const clock = new DeadlineCheck({ signal: controller.signal }, movingClock(), async () => controller.abort(new ConnectError("client went away", Code.Canceled)), 1);
    expect(clock.checkNow("token counting")).toBe(true);
    await rejectsWith(clock.pause("token counting"), Code.Canceled, /^token counting: the call ended \(client went away\), the compile gave up$/);
  });
});

describe("long stages give the event loop turns and compute the same result", () => {
  const tokenizer = { kind: EstimatorKind.TOKENIZER };

  it("token counting of one long text (paced chunks) counts what the unpaced counter counts", async () => {
    const text = letters(20_000, 3) + " and some prose after it ".repeat(200);
    const count = await loadEncoding(TokenizerEncoding.O200K_BASE);
    const countPaced = await loadPacedEncoding(TokenizerEncoding.O200K_BASE);
    const { yieldToEventLoop, turns } = countingYield();
    const paced = await countPaced(text, new DeadlineCheck(undefined, movingClock(), yieldToEventLoop, 5), "token counting");
    expect(paced).toBe(count(text));
    expect(turns()).toBeGreaterThan(0);
  });

  it("a TOKENIZER compile yields inside the count of one long text and reports the usage of an unpaced compile", async () => {
    const request = create(CompileRequestSchema, { history: { messages: [user("u1", letters(40_000, 5))] }, budget: { estimator: tokenizer } });
    const unpaced = await compile(request, testContext());
    const { yieldToEventLoop, turns } = countingYield();
    const paced = await compile(request, testContext({ now: movingClock(), yieldToEventLoop }));
    expect(paced.usage).toEqual(unpaced.usage);
    // 40,000 characters without a space are ~157 chunks, a clock reading after each.
    expect(turns()).toBeGreaterThan(5);
  });

  it("many short messages: the budget yields between them and counts the same", async () => {
    const messages = Array.from({ length: 2_000 }, (_, index) => user(`u${index}`, `message ${index} ${letters(40, index + 1)}`));
    const request = create(CompileRequestSchema, { history: { messages }, budget: { estimator: tokenizer } });
    const unpaced = await compile(request, testContext());
    const { yieldToEventLoop, turns } = countingYield();
    const paced = await compile(request, testContext({ now: movingClock(), yieldToEventLoop }));
    expect(paced.usage).toEqual(unpaced.usage);
    expect(turns()).toBeGreaterThan(0);
  });

  it("resolve_vars over a long text yields and gives the same text and warnings in order", async () => {
    const text = "{{v}}-{{missing}};".repeat(10_000);
    const request = create(CompileRequestSchema, { deferredBlocks: [{ segment: Segment.MEMORY, messages: [user("d1", text)] }], resolveVars: { v: "value" } });
    const { yieldToEventLoop, turns } = countingYield();
    const result = await compile(request, testContext({ now: movingClock(), yieldToEventLoop }));
    const resolved = result.payload!.memory[0]!.parts[0]!.kind;
    expect(resolved.case === "text" && resolved.value.text).toBe("value-{{missing}};".repeat(10_000));
    const unknown = result.warnings.filter((warning) => warning.code === "unknown_variable");
    expect(unknown).toHaveLength(10_000);
    expect(unknown[0]!.message).toBe('deferred_blocks[0].messages[0] (message "d1"): unknown variable {{missing}} left as written');
    expect(turns()).toBeGreaterThan(0);
  });

  it("system-prompt assembly yields between tools, checks the deadline there, and builds the unpaced block (issue 29 #10)", async () => {
    // 2,000 tools × 20 practices (6,000 × 20 held the loop 592 ms in one slice).
    const toolDefinitions = Array.from({ length: 2_000 }, (_, tool) => ({
      name: `tool_${String(tool).padStart(4, "0")}`,
      description: `Does thing ${tool}.`,
      bestPractices: Array.from({ length: 20 }, (_, practice) => `Practice ${practice} of tool ${tool}: check the input first.`),
    }));
    const request = create(CompileRequestSchema, { toolDefinitions: { toolDefinitions }, systemPrompt: { toolGuidance: true } });
    const { yieldToEventLoop, turns } = countingYield();
    const paced = await compile(request, testContext({ now: movingClock(), yieldToEventLoop }));
    expect(turns()).toBeGreaterThan(3);
    const block = paced.payload!.system[0]!.parts[0]!.kind;
    expect(block.case === "text" && block.value.text).toBe(toolGuidanceText(request.toolDefinitions!.toolDefinitions));
    // A call that ends at its first turn gives up inside the stage, naming it.
    const ended = new AbortController();
    const abortAtTurn = () => (ended.abort(new ConnectError("the caller went away", Code.Canceled)), new Promise<void>((resolve) => setImmediate(resolve)));
    await rejectsWith(
      compile(request, testContext({ now: movingClock(), yieldToEventLoop: abortAtTurn, deadline: { signal: ended.signal } })),
      Code.Canceled,
      /^system_prompt\.tool_guidance: the call ended/,
    );
  });

  it("redaction of a long text yields between patterns and redacts as before", async () => {
    const text = "write to someone@example.com or call +1 415 555 0100. ".repeat(2_000);
    const hooks = [{ kind: { case: "redaction" as const, value: { patterns: [RedactionPattern.EMAIL, RedactionPattern.PHONE] } } }];
    const request = create(CompileRequestSchema, { history: { messages: [user("u1", text)] }, hooks });
    const { yieldToEventLoop, turns } = countingYield();
    const result = await compile(request, testContext({ now: movingClock(), yieldToEventLoop }));
    const redacted = result.payload!.history[0]!.parts[0]!.kind;
    expect(redacted.case === "text" && redacted.value.text).toBe("write to [REDACTED:email] or call [REDACTED:phone]. ".repeat(2_000));
    expect(turns()).toBeGreaterThan(0);
  });
});

describe("a custom pattern scans at most maxCustomPatternText characters of one text", () => {
  const hooks = [{ kind: { case: "redaction" as const, value: { customPatterns: [{ name: "secret", regex: "s3cr3t" }] } } }];

  it("redacts a text of exactly the limit", async () => {
    const text = "s3cr3t" + "a".repeat(maxCustomPatternText - 6);
    const result = await compile(create(CompileRequestSchema, { history: { messages: [user("u1", text)] }, hooks }), testContext());
    const redacted = result.payload!.history[0]!.parts[0]!.kind;
    expect(redacted.case === "text" && redacted.value.text.startsWith("[REDACTED:secret]a")).toBe(true);
  });

  it("refuses a longer text with RESOURCE_EXHAUSTED naming the pattern, the message and the limit", async () => {
    const request = create(CompileRequestSchema, { history: { messages: [user("u1", "a".repeat(maxCustomPatternText + 1))] }, hooks });
    await rejectsWith(
      compile(request, testContext()),
      Code.ResourceExhausted,
      /^hooks\[0\]\.redaction\.custom_patterns\[0\] \("secret"\) \(message "u1"\): a custom pattern scans at most 131072 characters of one text, this text has 131073$/,
    );
  });
});
