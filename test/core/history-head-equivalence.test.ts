import { create, toBinary } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { describe, expect, it, vi } from "vitest";
import {
  BudgetStrategy,
  CompileRequestSchema,
  CompileResultPart,
  CompileResultSchema,
  EstimatorKind,
  HistoryStart,
  IdentityPolicy,
  type CompileRequest,
  type CompileResult,
} from "#gen/contextd/v1/compile_pb";
import { Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import type { ObserverEvent } from "#gen/contextd/v1/telemetry_pb";
import { DeltaSchema, Segment, type Delta } from "#gen/contextd/v1/state_pb";
import { Compiler } from "../../src/application/compiler.js";
import { HistoryFactsCache } from "../../src/application/history-facts-cache.js";
import { HistoryFacts } from "../../src/core/compile/history-facts.js";

import { TokenCountCache } from "../../src/core/tokens/token-count-cache.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { randomSource } from "../support/random-messages.js";
import { call, message, result, system } from "./messages.js";

// Counts the compiles that left a head out, so the test shows the incremental path ran (a
// wrapper around the real function; nothing it returns is changed).
const elided = vi.hoisted(() => ({ count: 0 }));
vi.mock("../../src/core/compile/history-head.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../../src/core/compile/history-head.js")>();
  return {
    ...original,
    elideHistoryHead: async (...args: Parameters<typeof original.elideHistoryHead>) => {
      const head = await original.elideHistoryHead(...args);
      if (head) elided.count++;
      return head;
    },
  };
});

const words = "the agent reads a file runs the tests and writes a note about what it found".split(" ");

/** Two stores fed the same edits, one compiled with kept history facts, one without. */
class Twins {
  readonly stores: MemoryConversationStore[];
  readonly incremental: Compiler;
  readonly full: Compiler;
  private ids = 0;
  private readonly random: () => number;

  constructor(seed: number) {
    this.random = randomSource(seed);
    // Strict tool rounds, so that an edit after an open round fails as it did before commits
    // stored open rounds anywhere: a history with a broken round is compiled in full (the default
    // repair sees all of it), and the random edits would leave few histories whose head can go.
    const counter = () => {
      let next = 0;
      return { newMessageId: () => `drawn-${next++}`, strictToolRounds: true };
    };
    this.stores = [new MemoryConversationStore({ deltaContext: counter() }), new MemoryConversationStore({ deltaContext: counter() })];
    this.incremental = new Compiler({ store: this.stores[0]!, tokenCounts: new TokenCountCache(), historyFacts: new HistoryFactsCache({ maxBytes: 1 << 24, maxConversations: 4 }) });
    this.full = new Compiler({ store: this.stores[1]!, tokenCounts: new TokenCountCache() });
  }

  pick<T>(values: readonly T[]): T {
    return values[Math.floor(this.random() * values.length)]!;
  }

  chance(p: number): boolean {
    return this.random() < p;
  }

  text(): string {
    const length = 3 + Math.floor(this.random() * 60);
    return Array.from({ length }, () => this.pick(words)).join(" ");
  }

  id(prefix: string): string {
    return `${prefix}-${this.ids++}`;
  }

  async commit(deltas: Delta[]): Promise<void> {
    const outcomes = await Promise.allSettled(this.stores.map((store) => store.commit("c", undefined, deltas, "")));
    // An edit the history does not allow (no open round to answer, an id not there) fails on both.
    expect(outcomes.map((outcome) => outcome.status)).toEqual([outcomes[0]!.status, outcomes[0]!.status]);
  }

  /** A random edit of the stored conversation. */
  async edit(): Promise<void> {
    await this.change();
    this.historyIds = (await this.stores[0]!.load("c")).history.map((stored) => stored.id);
  }

  historyIds: string[] = [];

  /** Cancels the calls of an open round at the tail, if there is one (a user turn cannot follow it). */
  async closeOpenRound(): Promise<void> {
    await this.commit([create(DeltaSchema, { operation: { case: "cancelToolCalls", value: { toolCallIds: [], abortReason: "" } } })]);
  }

  private async change(): Promise<void> {
    const state = await this.stores[0]!.load("c");
    const history = state.history;
    const roll = this.random();
    const delta = (operation: Delta["operation"]) => create(DeltaSchema, { operation } as never);
    if (roll < 0.5) {
      const messages = Array.from({ length: 1 + Math.floor(this.random() * 3) }, () => message(this.pick([Role.USER, Role.ASSISTANT]), this.id("m"), this.text()));
      return this.commit([delta({ case: "appendMessages", value: { segment: Segment.HISTORY, messages } } as never)]);
    }
    if (roll < 0.62) {
      const callId = this.id("call");
      const assistant = message(Role.ASSISTANT, this.id("a"), call(callId, "read", `{"path":"${this.text().slice(0, 20)}"}`));
      const results = [message(Role.TOOL, this.id("r"), result(callId, this.text().repeat(1 + Math.floor(this.random() * 4)), "read"))];
      return this.commit([delta({ case: "appendToolRound", value: { assistant, results } } as never)]);
    }
    if (roll < 0.7) {
      // An open round: calls now, results (or a cancellation) in a later edit.
      const assistant = message(Role.ASSISTANT, this.id("a"), call(this.id("call"), "run"), call(this.id("call"), "run"));
      return this.commit([delta({ case: "appendMessages", value: { segment: Segment.HISTORY, messages: [assistant] } } as never)]);
    }
    const open = [...history].reverse().find((candidate) => candidate.parts.some((part) => part.kind.case === "toolCall"));
    const openCalls = open ? open.parts.flatMap((part) => (part.kind.case === "toolCall" ? [part.kind.value.id] : [])) : [];
    if (roll < 0.76 && openCalls.length > 0) {
      return this.commit([delta({ case: "appendToolResult", value: { toolCallId: this.pick(openCalls), name: "run", payload: { text: this.text() } } } as never)]);
    }
    if (roll < 0.8 && openCalls.length > 0) return this.commit([delta({ case: "cancelToolCalls", value: { toolCallIds: openCalls, abortReason: "stopped" } } as never)]);
    if (roll < 0.84 && history.length > 4) {
      const through = history[Math.floor(this.random() * (history.length - 2))]!;
      const summary = message(Role.ASSISTANT, this.id("summary"), `summary: ${this.text()}`);
      return this.commit([delta({ case: "compact", value: { summary, throughMessageId: through.id, remember: this.chance(0.5) ? [this.text()] : [] } } as never)]);
    }
    if (roll < 0.88 && history.length > 0) {
      return this.commit([delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: [this.pick(history).id] } } as never)]);
    }
    if (roll < 0.92 && history.length > 0) {
      // The same message objects, some left out: a replace that looks almost like an append.
      const kept = history.filter(() => this.chance(0.9));
      return this.commit([delta({ case: "replaceSegment", value: { segment: Segment.HISTORY, messages: [...kept, message(Role.USER, this.id("m"), this.text())] } } as never)]);
    }
    if (roll < 0.94) return this.commit([delta({ case: "clearState", value: {} } as never)]);
    if (roll < 0.96) return this.commit([delta({ case: "remember", value: { text: this.text() } } as never)]);
    if (roll < 0.975) return this.commit([delta({ case: "upsertArtifact", value: { artifact: { id: this.pick(["notes", "plan"]), payload: { text: this.text() } } } } as never)]);
    return this.commit([delta({ case: "appendMessages", value: { segment: Segment.SYSTEM, messages: [system(this.id("s"), this.text())] } } as never)]);
  }

  /** A random compile request, mostly of the shapes whose head can be left out. */
  request(): CompileRequest {
    const request = create(CompileRequestSchema, {
      conversationId: "c",
      budget: {
        maxTokens: BigInt(this.pick([0, 40, 120, 400, 1_500])),
        strategy: this.pick([BudgetStrategy.UNSPECIFIED, BudgetStrategy.UNSPECIFIED, BudgetStrategy.DROP_HEAD, BudgetStrategy.DROP, BudgetStrategy.DROP_TAIL]),
        estimator: { kind: this.pick([EstimatorKind.UNSPECIFIED, EstimatorKind.CHARS, EstimatorKind.FIXED, EstimatorKind.TOKENIZER]) },
        historyStart: this.chance(0.2) ? HistoryStart.ANY : HistoryStart.UNSPECIFIED,
        trimLatestUserMessage: this.chance(0.3),
        minMessages: this.chance(0.15) ? BigInt(1 + Math.floor(this.random() * 6)) : 0n,
        protectedRoles: this.chance(0.05) ? [Role.SYSTEM] : [],
      },
      include: this.chance(0.2) ? [this.pick([CompileResultPart.SOURCE, CompileResultPart.NORMALIZED_SNAPSHOT, CompileResultPart.WRITEBACK_SNAPSHOT, CompileResultPart.PERSISTENCE, CompileResultPart.ALL_TRANSFORMATIONS, CompileResultPart.MESSAGE_TOKENS])] : [],
    });
    const provider = this.pick([Provider.UNSPECIFIED, Provider.OPENAI_CHAT, Provider.OPENAI_CHAT, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI, Provider.OPENAI_RESPONSES]);
    if (provider !== Provider.UNSPECIFIED) request.render = { $typeName: "contextd.v1.RenderOptions", provider, model: this.pick(["gpt-4o", "", "claude-sonnet-4"]) } as never;
    if (this.chance(0.15)) {
      // Without an id, a STABLE one (a random one would differ between the two compiles).
      const id = this.chance(0.7) ? this.id("turn") : "";
      request.currentTurn = { $typeName: "contextd.v1.CurrentTurn", raw: message(Role.USER, id, this.text()), persistence: 0 } as never;
      if (id === "") {
        request.identity = { $typeName: "contextd.v1.IdentityOptions", policy: IdentityPolicy.STABLE, prefix: "", requireDurable: false } as never;
        request.turnId = this.id("turn");
      }
    }
    // Request segments over the stored ones, now and then with the id of a stored history message.
    if (this.chance(0.05)) request.system = { $typeName: "contextd.v1.MessageList", messages: [system(this.id("rs"), this.text())] } as never;
    if (this.chance(0.04) && this.historyIds.length > 0) request.memory = { $typeName: "contextd.v1.MessageList", messages: [system(this.pick(this.historyIds), this.text())] } as never;
    if (this.chance(0.1)) request.scratch = [message(Role.USER, "", this.text())];
    if (this.chance(0.05)) request.pending = [message(Role.USER, this.id("p"), this.text())];
    return request;
  }
}

/** A compile's outcome as bytes: the result without stage timings (durations), or the error. */
async function outcome(compiler: Compiler, request: CompileRequest): Promise<{ result?: Uint8Array; error?: string; events: string[] }> {
  const events: ObserverEvent[] = [];
  try {
    const compiled: CompileResult = await compiler.compileAndCommit(request, { observer: (event) => events.push(event) });
    return { result: toBinary(CompileResultSchema, { ...compiled, stageTimings: [] }), events: eventKeys(events) };
  } catch (error) {
    const connect = ConnectError.from(error);
    return { error: `${connect.code} ${connect.rawMessage} (${connect.details.length} details)`, events: eventKeys(events) };
  }
}

/** Events without what differs between any two runs (timestamps, compile ids, stage durations). */
function eventKeys(events: readonly ObserverEvent[]): string[] {
  return events.map((event) => {
    const body = event.event;
    if (body.case === "stageTiming") return `stage ${body.value.stage}`;
    if (body.case === "pipelineCompiled") return `compiled ${body.value.totalCost}`;
    return `${body.case} ${JSON.stringify(body.value, (_, value) => (typeof value === "bigint" ? String(value) : value))}`;
  });
}

describe("a compile that leaves out the head of the stored history gives exactly the full compile's result", () => {
  it("over random conversations, edits (append, tool rounds, results, cancel_tool_calls, compact, remove, replace, clear, remember), budgets, estimators and providers", async () => {
    elided.count = 0;
    let compiles = 0;
    let failures = 0;
    for (let seed = 1; seed <= 12; seed++) {
      const twins = new Twins(seed);
      for (let step = 0; step < 60; step++) {
        await twins.edit();
        for (let compile = 0; compile < 3; compile++) {
          const request = twins.request();
          const [incremental, full] = [await outcome(twins.incremental, request), await outcome(twins.full, request)];
          compiles++;
          if (full.error) failures++;
          expect(incremental, `seed ${seed} step ${step} compile ${compile}`).toEqual(full);
        }
      }
    }
    // Both paths ran many times, and both outcomes (results and errors) were compared.
    expect(elided.count).toBeGreaterThan(compiles / 8);
    expect(elided.count).toBeLessThan(compiles);
    expect(failures).toBeGreaterThan(0);
  }, 120_000);

  it("with commit.deltas: the turn the compile commits is compiled the same, and stored the same", async () => {
    elided.count = 0;
    const twins = new Twins(99);
    for (let step = 0; step < 40; step++) await twins.edit();
    let failed = 0;
    for (let turn = 0; turn < 40; turn++) {
      await twins.closeOpenRound();
      const version = (await twins.stores[0]!.load("c")).version;
      const messages: Message[] = [message(Role.USER, twins.id("u"), twins.text())];
      const request = create(CompileRequestSchema, {
        conversationId: "c",
        budget: { maxTokens: 200n },
        render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" },
        commit: { expectedVersion: version, deltas: [create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages } } })] },
      });
      const [incremental, full] = [await outcome(twins.incremental, request), await outcome(twins.full, request)];
      expect(incremental, `turn ${turn}`).toEqual(full);
      if (full.error) failed++;
      const [stateA, stateB] = await Promise.all(twins.stores.map((store) => store.load("c")));
      expect(stateA!.history.map((stored) => stored.id)).toEqual(stateB!.history.map((stored) => stored.id));
      if (turn % 7 === 6) await twins.edit();
    }
    expect(failed).toBeLessThan(5);
    expect(elided.count).toBeGreaterThan(20);
  }, 60_000);

  it("keeps one set of facts across compile-commits whose deltas bring messages without ids (the store's copies are adopted)", async () => {
    elided.count = 0;
    const twins = new Twins(7);
    const store = twins.stores[0]!;
    await twins.commit([create(DeltaSchema, { operation: { case: "clearState", value: {} } })]);
    const long = Array.from({ length: 300 }, (_, index) => message(index % 2 === 0 ? Role.USER : Role.ASSISTANT, twins.id("m"), twins.text()));
    await twins.commit([create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: long } } })]);
    const of = vi.spyOn(HistoryFacts, "of");
    try {
      for (let turn = 0; turn < 10; turn++) {
        const version = (await store.load("c")).version;
        const request = create(CompileRequestSchema, {
          conversationId: "c",
          budget: { maxTokens: 600n },
          render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" },
          commit: { expectedVersion: version, deltas: [create(DeltaSchema, { operation: { case: "appendUser", value: { message: message(Role.UNSPECIFIED, "", twins.text()) } } })] },
        });
        const committed = await twins.incremental.compileAndCommit(request, { observer: () => {} });
        expect(committed.committedVersion).toBe(version + 1n);
        // The state it stored compiles the same with and without facts.
        const plain = create(CompileRequestSchema, { conversationId: "c", budget: { maxTokens: 600n }, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" } });
        const full = new Compiler({ store, tokenCounts: new TokenCountCache() });
        expect(await outcome(twins.incremental, plain), `turn ${turn}`).toEqual(await outcome(full, plain));
      }
      // One facts object from the first compile on: each turn extended it, none rebuilt it.
      expect(new Set(of.mock.results.map((call) => call.value)).size).toBe(1);
    } finally {
      of.mockRestore();
    }
    expect(elided.count).toBeGreaterThanOrEqual(20);
  });
});
