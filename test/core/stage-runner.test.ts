import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, EstimatorKind } from "#gen/contextd/v1/compile_pb";
import type { ObserverEvent } from "#gen/contextd/v1/telemetry_pb";
import { compile } from "../../src/core/compile/compile.js";
import { CompileEvents } from "../../src/core/compile/compile-events.js";
import { DeadlineCheck } from "../../src/core/compile/deadline.js";
import { StageRunner } from "../../src/core/compile/stage-runner.js";
import { testContext } from "./compile-context.js";
import { assistant, user } from "./messages.js";
import { rejectsWith } from "./rejects.js";

/** The stages' own events of a compile, as (stage, nanoseconds) pairs in the order they came. */
const stageEvents = (events: readonly ObserverEvent[]) =>
  events.flatMap((event) => (event.event.case === "stageTiming" ? [[event.event.value.stage, event.event.value.durationNs] as const] : []));

/** A runner of three stages that log what they read: `count` → `doubled` → `sum`. */
function threeStages(log: string[]) {
  return StageRunner.over<{ count: number; label: string }>()
    .stage({
      name: "first",
      reads: ["count"],
      produces: ["doubled"],
      run: (input) => {
        log.push(`first reads ${input.count}`);
        return { doubled: input.count * 2, dropped: "not declared, not kept" };
      },
    })
    .stage({
      name: "second",
      reads: ["doubled", "label"],
      produces: ["sum"],
      run: async (input) => {
        log.push(`second reads ${input.doubled}, ${input.label}`);
        await Promise.resolve();
        return { sum: `${input.label}=${input.doubled + 1}` };
      },
    })
    .stage({
      name: "third",
      reads: ["sum"],
      run: (input) => {
        log.push(`third reads ${input.sum}`);
      },
    });
}

describe("StageRunner", () => {
  it("runs the stages in order, each on what the stages before it produced, and keeps only what a stage declares producing", async () => {
    const log: string[] = [];
    const context = testContext();
    const stages = threeStages(log);
    const initial = { count: 4, label: "n" };
    const { state, timings } = await stages.run(initial, { context, deadline: DeadlineCheck.none, events: new CompileEvents(context, "c") });
    expect(log).toEqual(["first reads 4", "second reads 8, n", "third reads n=9"]);
    expect(state).toEqual({ count: 4, label: "n", doubled: 8, sum: "n=9" });
    expect(initial).toEqual({ count: 4, label: "n" });
    expect(stages.names).toEqual(["first", "second", "third"]);
    // The test clock moves 1,000 ns per reading: the events' start, then one reading per stage end.
    expect(timings.map((timing) => [timing.stage, timing.durationNs])).toEqual([["first", 1000n], ["second", 1000n], ["third", 1000n]]);
    expect(stageEvents(context.events)).toEqual([["first", 1000n], ["second", 1000n], ["third", 1000n]]);
  });

  it("waits at each stage boundary after that stage's event, and leaves the wait out of the next stage's time", async () => {
    const seen: string[] = [];
    const context = testContext({
      stageBoundary: () => {
        seen.push(`boundary after ${stageEvents(context.events).map(([stage]) => stage).join(",")}`);
        return Promise.resolve();
      },
    });
    const { timings } = await threeStages([]).run({ count: 1, label: "" }, { context, deadline: DeadlineCheck.none, events: new CompileEvents(context, "c") });
    expect(seen).toEqual(["boundary after first", "boundary after first,second", "boundary after first,second,third"]);
    // After a wait the clock is read again to start the next stage: every stage is one step long.
    expect(timings.map((timing) => timing.durationNs)).toEqual([1000n, 1000n, 1000n]);
  });

  it("gives up with DEADLINE_EXCEEDED naming the stage that ran past the deadline, before its event and the next stage", async () => {
    const log: string[] = [];
    let ms = 0;
    // Each reading moves the clock 1 ms: the check after `first` reads 1, after `second` 2.
    const context = testContext({ now: () => ++ms, observer: undefined });
    const deadline = new DeadlineCheck({ atMs: 2 }, context.now);
    await rejectsWith(threeStages(log).run({ count: 1, label: "" }, { context, deadline, events: new CompileEvents(context, "c") }), Code.DeadlineExceeded, /^second: the call's deadline passed/);
    expect(log).toEqual(["first reads 1", "second reads 2, "]);
  });

  it("does not check the deadline after the last stage: a finished result is returned", async () => {
    let ms = 0;
    const context = testContext({ now: () => ++ms, observer: undefined });
    // Passed at the third reading, which would be the check after `third`.
    const deadline = new DeadlineCheck({ atMs: 3 }, context.now);
    const { state } = await threeStages([]).run({ count: 1, label: "" }, { context, deadline, events: new CompileEvents(context, "c") });
    expect(state.sum).toBe("=3");
    expect(ms).toBe(2);
  });

  it("is held by the type checker to what each stage declares (tsc checks these lines)", () => {
    const stages = StageRunner.over<{ count: number }>();
    // @ts-expect-error: "later" is what no stage before this one produced
    stages.stage({ name: "reads-too-early", reads: ["later"], run: () => undefined });
    // @ts-expect-error: declares "doubled" and returns nothing
    stages.stage({ name: "produces-nothing", reads: ["count"], produces: ["doubled"], run: () => undefined });
    // @ts-expect-error: `run` is handed only what the stage named
    stages.stage({ name: "reads-undeclared", run: (input) => input.count });
    // Adding a stage makes a new runner: this one still has none.
    expect(stages.names).toEqual([]);
  });

  it("lends the event loop a turn between stages once a slice of work has passed", async () => {
    const log: string[] = [];
    let ms = 0;
    const context = testContext({ now: () => (ms += 15), observer: undefined });
    // A slice of 20 ms, the clock 15 ms per reading: due at the second check (after `second`), not after `third`.
    const deadline = new DeadlineCheck(undefined, context.now, () => {
      log.push("yield");
      return Promise.resolve();
    }, 20);
    const stages = StageRunner.over<{ count: number; label: string }>()
      .stage({ name: "first", run: () => void log.push("first") })
      .stage({ name: "second", run: () => void log.push("second") })
      .stage({ name: "third", run: () => void log.push("third") });
    await stages.run({ count: 1, label: "" }, { context, deadline, events: new CompileEvents(context, "c") });
    expect(log).toEqual(["first", "second", "yield", "third"]);
  });
});

describe("a compile's stages", () => {
  it("emit one stage_timing event per stage in order, all before the summary events and pipeline_compiled last", async () => {
    const context = testContext();
    const history = Array.from({ length: 6 }, (_, index) => (index % 2 === 0 ? user(`h${index}`, `question ${index}`) : assistant(`h${index}`, `answer ${index}`)));
    const request = create(CompileRequestSchema, { history: { messages: history }, budget: { maxTokens: 40n, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } } });
    const result = await compile(request, context);
    const names = ["normalize", "freeze_source", "artifacts", "deferred_blocks", "system_prompt", "hooks", "role_projection", "segment_formatters", "text_replacements", "budget", "render", "targets", "result"];
    expect(stageEvents(context.events).map(([stage]) => stage)).toEqual(names);
    expect(result.stageTimings.map((timing) => [timing.stage, timing.durationNs])).toEqual(stageEvents(context.events));
    const kinds = context.events.map((event) => event.event.case);
    const lastStage = kinds.lastIndexOf("stageTiming");
    // Nothing but stage events while the stages run; then the summary (h0 and h1 dropped as the
    // history's head), then the compile's end.
    expect(kinds.slice(0, lastStage + 1).every((kind) => kind === "stageTiming")).toBe(true);
    expect(kinds.slice(lastStage + 1)).toEqual([
      ...Array<string>(7).fill("tokensEstimated"),
      "historyHeadDropped",
      "budgetPressure",
      "pipelineCompiled",
    ]);
    expect(new Set(context.events.map((event) => event.compileId)).size).toBe(1);
  });
});
