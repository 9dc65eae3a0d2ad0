import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, EstimatorKind, EstimatorSchema, RedactionPattern } from "#gen/contextd/v1/compile_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { compile } from "../../src/core/compile/compile.js";
import { DeadlineCheck } from "../../src/core/compile/deadline.js";
import { createEstimator } from "../../src/core/tokens/estimator.js";
import { testContext } from "./compile-context.js";
import { user } from "./messages.js";
import { rejectsWith } from "./rejects.js";

/** A clock that moves `stepMs` every time it is read, starting at 0. */
function movingClock(stepMs: number): () => number {
  let ms = 0;
  return () => (ms += stepMs);
}

const history = (count: number, text = "hello there") => Array.from({ length: count }, (_, index) => user(`u${index}`, `${text} ${index}`));

describe("a compile gives up when its call's deadline has passed", () => {
  it("stops inside normalize when the clock passes the deadline there, naming the stage", async () => {
    // 10,000 messages; the clock moves 1 ms per reading and is read once per 32 messages.
    const request = create(CompileRequestSchema, { history: { messages: history(10_000) } });
    await rejectsWith(
      compile(request, testContext({ now: movingClock(1), deadline: { atMs: 50 } })),
      Code.DeadlineExceeded,
      /^normalize: the call's deadline passed, the compile gave up$/,
    );
  });

  it("stops in the stage that is running: redaction, formatters, token counting", async () => {
    const hooks = [{ kind: { case: "redaction" as const, value: { patterns: [RedactionPattern.EMAIL] } } }];
    // Readings: 4 in normalize (every 32 messages, and at its end), 1 at the end of each of the next
    // three stages, then one per 40 KB message in hooks: the 20th is in hooks.
    const withHooks = create(CompileRequestSchema, { history: { messages: history(100, "x".repeat(40_000)) }, hooks });
    await rejectsWith(compile(withHooks, testContext({ now: movingClock(1), deadline: { atMs: 20 } })), Code.DeadlineExceeded, /^hooks: /);

    const formatters = [{ segment: Segment.HISTORY, kind: { case: "xmlTag" as const, value: { tag: "turn" } } }];
    const withFormatters = create(CompileRequestSchema, { history: { messages: history(100, "x".repeat(40_000)) }, formatters });
    await rejectsWith(compile(withFormatters, testContext({ now: movingClock(1), deadline: { atMs: 20 } })), Code.DeadlineExceeded, /^segment_formatters: /);

    const tokenizer = { kind: EstimatorKind.TOKENIZER };
    const counted = create(CompileRequestSchema, { history: { messages: [user("big", "=".repeat(2_000_000))] }, budget: { estimator: tokenizer } });
    await rejectsWith(compile(counted, testContext({ now: movingClock(1), deadline: { atMs: 20 } })), Code.DeadlineExceeded, /^token counting: /);
  });

  it("answers with the signal's reason when the call was cut short, and DEADLINE_EXCEEDED when it has none of ours", async () => {
    const cancelled = new AbortController();
    cancelled.abort(new ConnectError("the caller went away", Code.Canceled));
    const request = create(CompileRequestSchema, { history: { messages: history(10) } });
    await rejectsWith(compile(request, testContext({ deadline: { signal: cancelled.signal } })), Code.Canceled, /^normalize: the call ended \(the caller went away\)/);
    await rejectsWith(compile(request, testContext({ deadline: { signal: AbortSignal.abort() } })), Code.DeadlineExceeded, /^normalize: the call ended \(aborted\)/);
  });

  it("runs to the end when the deadline is far, or there is none", async () => {
    const request = create(CompileRequestSchema, { history: { messages: history(500) } });
    const withDeadline = await compile(request, testContext({ now: movingClock(1), deadline: { atMs: 1_000_000 } }));
    const without = await compile(request, testContext());
    expect(withDeadline.payload!.history).toHaveLength(500);
    expect(without.payload!.history).toHaveLength(500);
  });

  it("stops CountTokens' counting of one long text between its chunks", async () => {
    const estimator = await createEstimator(create(EstimatorSchema, { kind: EstimatorKind.TOKENIZER }), Provider.UNSPECIFIED, "estimator", undefined, "", new DeadlineCheck({ atMs: 5 }, movingClock(1)));
    let error: unknown;
    try {
      estimator.countMessage(user("big", "b".repeat(4_000_000)));
    } catch (thrown) {
      error = thrown;
    }
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.DeadlineExceeded);
    expect((error as ConnectError).rawMessage).toMatch(/^token counting: the call's deadline passed/);
  });
});
