// Streams against a real sidecar: Watch and WatchEvents as async iterators, CompileStream's
// events, CompileSession's summaries, and the bearer token option.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, Code, ContextdError, ToolRound, appendAssistant, appendUser, assistantText, remember, textPayload, toolCall } from "@contextd/client";
import { BudgetStrategy, CompileResultPart, EstimatorKind, Provider, SummaryFactKind, type Change } from "@contextd/client/v1";
import { freshId, sidecarForFile, startSidecar } from "./sidecar.ts";

const file = sidecarForFile();

test("watch yields the stored changes after fromVersion, then live ones, until the loop stops", async () => {
  const conversationId = freshId("watch");
  await file.client.commit({ conversationId, deltas: [remember("one")] });
  await file.client.commit({ conversationId, deltas: [remember("two")] });
  const seen: Change[] = [];
  for await (const change of file.client.watch({ conversationId, fromVersion: 0n })) {
    seen.push(change);
    if (change.version === 2n) await file.client.commit({ conversationId, deltas: [remember("three")], idempotencyKey: "live-" + conversationId });
    if (change.version === 3n) break;
  }
  assert.deepEqual(seen.map((c) => c.version), [1n, 2n, 3n]);
  assert.equal(seen[2]!.idempotencyKey, "live-" + conversationId);
});

test("watchEvents yields the observer events of compiles; compileStream calls back with them before the result", async () => {
  const conversationId = freshId("events");
  await file.client.commit({ conversationId, deltas: [appendUser("hello"), appendAssistant("hi"), appendUser("again")] });
  const abort = new AbortController();
  const events = file.client.watchEvents({ conversationId }, { signal: abort.signal });
  const first = events.next();
  // The subscription is open once the server has it; compile until an event arrives.
  const streamed: string[] = [];
  let result;
  let received;
  for (let tries = 0; received === undefined && tries < 50; tries++) {
    result = await file.client.compileStream({ request: { conversationId, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" }, include: [CompileResultPart.PAYLOAD] } }, (event) => streamed.push(event.event.case ?? ""));
    received = await Promise.race([first, new Promise<undefined>((resolve) => setTimeout(resolve, 100, undefined))]);
  }
  assert.ok(received && !received.done && received.value.event !== undefined, "no telemetry event arrived");
  assert.equal(result!.payload!.history.length, 3);
  assert.ok(streamed.length > 0, "compileStream passed no events");
  abort.abort();
  await assert.rejects(events.next(), (error: unknown) => error instanceof ContextdError && error.code === Code.Canceled);
});

test("compileSession asks for a summary, stores it and remembers the facts in the same commit", async () => {
  const conversationId = freshId("session");
  const round = new ToolRound("", toolCall("c1", "search", '{"q":"a"}'), toolCall("c2", "search", '{"q":"b"}')).answer("c1", textPayload("a")).answer("c2", textPayload("b")).delta();
  const stored = await file.client.commit({
    conversationId,
    includeState: true,
    deltas: [appendUser("look up a and b"), round, appendUser("thanks"), appendAssistant("you're welcome"), appendUser("one more"), appendAssistant("sure")],
  });
  const history = stored.state!.history.map((m) => m.id);
  let asked: string[] = [];
  let target = 0n;
  const result = await file.client.compileSession(
    {
      conversationId,
      budget: { maxTokens: 50n, strategy: BudgetStrategy.SUMMARIZE, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } },
      commit: { expectedVersion: stored.version },
    },
    async (messages, targetTokens) => {
      asked = messages.map((m) => m.id);
      target = targetTokens;
      return { summary: assistantText("The user looked up a and b."), remember: ["the user likes short answers"] };
    },
  );
  assert.deepEqual(asked, history.slice(0, 6));
  assert.equal(target, 30n);
  const head = result.payload!.history[0]!;
  assert.ok(head.provenance?.kind.case === "summary");
  assert.deepEqual(result.payload!.history.slice(1).map((m) => m.id), history.slice(6));
  const state = await file.client.getState({ conversationId });
  assert.equal(state.state!.version, stored.version + 1n);
  assert.deepEqual(state.state!.experiences.map((e) => e.text), ["the user likes short answers"]);

  // A summarize function that fails cancels the session; nothing is committed.
  await assert.rejects(
    file.client.compileSession({ conversationId, budget: { maxTokens: 30n, strategy: BudgetStrategy.SUMMARIZE, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } }, commit: { expectedVersion: state.state!.version } }, () => {
      throw new Error("model down");
    }),
    (error: unknown) => error instanceof Error && /summarize \d+ messages .*model down/.test(error.message) && (error.cause as Error).message === "model down",
  );
  assert.equal((await file.client.getState({ conversationId })).state!.version, state.state!.version);
});

test("compileSession hands the summarizer the template and the facts of the messages to summarise", async () => {
  const conversationId = freshId("evidence");
  const round = new ToolRound("", toolCall("c1", "run_tests", '{"command":"npm test -- src/app.ts"}')).answer("c1", textPayload("FAIL src/app.test.ts")).delta();
  const stored = await file.client.commit({
    conversationId,
    deltas: [appendUser("the tests in src/app.ts fail"), round, appendAssistant("one test fails"), appendUser("fix it"), appendAssistant("fixed")],
  });
  let seen: { sections: string[]; facts: string[]; truncated: boolean; firstMessage: string } | undefined;
  await file.client.compileSession(
    { conversationId, budget: { maxTokens: 30n, strategy: BudgetStrategy.SUMMARIZE, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } }, commit: { expectedVersion: stored.version } },
    (messages, _targetTokens, asked) => {
      seen = {
        sections: asked.template!.sections.map((section) => section.key),
        facts: asked.facts.map((fact) => `${SummaryFactKind[fact.kind]} ${fact.text}`),
        truncated: asked.factsTruncated,
        firstMessage: messages[0]!.id,
      };
      return assistantText(`Tests failed in src/app.ts (${asked.facts.length} facts kept).`);
    },
  );
  assert.ok(seen, "the summarizer was not called");
  assert.deepEqual(seen.sections, ["goal", "decisions", "open_questions", "files", "commands", "errors"]);
  assert.ok(seen.facts.includes("FILE_PATH src/app.ts"), seen.facts.join("; "));
  assert.ok(seen.facts.includes("COMMAND npm test -- src/app.ts"), seen.facts.join("; "));
  assert.ok(seen.facts.includes("TOOL_NAME run_tests"), seen.facts.join("; "));
  assert.equal(seen.truncated, false);
});

test("the token option sends a bearer token; without it an authenticated sidecar refuses the call", async () => {
  const guarded = await startSidecar([], { CONTEXTD_AUTH_TOKENS: "secret-token-0123456789" });
  const anonymous = new Client({ address: guarded.address, retry: { maxAttempts: 1, initialBackoffMs: 1, maxBackoffMs: 1, multiplier: 1 } });
  const authorized = new Client({ address: guarded.address, token: "secret-token-0123456789" });
  try {
    const refused = await anonymous.getState({ conversationId: "x" }).catch((e: unknown) => e);
    assert.ok(refused instanceof ContextdError && refused.code === Code.Unauthenticated, String(refused));
    const committed = await authorized.commit({ conversationId: freshId("auth"), deltas: [remember("ok")] });
    assert.equal(committed.version, 1n);
  } finally {
    anonymous.close();
    authorized.close();
    await guarded.stop();
  }
});
