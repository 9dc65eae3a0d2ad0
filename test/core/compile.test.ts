import { clone, create, equals } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { ArtifactLifecycle, MergePolicy } from "#gen/contextd/v1/artifact_pb";
import {
  BudgetStrategy,
  CompileRequestSchema,
  CurrentTurnPersistence,
  EstimatorKind,
  IdentityPolicy,
  RedactionPattern,
  ToolRoundRepair,
  TransformationAction,
  TransformationReason,
  type CompileRequest,
} from "#gen/contextd/v1/compile_pb";
import { SummarizeResponseSchema } from "#gen/contextd/v1/context_service_pb";
import { ActorKind, Role, type Message } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { compile } from "../../src/core/compile/compile.js";
import { messageText } from "../../src/core/model/message-text.js";
import { testContext } from "./compile-context.js";
import { assistant, call, message, result as toolResult, system, toolRound, user } from "./messages.js";

type Init = Parameters<typeof create<typeof CompileRequestSchema>>[1];
const request = (init: Init) => create(CompileRequestSchema, init);
/** FIXED estimator: every message costs exactly 10 tokens, so budgets read as message counts. */
const tenPerMessage = { kind: EstimatorKind.FIXED, fixedPerMessage: 10n };
const ids = (messages: readonly Message[]) => messages.map((m) => m.id);

async function rejects(promise: Promise<unknown>, code: Code, pattern: RegExp): Promise<void> {
  const error = await promise.then(() => undefined, (thrown: unknown) => thrown);
  expect(error).toBeInstanceOf(ConnectError);
  expect(Code[(error as ConnectError).code]).toBe(Code[code]);
  expect((error as ConnectError).rawMessage).toMatch(pattern);
}

const history = (count: number) => Array.from({ length: count }, (_, i) => (i % 2 === 0 ? user(`h${i}`, `question ${i}`) : assistant(`h${i}`, `answer ${i}`)));

describe("budget", () => {
  it("never evicts pending and appends it, then the current turn, after history", async () => {
    const result = await compile(
      request({
        history: { messages: history(6) },
        pending: [user("p1", "pending one"), assistant("p2", "pending two")],
        currentTurn: { raw: user("now", "current") },
        budget: { maxTokens: 60n, estimator: tenPerMessage },
      }),
      testContext(),
    );
    // The budget keeps h3..h5; h3 answers a dropped question, so alignment drops it too.
    expect(ids(result.payload!.history)).toEqual(["h4", "h5", "p1", "p2", "now"]);
    expect(result.transformations["p1"]).toMatchObject({ action: TransformationAction.PASSED, reason: TransformationReason.PROTECTED_PENDING });
    expect(result.transformations["h0"]).toMatchObject({ action: TransformationAction.DROPPED, reason: TransformationReason.TOKEN_BUDGET_EXCEEDED, segment: Segment.HISTORY });
    expect(result.transformations["h3"]).toMatchObject({ action: TransformationAction.DROPPED, reason: TransformationReason.HISTORY_ALIGNMENT, segment: Segment.HISTORY });
    expect(result.usage).toMatchObject({ history: 20n, pending: 30n, reserved: 30n, limit: 60n, total: 50n, historyBeforeTrim: 60n });
  });

  it("does not protect history's latest user message when pending holds a user message (issue 27, E1)", async () => {
    // p is the question now; c is an older one, and keeping it would keep it without its answer.
    const messages = [user("a", "first"), assistant("b", "answer"), user("c", "older question")];
    const result = await compile(
      request({ history: { messages }, pending: [user("p", "the question")], budget: { maxTokens: 15n, estimator: tenPerMessage } }),
      testContext(),
    );
    expect(ids(result.payload!.history)).toEqual(["p"]);
    expect(result.transformations["c"]).toMatchObject({ action: TransformationAction.DROPPED, reason: TransformationReason.TOKEN_BUDGET_EXCEEDED });
    expect(result.transformations["p"]).toMatchObject({ action: TransformationAction.PASSED, reason: TransformationReason.PROTECTED_PENDING });
    // A round in progress at the head of pending answers history's latest user message: with a
    // current turn after it, c is still kept, so the body does not start on the round's call.
    const inProgress = await compile(
      request({ history: { messages }, pending: toolRound("r", ["k1"]), currentTurn: { raw: user("now", "next") }, budget: { maxTokens: 45n, estimator: tenPerMessage } }),
      testContext(),
    );
    expect(ids(inProgress.payload!.history)).toEqual(["c", "r-a", "r-r-k1", "now"]);
    // Pending without a user message (an assistant's tool round in progress) keeps the protection.
    await rejects(
      compile(request({ history: { messages }, pending: [assistant("p", "an answer in progress")], budget: { maxTokens: 15n, estimator: tenPerMessage } }), testContext()),
      Code.ResourceExhausted,
      /the latest user message "c" \(history\[2\]\) needs 10 tokens and is protected/,
    );
  });

  it("tells 'pending exceeds budget' from 'budget exceeded'", async () => {
    await rejects(
      compile(request({ pending: [user("p1", "a"), user("p2", "b")], currentTurn: { raw: user("now", "c") }, budget: { maxTokens: 25n, estimator: tenPerMessage } }), testContext()),
      Code.ResourceExhausted,
      /^pending exceeds budget: .*30 tokens, the limit is 25/,
    );
    await rejects(
      compile(request({ system: { messages: [system("s1", "a"), system("s2", "b")] }, currentTurn: { raw: user("now", "c") }, budget: { maxTokens: 25n, estimator: tenPerMessage } }), testContext()),
      Code.ResourceExhausted,
      /^budget exceeded: 30 tokens are reserved before any history \(system 20,.*limit is 25/,
    );
  });

  it("shrinks history when a formatter grows the system prompt", async () => {
    const base = {
      system: { messages: [system("s", "x".repeat(40))] },
      history: { messages: history(10) },
      budget: { maxTokens: 100n, estimator: { kind: EstimatorKind.CHAR_FALLBACK, charsPerToken: 1 } },
    };
    const plain = await compile(request(base), testContext());
    const wrapped = await compile(
      request({ ...base, formatters: [{ segment: Segment.SYSTEM, kind: { case: "template", value: { template: "=".repeat(30) + "{{content}}" } } }] }),
      testContext(),
    );
    expect(plain.usage!.system).toBe(40n);
    expect(wrapped.usage!.system).toBe(70n);
    expect(wrapped.payload!.history.length).toBeLessThan(plain.payload!.history.length);
    expect(wrapped.transformations["s"]).toMatchObject({ action: TransformationAction.FORMATTED, reason: TransformationReason.SEGMENT_FORMATTER });
    expect(wrapped.usage!.total).toBeLessThanOrEqual(100n);
  });

  it("keeps tool rounds with parallel calls whole and protects an open round at the tail", async () => {
    const messages = [user("u0", "go"), ...toolRound("r1", ["a", "b", "c"]), user("u1", "again"), ...toolRound("r2", ["d", "e"], ["d"])];
    // 8 messages at 10 tokens; the round r1 is 4 of them. A limit of 50 cannot keep a partial round.
    const result = await compile(request({ history: { messages }, budget: { maxTokens: 50n, estimator: tenPerMessage } }), testContext());
    expect(ids(result.payload!.history)).toEqual(["u1", "r2-a", "r2-r-d"]);
    for (const id of ["r1-a", "r1-r-a", "r1-r-b", "r1-r-c"]) expect(result.transformations[id]!.action).toBe(TransformationAction.DROPPED);
    // The open round alone fits 20 only once the latest user message may go too.
    const tail = await compile(
      request({ history: { messages }, budget: { maxTokens: 20n, strategy: BudgetStrategy.DROP_TAIL, estimator: tenPerMessage, trimLatestUserMessage: true } }),
      testContext(),
    );
    expect(ids(tail.payload!.history)).toEqual(["r2-a", "r2-r-d"]);
    expect(tail.warnings.map((warning) => warning.code)).toEqual(["history_unaligned"]);
  });

  it("implements DROP_HEAD with min_messages, protected roles and retained ids", async () => {
    const messages = [system("pinned", "rules"), ...history(6)];
    const result = await compile(
      request({ history: { messages }, budget: { maxTokens: 40n, estimator: tenPerMessage, protectedRoles: [Role.SYSTEM], retainedIds: ["h1"] } }),
      testContext(),
    );
    expect(ids(result.payload!.history)).toEqual(["pinned", "h1", "h4", "h5"]);
    // The pinned note is protected, so history may start with it rather than a user turn.
    expect(result.warnings.map((warning) => warning.code)).toEqual(["history_unaligned"]);
    const block = await compile(request({ history: { messages: history(6) }, budget: { maxTokens: 40n, estimator: tenPerMessage, minMessages: 5n } }), testContext());
    // All of history goes but the latest user message, protected without a current turn.
    expect(ids(block.payload!.history)).toEqual(["h4"]);
  });

  it("implements DROP (all or nothing, DROPPED) and STRICT", async () => {
    const drop = await compile(request({ history: { messages: history(4) }, budget: { maxTokens: 30n, strategy: BudgetStrategy.DROP, estimator: tenPerMessage } }), testContext());
    expect(ids(drop.payload!.history)).toEqual(["h2"]);
    expect(drop.transformations["h0"]).toMatchObject({ action: TransformationAction.DROPPED, reason: TransformationReason.TOKEN_BUDGET_EXCEEDED });
    const fits = await compile(request({ history: { messages: history(3) }, budget: { maxTokens: 30n, strategy: BudgetStrategy.DROP, estimator: tenPerMessage } }), testContext());
    expect(fits.payload!.history).toHaveLength(3);
    await rejects(
      compile(request({ history: { messages: history(4) }, budget: { maxTokens: 30n, strategy: BudgetStrategy.STRICT, estimator: tenPerMessage } }), testContext()),
      Code.ResourceExhausted,
      /budget exceeded \(STRICT\): history needs 40 tokens, 30 are left/,
    );
  });

  it("falls back from SUMMARIZE to DROP_HEAD without a session, and uses a summarizer when given", async () => {
    const base = { history: { messages: history(6) }, budget: { maxTokens: 40n, strategy: BudgetStrategy.SUMMARIZE, estimator: tenPerMessage } };
    const fallback = await compile(request(base), testContext());
    expect(ids(fallback.payload!.history)).toEqual(["h2", "h3", "h4", "h5"]);
    expect(fallback.warnings.map((w) => w.code)).toEqual(["summarize_fallback"]);

    let asked: string[] = [];
    const context = testContext({
      summarize: async (summarizeRequest) => {
        asked = ids(summarizeRequest.messages);
        return create(SummarizeResponseSchema, { requestId: summarizeRequest.requestId, summary: assistant("", "they talked") });
      },
    });
    const summarized = await compile(request(base), context);
    // A quarter of the 40 available tokens is kept free for the summary; the summary also covers
    // h3, the answer to h2, so that a user turn follows it.
    expect(asked).toEqual(["h0", "h1", "h2", "h3"]);
    expect(ids(summarized.payload!.history).slice(1)).toEqual(["h4", "h5"]);
    const head = summarized.payload!.history[0]!;
    expect(head.provenance?.kind).toMatchObject({ case: "summary", value: { coveredMessageIds: ["h0", "h1", "h2", "h3"] } });
    expect(summarized.transformations["h0"]).toMatchObject({ action: TransformationAction.DROPPED, reason: TransformationReason.SUMMARIZED });
    expect(ids(summarized.persistence!.history)[0]).toBe(head.id);
    expect(context.events.some((e) => e.event.case === "contextSummarized")).toBe(true);
  });

  it("reports a full context window unless auto_compact is on", async () => {
    const window = { contextWindow: 50n, outputReserve: 20n, estimator: tenPerMessage };
    await rejects(compile(request({ history: { messages: history(4) }, budget: window }), testContext()), Code.ResourceExhausted, /^context full: .*40 tokens.*leaves 30/);
    const compacted = await compile(request({ history: { messages: history(4) }, budget: { ...window, autoCompact: true } }), testContext());
    expect(ids(compacted.payload!.history)).toEqual(["h2", "h3"]);
    expect(compacted.warnings[0]!.code).toBe("summarize_fallback");
  });

  it("emits observer events and stage timings in pipeline order", async () => {
    const context = testContext();
    const result = await compile(request({ history: { messages: history(4) }, budget: { maxTokens: 30n, estimator: tenPerMessage } }), context);
    const kinds = context.events.map((e) => e.event.case);
    // h0 for the budget (the run at the head of the history: one event), h1 (its answer) for alignment.
    const drops = context.events.flatMap((e) => (e.event.case === "messageDropped" || e.event.case === "historyHeadDropped" ? [e.event] : []));
    expect(drops).toMatchObject([
      { case: "historyHeadDropped", value: { count: 1n, firstMessageId: "h0", lastMessageId: "h0" } },
      { case: "messageDropped", value: { messageId: "h1", reason: TransformationReason.HISTORY_ALIGNMENT } },
    ]);
    expect(kinds.at(-1)).toBe("pipelineCompiled");
    expect(kinds).toContain("tokensEstimated");
    expect(kinds).toContain("budgetPressure");
    expect(result.stageTimings.map((t) => t.stage)).toEqual([
      "normalize", "freeze_source", "artifacts", "deferred_blocks", "system_prompt", "hooks", "role_projection", "segment_formatters", "text_replacements", "budget", "render", "targets", "result",
    ]);
    const throwing = testContext({ observer: () => { throw new Error("telemetry down"); } });
    await expect(compile(request({ history: { messages: history(2) } }), throwing)).resolves.toBeDefined();
  });
});

describe("identity", () => {
  it("rejects duplicate ids between history and pending, and from a deferred block", async () => {
    await rejects(compile(request({ history: { messages: [user("x", "a")] }, pending: [user("x", "b")] }), testContext()), Code.InvalidArgument, /duplicate message id "x" at pending\[0\] \(also at history\[0\]\)/);
    await rejects(
      compile(request({ history: { messages: [user("x", "a")] }, deferredBlocks: [{ segment: Segment.MEMORY, messages: [system("x", "note")] }] }), testContext()),
      Code.InvalidArgument,
      /duplicate message id "x" at deferred_blocks\[0\]\.messages\[0\] \(also at history\[0\]\)/,
    );
  });

  it("needs a policy when require_durable is set and lists assigned ids in the writeback", async () => {
    await rejects(compile(request({ history: { messages: [user("", "a")] }, identity: { requireDurable: true } }), testContext()), Code.FailedPrecondition, /^missing identity policy: history\[0\]/);
    const result = await compile(request({ history: { messages: [user("k", "a"), user("", "b")] }, identity: { policy: IdentityPolicy.RANDOM } }), testContext());
    expect(result.writeback!.messages).toEqual([expect.objectContaining({ segment: Segment.HISTORY, index: 1n, id: result.payload!.history[1]!.id })]);
    expect(result.payload!.history[1]!.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it("gives STABLE ids that repeat across compiles and survive trimming older history", async () => {
    const stable = { policy: IdentityPolicy.STABLE, prefix: "conv-1" };
    const turn = { raw: user("", "hello"), persistence: CurrentTurnPersistence.PERSIST_RAW };
    const messages = [user("", "one"), assistant("", "two"), user("", "same"), user("", "same")];
    const first = await compile(request({ history: { messages }, identity: stable, turnId: "t1", currentTurn: turn, pending: [assistant("", "p")] }), testContext());
    const second = await compile(request({ history: { messages }, identity: stable, turnId: "t1", currentTurn: turn, pending: [assistant("", "p")] }), testContext());
    expect(ids(first.payload!.history)).toEqual(ids(second.payload!.history));
    const [one, two, same1, same2, pending, current] = ids(first.payload!.history);
    expect(same1).not.toBe(same2);
    expect(current).toMatch(/^event:[0-9a-f]{64}$/);
    expect(pending).toMatch(/^event:/);
    const trimmed = await compile(request({ history: { messages: messages.slice(2) }, identity: stable }), testContext());
    expect(ids(trimmed.payload!.history)).toEqual([same1, same2]);
    expect([one, two]).not.toContain(same1);
    await rejects(compile(request({ identity: stable, currentTurn: turn }), testContext()), Code.InvalidArgument, /turn_id is required/);
  });

  it("gives raw and prompt-safe current turn one id and rejects two different ones", async () => {
    await rejects(compile(request({ currentTurn: { raw: user("a", "x"), promptSafe: user("b", "y") } }), testContext()), Code.InvalidArgument, /share one id, got "a" and "b"/);
  });
});

describe("current turn persistence", () => {
  for (const [policy, expected] of [
    [CurrentTurnPersistence.UNSPECIFIED, "raw secret 4111"],
    [CurrentTurnPersistence.PERSIST_RAW, "raw secret 4111"],
    [CurrentTurnPersistence.PERSIST_PROMPT_SAFE, "safe"],
    [CurrentTurnPersistence.PERSIST_NONE, undefined],
  ] as const) {
    it(`sends the prompt-safe form and persists ${CurrentTurnPersistence[policy]}`, async () => {
      const result = await compile(request({ history: { messages: [user("h", "before")] }, currentTurn: { raw: user("t", "raw secret 4111"), promptSafe: user("", "safe"), persistence: policy } }), testContext());
      expect(messageText(result.payload!.history.at(-1)!)).toBe("safe");
      expect(result.transformations["t"]).toMatchObject({ action: TransformationAction.FORMATTED, reason: TransformationReason.CURRENT_TURN_PROJECTION });
      const persisted = result.persistence!.history.map(messageText);
      const written = result.writeback!.snapshot!.history.map(messageText);
      expect(persisted).toEqual(expected === undefined ? ["before"] : ["before", expected]);
      expect(written).toEqual(persisted);
    });
  }
});

describe("tool-round validation and repair", () => {
  const broken = [user("u", "go"), ...toolRound("r", ["a", "b"], ["a"]), user("u2", "next")];
  it("rejects an invalid round naming the rule with REJECT (the default repairs it: prompt-tool-round-repair.test.ts)", async () => {
    await rejects(compile(request({ history: { messages: broken }, repair: ToolRoundRepair.REJECT }), testContext()), Code.InvalidArgument, /invalid tool round \(incomplete_tool_round\) at history\[1\] \(message "r-a"\)/);
  });
  it("drops incomplete rounds with DROP_INCOMPLETE", async () => {
    const result = await compile(request({ history: { messages: broken }, repair: ToolRoundRepair.DROP_INCOMPLETE }), testContext());
    expect(ids(result.payload!.history)).toEqual(["u", "u2"]);
    expect(result.transformations["r-a"]).toMatchObject({ action: TransformationAction.DROPPED, reason: TransformationReason.TOOL_ROUND_REPAIR });
    expect(ids(result.persistence!.history)).toEqual(["u", "u2"]);
  });
  it("closes missing results with CLOSE_AS_CANCELLED", async () => {
    const result = await compile(request({ history: { messages: broken }, repair: ToolRoundRepair.CLOSE_AS_CANCELLED }), testContext());
    const closing = result.payload!.history[3]!;
    expect(closing.role).toBe(Role.TOOL);
    expect(closing.parts[0]!.kind).toMatchObject({ case: "toolResult", value: { toolCallId: "b", isError: true } });
    expect(result.transformations["r-a"]).toMatchObject({ action: TransformationAction.FORMATTED, reason: TransformationReason.TOOL_ROUND_REPAIR });
    expect(result.source!.snapshot!.history).toHaveLength(broken.length);
  });
  it("accepts an open round at the tail of history followed by its results in pending", async () => {
    const open = toolRound("r", ["a", "b"], []);
    const result = await compile(request({ history: { messages: [user("u", "go"), ...open] }, pending: [message(Role.TOOL, "ra", toolResult("a", "A")), message(Role.TOOL, "rb", toolResult("b", "B"))] }), testContext());
    expect(ids(result.payload!.history)).toEqual(["u", "r-a", "ra", "rb"]);
    await rejects(compile(request({ pending: [message(Role.TOOL, "x", toolResult("zz", "A"))] }), testContext()), Code.InvalidArgument, /tool_result_without_call\) at pending\[0\]/);
  });
});

describe("presentation stages", () => {
  it("redacts the payload but never the source, writeback or persistence", async () => {
    const secret = user("u", "mail me at jane.doe@example.com or call +1 415 555 0100, card 4111 1111 1111 1111");
    const result = await compile(request({ history: { messages: [secret] }, hooks: [{ kind: { case: "redaction", value: { patterns: [RedactionPattern.EMAIL, RedactionPattern.PHONE, RedactionPattern.CARD_NUMBER] } } }] }), testContext());
    expect(messageText(result.payload!.history[0]!)).toBe("mail me at [REDACTED:email] or call [REDACTED:phone], card [REDACTED:card_number]");
    expect(result.transformations["u"]).toMatchObject({ action: TransformationAction.FORMATTED, reason: TransformationReason.TRANSFORM_HOOK });
    for (const kept of [result.persistence!.history[0]!, result.source!.snapshot!.history[0]!, result.writeback!.snapshot!.history[0]!]) {
      expect(messageText(kept)).toBe(messageText(secret));
    }
    await rejects(
      compile(request({ hooks: [{ kind: { case: "redaction", value: { customPatterns: [{ name: "bad", regex: "(" }] } } }] }), testContext()),
      Code.InvalidArgument,
      /hooks\[0\]\.redaction\.custom_patterns\[0\]\.regex is not a valid regular expression/,
    );
  });

  it("merges deferred blocks by REPLACE_BY_ORIGIN and DEDUPLICATE_BY_LAYER, resolving variables", async () => {
    const origin = (templateId: string, layerId = "") => ({ templateId, layerId });
    const memory = [
      { ...system("m1", "old persona"), origin: create(OriginSchemaHolder.schema, origin("persona")) },
      { ...system("m2", "tenant layer"), origin: create(OriginSchemaHolder.schema, origin("rules", "tenant")) },
      system("m3", "plain"),
    ];
    const result = await compile(
      request({
        memory: { messages: memory },
        resolveVars: { name: "Ada" },
        deferredBlocks: [
          { mergePolicy: MergePolicy.REPLACE_BY_ORIGIN, messages: [{ ...system("d1", "persona for {{name}} {{missing}}"), origin: create(OriginSchemaHolder.schema, origin("persona")) }] },
          { mergePolicy: MergePolicy.DEDUPLICATE_BY_LAYER, messages: [{ ...system("d2", "new tenant layer"), origin: create(OriginSchemaHolder.schema, origin("rules", "tenant")) }] },
        ],
      }),
      testContext(),
    );
    expect(ids(result.payload!.memory)).toEqual(["d2", "m3", "d1"]);
    expect(messageText(result.payload!.memory[2]!)).toBe("persona for Ada {{missing}}");
    expect(result.warnings.map((w) => w.code)).toEqual(["unknown_variable"]);
    expect(result.transformations["m1"]).toMatchObject({ action: TransformationAction.FORMATTED, reason: TransformationReason.REPLACED_BY_DEFERRED });
    expect(result.transformations["m2"]!.reason).toBe(TransformationReason.REPLACED_BY_DEFERRED);
    expect(ids(result.introduced.map((i) => i.message!))).toEqual(["d1", "d2"]);
    expect(ids(result.persistence!.memory)).toEqual(["d2", "m3", "d1"]);
  });

  it("applies role projection, join formatters and text replacements to the payload only", async () => {
    const peer = { ...user("peer", "hi from bot"), role: Role.ASSISTANT, actor: create(ActorSchemaHolder.schema, { kind: ActorKind.PEER_AGENT }) };
    const result = await compile(
      request({
        history: { messages: [peer, user("u", "long text")] },
        memory: { messages: [system("a", "A"), system("b", "B")] },
        roleProjection: { rules: [{ actorKind: ActorKind.PEER_AGENT, role: Role.USER }] },
        formatters: [{ segment: Segment.MEMORY, kind: { case: "join", value: { separator: " | " } } }],
        textReplacements: [{ segment: Segment.HISTORY, messageId: "u", text: "short" }],
      }),
      testContext(),
    );
    expect(result.payload!.history.map((m) => [m.id, m.role, messageText(m)])).toEqual([["peer", Role.USER, "hi from bot"], ["u", Role.USER, "short"]]);
    expect(result.payload!.memory.map(messageText)).toEqual(["A | B"]);
    expect(result.transformations["a"]!.reason).toBe(TransformationReason.REPLACED_BY_FORMATTER);
    expect(result.transformations["peer"]!.reason).toBe(TransformationReason.ROLE_PROJECTION);
    expect(result.transformations["u"]!.reason).toBe(TransformationReason.TEXT_REPLACEMENT);
    expect(result.persistence!.history.map((m) => [m.role, messageText(m)])).toEqual([[Role.ASSISTANT, "hi from bot"], [Role.USER, "long text"]]);
    expect(ids(result.persistence!.memory)).toEqual(["a", "b"]);
    await rejects(compile(request({ textReplacements: [{ segment: Segment.HISTORY, messageId: "nope", text: "x" }] }), testContext()), Code.InvalidArgument, /text_replacements\[0\]\.message_id: no message "nope" in segment history/);
  });

  it("applies text replacements in request order, across segments, the last one for a message winning", async () => {
    const history = Array.from({ length: 300 }, (_, index) => user(`h${index}`, `history ${index}`));
    const textReplacements = [
      ...history.map((message, index) => ({ segment: Segment.HISTORY, messageId: message.id, text: `first ${index}` })),
      { segment: Segment.HISTORY, messageId: "h7", text: "second" },
      { segment: Segment.MEMORY, messageId: "b", text: "memory swap" },
    ];
    const result = await compile(request({ history: { messages: history }, memory: { messages: [system("a", "A"), system("b", "B")] }, textReplacements }), testContext());
    const texts = result.payload!.history.map(messageText);
    expect(texts[0]).toBe("first 0");
    expect(texts[7]).toBe("second");
    expect(texts[299]).toBe("first 299");
    expect(result.payload!.memory.map(messageText)).toEqual(["A", "memory swap"]);
    // What is persisted keeps the originals.
    expect(messageText(result.persistence!.history[7]!)).toBe("history 7");
    expect(result.transformations["h7"]!.reason).toBe(TransformationReason.TEXT_REPLACEMENT);
  });

  it("shows artifacts only for their turn and experiences as one system block", async () => {
    const artifacts = [
      { id: "doc", payload: { text: "retrieved" }, lifecycle: ArtifactLifecycle.TURN_BOUND, boundTurnId: "t1" },
      { id: "mem", payload: { text: "always" } },
      { id: "big", payload: { text: "x".repeat(400) }, budget: { tokenLimit: 10n } },
    ];
    const turn1 = await compile(request({ artifacts, turnId: "t1", experiences: { experiences: [{ id: "exp_1", text: "likes tea" }] } }), testContext());
    expect(ids(turn1.payload!.memory)).toEqual(["artifact:doc", "artifact:mem"]);
    expect(messageText(turn1.payload!.system[0]!)).toBe("<experience>\n- [exp_1] likes tea");
    expect(turn1.warnings.map((w) => w.code)).toEqual(["artifact_over_budget"]);
    expect(turn1.persistence!.memory).toEqual([]);
    const turn2 = await compile(request({ artifacts, turnId: "t2" }), testContext());
    expect(ids(turn2.payload!.memory)).toEqual(["artifact:mem"]);
  });
});

describe("targets and views", () => {
  it("validates targets", async () => {
    const cases: [CompileRequest["targets"], RegExp][] = [
      [[{ name: "a", view: "llm_xml" }, { name: "a", view: "llm_xml" }] as never, /targets\[1\]\.name: duplicate target name "a"/],
      [[{ name: "a", view: "nope" }] as never, /targets\[0\]\.view: unknown view "nope"/],
      [[{ name: "a", view: "llm_xml", segments: [Segment.HISTORY] }] as never, /cannot be combined with segments/],
      [[{ name: "a", segments: [7] }] as never, /targets\[0\]\.segments\[0\]: unknown segment 7/],
      [[{ name: "" }] as never, /targets\[0\]\.name is required/],
    ];
    for (const [targets, pattern] of cases) await rejects(compile(request({ targets }), testContext()), Code.InvalidArgument, pattern);
  });

  it("names the target whose budget refuses, own or inherited", async () => {
    const history = { messages: [user("u1", "first"), message(Role.ASSISTANT, "a1", "answer"), user("u2", "second")] };
    await rejects(
      compile(request({ history, targets: [{ name: "side", segments: [Segment.HISTORY], budget: { maxTokens: 2n ** 60n, estimator: tenPerMessage } }] }), testContext()),
      Code.InvalidArgument,
      /^targets\[0\] \("side"\): budget\.max_tokens must be from 0 to 9007199254740991/,
    );
    // The main payload fits 100 tokens with room; the target, without the tools segment's share, would too,
    // but its latest user message alone is over a 5-token budget of its own.
    await rejects(
      compile(request({ history, targets: [{ name: "side", segments: [Segment.HISTORY], budget: { maxTokens: 5n, estimator: tenPerMessage } }] }), testContext()),
      Code.ResourceExhausted,
      /^targets\[0\] \("side"\): budget exceeded: the latest user message "u2"/,
    );
    // The main payload drops the long latest user message for the current turn; the target has no
    // current turn, so that message is protected there, and the inherited budget cannot hold it.
    const long = { messages: [user("u1", "x".repeat(10)), message(Role.ASSISTANT, "a1", "y"), user("u2", "z".repeat(400))] };
    await rejects(
      compile(request({ history: long, currentTurn: { raw: user("now", "now") }, budget: { maxTokens: 60n, estimator: { kind: EstimatorKind.CHARS, charsPerToken: 4 } }, targets: [{ name: "side", segments: [Segment.HISTORY] }] }), testContext()),
      Code.ResourceExhausted,
      /^targets\[0\] \("side"\) with the request's budget: budget exceeded/,
    );
  });

  it("renders views without the current turn and without mutating the input", async () => {
    const input = request({
      history: { messages: [user("u", "a < b & c"), message(Role.ASSISTANT, "a", "calling", call("c1", "search")), message(Role.TOOL, "t", toolResult("c1", "found"))] },
      currentTurn: { raw: user("now", "secret now") },
      targets: [{ name: "xml", view: "llm_xml" }, { name: "flat", view: "flat_classifier" }, { name: "recent", segments: [Segment.HISTORY], budget: { maxTokens: 10n, estimator: tenPerMessage } }],
    });
    const before = clone(CompileRequestSchema, input);
    const result = await compile(input, testContext());
    expect(equals(CompileRequestSchema, input, before)).toBe(true);
    expect(result.projections[0]!.text).toBe("<user>a &lt; b &amp; c</user>\n<assistant>calling\n[tool_call:search]</assistant>\n<tool>[tool_result:found]</tool>\n");
    expect(result.projections[1]!.text).toBe("user: a < b & c\nassistant: calling\n[tool_call:search]\ntool: [tool_result:found]\n");
    // A target has no current turn, so its latest user message is protected; the round goes.
    expect(ids(result.projections[2]!.messages)).toEqual(["u"]);
    expect(result.projections[2]!.transformations["a"]!.action).toBe(TransformationAction.DROPPED);
    expect(result.transformations["a"]!.action).toBe(TransformationAction.PASSED);
  });
});

describe("stateful inputs", () => {
  it("inherits absent segments and clears present empty ones", async () => {
    const stored = { $typeName: "contextd.v1.ConversationState" as const, conversationId: "c", version: 3n, system: [system("s", "sys")], history: [user("h", "hist")], memory: [system("m", "mem")], tools: [], artifacts: [], experiences: [], toolDefinitions: [], lastExperienceNumber: 0n, title: "", labels: {}, idleTtlMs: 0n };
    const result = await compile(request({ conversationId: "c", memory: { messages: [] } }), testContext({ stored }));
    expect(ids(result.payload!.system)).toEqual(["s"]);
    expect(ids(result.payload!.history)).toEqual(["h"]);
    expect(result.payload!.memory).toEqual([]);
    expect(result.version).toBe(3n);
  });
});

// Origin/Actor schemas, imported lazily to keep the builders above short.
import { ActorSchema, OriginSchema } from "#gen/contextd/v1/message_pb";
const OriginSchemaHolder = { schema: OriginSchema };
const ActorSchemaHolder = { schema: ActorSchema };
