import type { StageTiming } from "#gen/contextd/v1/compile_pb";
import type { CompileContext } from "./compile-context.js";
import type { CompileEvents } from "./compile-events.js";
import type { DeadlineCheck } from "./deadline.js";

/**
 * Why it exists: what happens between two stages of a compile is the same for every stage — its
 * time goes into `stage_timings` and a stage_timing event, a streaming caller gets the events so
 * far (`CompileContext.stageBoundary`), the call's deadline is checked (DEADLINE_EXCEEDED names
 * the stage) and the event loop gets its turn once a slice of work has passed. Written after each
 * stage it buried the numbered list of `compile.ts` under a dozen copies; here it is written once.
 *
 * A stage declares what it reads, what it changes in place and what it produces. The type checker
 * holds it to that: it can name only what the request brought or an earlier stage produced, its
 * `run` is typed to see only what it named, and only what it declares producing is kept.
 */

/** One stage: its name (as `stage_timings`, its event and its deadline error name it) and its work. */
export interface StageDefinition<State, Reads extends keyof State, Changes extends keyof State, Produces extends PropertyKey, Output> {
  readonly name: string;
  /** What the stage reads. */
  readonly reads?: readonly Reads[];
  /** What it changes in place (the working set); open to `run` as `reads` are. */
  readonly changes?: readonly Changes[];
  /** What it adds for the stages after it: the keys of what `run` returns that are kept. */
  readonly produces?: readonly Produces[];
  run(input: Pick<State, Reads | Changes>): Output | Promise<Output>;
}

/** What `run` must return for `produces`: an object with each of them, or anything when it produces nothing. */
type Produced<Produces extends PropertyKey> = [Produces] extends [never] ? unknown : { [K in Produces]: unknown };

interface RunnableStage {
  readonly name: string;
  readonly produces: readonly PropertyKey[];
  run(state: Record<PropertyKey, unknown>): unknown;
}

/** What a run of the stages leaves: the state after the last stage and the time of each stage, in order. */
export interface StagesRun<State> {
  state: State;
  timings: StageTiming[];
}

/** The per-call parts a run needs beside the state: the clock and boundary wait, the deadline, the events. */
export interface StagePacing {
  context: Pick<CompileContext, "monotonicNs" | "stageBoundary">;
  deadline: DeadlineCheck;
  events: CompileEvents;
}

/**
 * An ordered list of stages over a state that starts as `Initial` and gains what each stage
 * produces. Built once (each `stage` call returns a longer list), run once per compile.
 */
export class StageRunner<Initial extends object, State extends object = Initial> {
  private constructor(private readonly stages: readonly RunnableStage[]) {}

  /** No stages yet, over a state that starts as `Initial`. */
  static over<Initial extends object>(): StageRunner<Initial> {
    return new StageRunner<Initial>([]);
  }

  /** These stages, then `definition`. */
  stage<
    const Reads extends keyof State = never,
    const Changes extends keyof State = never,
    const Produces extends PropertyKey = never,
    Output extends Produced<Produces> = Produced<Produces>,
  >(definition: StageDefinition<State, Reads, Changes, Produces, Output>): StageRunner<Initial, State & Pick<Output, Produces & keyof Output>> {
    const runnable: RunnableStage = {
      name: definition.name,
      produces: definition.produces ?? [],
      run: definition.run as RunnableStage["run"],
    };
    return new StageRunner([...this.stages, runnable]);
  }

  /** The stage names in order. */
  get names(): string[] {
    return this.stages.map((stage) => stage.name);
  }

  /**
   * Runs the stages in order from `initial` (not changed: the state is a copy). After each stage:
   * its timing and stage_timing event, the boundary wait, and — unless it was the last, whose end
   * is the compile's — the deadline check and the event loop's turn when one is due. The deadline
   * is checked before the stage's event, so a stage that ran past the deadline reports no timing.
   */
  async run(initial: Initial, { context, deadline, events }: StagePacing): Promise<StagesRun<State>> {
    const state = { ...initial } as Record<PropertyKey, unknown>;
    const timings: StageTiming[] = [];
    let stageStarted = events.startedNs;
    const last = this.stages.length - 1;
    for (let index = 0; index <= last; index++) {
      const stage = this.stages[index]!;
      // The whole state, not a copy of what the stage named: the type checker already holds `run`
      // to that, and copying made a warm 10-message compile 20-30% slower (main and this, alternated in one process).
      let output = stage.run(state);
      // Only an asynchronous stage costs a turn of the microtask queue.
      if (output instanceof Promise) output = await output;
      for (const key of stage.produces) state[key] = (output as Record<PropertyKey, unknown>)[key];

      if (index < last && deadline.checkNow(stage.name)) await deadline.pause(stage.name);
      const endedNs = context.monotonicNs();
      const timing: StageTiming = { $typeName: "contextd.v1.StageTiming", stage: stage.name, durationNs: endedNs - stageStarted };
      stageStarted = endedNs;
      timings.push(timing);
      events.emit({ case: "stageTiming", value: timing });
      const boundary = context.stageBoundary?.();
      if (boundary) {
        await boundary;
        // The wait is not part of the next stage's time.
        stageStarted = context.monotonicNs();
      }
    }
    return { state: state as State, timings };
  }
}
