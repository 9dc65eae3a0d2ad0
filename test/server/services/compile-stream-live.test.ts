import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema, EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { compile } from "../../../src/core/compile/compile.js";
import { whileRunning, type LiveItem } from "../../../src/server/services/live-stream.js";
import { testContext } from "../../core/compile-context.js";
import { user } from "../../core/messages.js";

describe("compile stage boundaries", () => {
  it("waits at every stage boundary after that stage's events went to the observer", async () => {
    const seenAtBoundary: string[][] = [];
    const context = testContext();
    context.stageBoundary = async () => {
      seenAtBoundary.push(context.events.flatMap((event) => (event.event.case === "stageTiming" ? [event.event.value.stage] : [])));
    };
    const history = Array.from({ length: 6 }, (_, index) => user(`h${index}`, `turn ${index}`));
    const result = await compile(create(CompileRequestSchema, { history: { messages: history }, budget: { maxTokens: 30n, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } } }), context);
    const stages = result.stageTimings.map((timing) => timing.stage);
    expect(stages[0]).toBe("normalize");
    expect(seenAtBoundary).toEqual(stages.map((_, index) => stages.slice(0, index + 1)));
  });
});

describe("whileRunning", () => {
  it("yields what the run sends while it is still running, then the result", async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    let finished = false;
    const items = whileRunning<string, number>(async (send) => {
      send("first");
      await gate;
      send("second");
      finished = true;
      return 42;
    });
    expect(await items.next()).toEqual({ done: false, value: { sent: "first" } });
    expect(finished).toBe(false);
    open();
    const rest: LiveItem<string, number>[] = [];
    for await (const item of items) rest.push(item);
    expect(rest).toEqual([{ sent: "second" }, { result: 42 }]);
  });

  it("yields what was sent before a failure, then throws it", async () => {
    const items = whileRunning<string, number>(async (send) => {
      send("before");
      await Promise.resolve();
      throw new Error("stage failed");
    });
    expect(await items.next()).toEqual({ done: false, value: { sent: "before" } });
    await expect(items.next()).rejects.toThrow("stage failed");
  });
});
