// The client against a real sidecar on a real port, over both protocols: keyed commits, conflicts,
// error details, lost answers, the one-RPC turn, provider responses and compare-and-retry.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Client,
  Code,
  ContextdError,
  OutcomeUnknownError,
  ToolRound,
  VersionConflictError,
  appendAssistant,
  appendMessages,
  appendProviderResponse,
  appendUser,
  remember,
  setMetadata,
  pruneHistory,
  systemText,
  textPayload,
  toolCall,
  type ClientOptions,
} from "@contextd/client";
import { CompileResultPart, ConversationOrder, EstimatorKind, Provider, Segment, type Message } from "@contextd/client/v1";
import { freshId, startSidecar, type Sidecar } from "./sidecar.ts";

const protocols: ["grpc" | "connect"][] = [["grpc"], ["connect"]];
const openai = { provider: Provider.OPENAI_CHAT, model: "gpt-4o" };

function shape(messages: Message[]): string {
  return messages.map((m) => `${["UNSPECIFIED", "SYSTEM", "DEVELOPER", "USER", "ASSISTANT", "TOOL"][m.role]}:${m.parts.map((p) => p.kind.case).join(",")}`).join(" ");
}

let sidecar: Sidecar;
const clients: Client[] = [];
function dial(options: ClientOptions = {}): Client {
  const client = new Client({ address: sidecar.address, ...options });
  clients.push(client);
  return client;
}

before(async () => {
  sidecar = await startSidecar();
});
after(async () => {
  for (const client of clients) client.close();
  await sidecar.stop();
});

for (const [protocol] of protocols) {
  describe(`over ${protocol}`, () => {
    test("a commit without a key gets one; the same key replays; a stale version names the current one", async () => {
      const client = dial({ protocol });
      await client.waitReady();
      const conversationId = freshId("commit");
      const request = { conversationId, deltas: [appendUser("hello"), appendAssistant("hi")] };
      const first = await client.commit(request);
      assert.equal(first.version, 1n);
      assert.equal(first.replayed, false);
      const keyed = await client.commit({ ...request, idempotencyKey: "k-" + conversationId });
      const again = await client.commit({ ...request, idempotencyKey: "k-" + conversationId });
      assert.equal(keyed.version, 2n);
      assert.ok(again.replayed && again.version === 2n, "the same key is not applied twice");

      const stale = await client.commit({ conversationId, expectedVersion: 0n, deltas: [remember("late")] }).catch((e: unknown) => e);
      assert.ok(stale instanceof VersionConflictError, String(stale));
      assert.equal(stale.code, Code.Aborted);
      assert.equal(stale.currentVersion, 2n);
      assert.equal(stale.reason, "VERSION_CONFLICT");
      assert.equal(stale.errorMetadata["current_version"], "2");
      const state = await client.getState({ conversationId });
      assert.equal(state.state!.version, 2n);
      assert.equal(shape(state.state!.history), "USER:text ASSISTANT:text USER:text ASSISTANT:text");
    });

    test("a usage report corrects the next compile's budget and the result says so", async () => {
      const client = dial({ protocol });
      const model = freshId("calibrated");
      const history = Array.from({ length: 12 }, (_, index) => ({ id: `m${index}`, role: index % 2 === 0 ? 3 : 4, parts: [{ kind: { case: "text" as const, value: { text: `message ${index}` } } }] }));
      const request = { history: { messages: history }, budget: { maxTokens: 100n, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } }, render: { provider: Provider.ANTHROPIC_MESSAGES, model }, include: [CompileResultPart.PAYLOAD] };
      const first = (await client.compile(request)).result!;
      const calibration = first.calibration!;
      assert.equal(calibration.correction, 1);
      assert.equal(calibration.estimatedTokens, 100n);
      // The provider counted 125 for 100 estimated: later budgets hold estimates to floor(100 / 1.25) = 80.
      const reported = await client.reportUsage({ provider: calibration.provider, model: calibration.model, estimator: calibration.estimator, estimatedTokens: calibration.estimatedTokens, actualInputTokens: 125n });
      assert.equal(reported.correction, 1.25);
      assert.equal(reported.reports, 1n);
      const second = (await client.compile(request)).result!;
      assert.deepEqual(second.payload!.history.map((m) => m.id), history.slice(4).map((m) => m.id));
      assert.equal(second.usage!.limit, 80n);
      assert.equal(second.calibration!.correctedTokens, 100n);
      assert.equal(second.calibration!.meanAbsoluteRelativeError, 0.2);
    });

    test("errors carry the ErrorInfo reason, its metadata and the BadRequest field violations", async () => {
      const client = dial({ protocol });
      const conversationId = freshId("errors");
      const invalid = await client.commit({ conversationId, deltas: [appendUser("Weather?"), appendAssistant("", toolCall("k1", "get_weather", "city=Oslo"))] }).catch((e: unknown) => e);
      assert.ok(invalid instanceof ContextdError && invalid.code === Code.InvalidArgument, String(invalid));
      assert.equal(invalid.reason, "TOOL_ARGUMENTS_INVALID");
      assert.equal(invalid.errorMetadata["tool_call_id"], "k1");
      assert.equal(invalid.fieldViolations.length, 1);
      assert.equal(invalid.fieldViolations[0]!.field, "deltas[1].append_assistant.message.parts[0].tool_call.arguments");
      assert.match(invalid.fieldViolations[0]!.description, /tool call "k1" must be a JSON object/);

      const empty = await client.compile({ conversationId: freshId("empty"), render: openai }).catch((e: unknown) => e);
      assert.ok(empty instanceof ContextdError && empty.code === Code.FailedPrecondition && empty.reason === "CONVERSATION_EMPTY", String(empty));
    });

    test("turn commits what the agent produced and compiles the next prompt in one RPC", async () => {
      const client = dial({ protocol });
      // The typed payload beside the rendered body (a rendered compile sends it only when asked).
      const request = { conversationId: freshId("turns"), render: openai, include: [CompileResultPart.PAYLOAD] };
      let result = await client.turn(request, 0n, [appendMessages(Segment.SYSTEM, systemText("You are terse.")), appendUser("Weather in Oslo?")]);
      assert.equal(result.committedVersion, 1n);
      const round = new ToolRound("", toolCall("call_1", "weather", '{"city":"Oslo"}')).answer("call_1", textPayload("4°C")).delta();
      for (const deltas of [[round], [appendAssistant("4°C in Oslo."), appendUser("And tomorrow?")]]) {
        const previous: bigint = result.committedVersion;
        result = await client.turn(request, previous, deltas);
        assert.equal(result.committedVersion, previous + 1n);
        assert.equal(result.version, previous + 1n);
      }
      assert.equal(shape(result.payload!.history), "USER:text ASSISTANT:toolCall TOOL:toolResult ASSISTANT:text USER:text");
      const body = new TextDecoder().decode(result.rendered!.json);
      for (const part of ["And tomorrow?", "call_1", "You are terse."]) assert.ok(body.includes(part), `rendered body lacks ${part}`);

      await assert.rejects(client.turn({ ...request, currentTurn: { raw: systemText("?") } }, result.committedVersion, []), /appendUser/);
      await assert.rejects(client.turn(request, 1n, [appendAssistant("late")]), VersionConflictError);
      const state = await client.getState({ conversationId: request.conversationId });
      assert.equal(state.state!.version, result.committedVersion, "nothing of the stale turn is stored");
    });

    test("a write whose answer is over the receive limit is applied once", async () => {
      const reader = dial({ protocol });
      const small = dial({ protocol, maxReceiveBytes: 2048 });
      const conversationId = freshId("lost-answer");
      const big = "a long question ".repeat(400);
      const committed = await small.commit({ conversationId, expectedVersion: 0n, includeState: true, deltas: [appendUser(big)] });
      assert.equal(committed.version, 1n);
      assert.ok(committed.replayed, "answered from the key's record, asking for the version only");

      const turned = await small.turn(
        { conversationId, budget: { maxTokens: 200n, estimator: { kind: EstimatorKind.CHARS } }, include: [CompileResultPart.SOURCE] },
        1n,
        [appendAssistant("ok"), appendUser("short")],
      );
      assert.equal(turned.committedVersion, 2n);
      assert.ok(turned.payload !== undefined);
      assert.ok(turned.warnings.some((w) => w.code === "idempotent_replay"));

      const tiny = dial({ protocol, maxReceiveBytes: 1 });
      const request = { conversationId, deltas: [appendAssistant("one answer")] };
      const unknown = await tiny.commit(request).catch((e: unknown) => e);
      assert.ok(unknown instanceof OutcomeUnknownError, String(unknown));
      assert.equal(unknown.code, Code.ResourceExhausted);
      assert.ok(unknown.idempotencyKey.startsWith("contextd-ts-"));
      const again = await reader.commit({ ...request, idempotencyKey: unknown.idempotencyKey });
      assert.ok(again.replayed && again.version === 3n);
      const state = await reader.getState({ conversationId });
      assert.equal(shape(state.state!.history), "USER:text ASSISTANT:text USER:text ASSISTANT:text");
    });

    test("the default limits carry a 5 MiB commit and a compile answer over 4 MiB", async () => {
      const client = dial({ protocol });
      const conversationId = freshId("large");
      const deltas = [];
      for (let i = 0; i < 5; i++) deltas.push(appendUser(String.fromCharCode(97 + i).repeat(1 << 20)), appendAssistant("noted"));
      const committed = await client.commit({ conversationId, deltas });
      const compiled = await client.compile({ conversationId, render: openai, include: [CompileResultPart.PAYLOAD] });
      assert.equal(compiled.result!.payload!.history.length, 10);
      assert.equal(compiled.result!.version, committed.version);
      assert.ok(compiled.result!.rendered!.json.length > 5 * (1 << 20), "the answer carries the 5 MiB twice (payload and rendered body)");
    });

    test("appendProviderResponse stores a provider's answer as the assistant turn", async () => {
      const client = dial({ protocol });
      const conversationId = freshId("provider");
      const completion = {
        id: "chatcmpl-1",
        object: "chat.completion",
        model: "gpt-4o",
        choices: [{ index: 0, finish_reason: "tool_calls", message: { role: "assistant", content: null, tool_calls: [{ id: "call_9", type: "function", function: { name: "weather", arguments: '{"city":"Oslo"}' } }] } }],
      };
      await client.commit({ conversationId, deltas: [appendUser("Weather?"), appendProviderResponse(Provider.OPENAI_CHAT, completion)] });
      const state = await client.getState({ conversationId });
      assert.equal(shape(state.state!.history), "USER:text ASSISTANT:toolCall");
      const call = state.state!.history[1]!.parts[0]!.kind;
      assert.ok(call.case === "toolCall" && call.value.id === "call_9" && call.value.name === "weather");
    });

    test("commitWithRetry reloads and re-applies after a conflict", async () => {
      const client = dial({ protocol });
      const conversationId = freshId("cas");
      await client.commit({ conversationId, deltas: [remember("fact 0")] });
      let calls = 0;
      const committed = await client.commitWithRetry(conversationId, async (state) => {
        calls++;
        // Another writer gets there first once.
        if (calls === 1) await client.commit({ conversationId, expectedVersion: state.version, deltas: [remember("other writer")] });
        return [remember(`fact at ${state.version}`)];
      });
      assert.equal(calls, 2);
      assert.equal(committed.version, 3n);
      const state = await client.getState({ conversationId });
      assert.deepEqual(state.state!.experiences.map((e) => e.text), ["fact 0", "other writer", "fact at 2"]);
    });
  });
}

test("setMetadata labels conversations; listConversations lists them newest update first, filtered by label, with title and update time", async () => {
  const client = dial();
  await client.waitReady();
  const prefix = freshId("listed") + "/";
  const since = BigInt(Date.now());
  await client.commit({ conversationId: prefix + "first", deltas: [appendUser("one"), setMetadata({ title: "First", labels: { app: "demo" } })] });
  await client.commit({ conversationId: prefix + "skipped", deltas: [setMetadata({ labels: { app: "other" } })] });
  await client.commit({ conversationId: prefix + "second", deltas: [setMetadata({ title: "Second", labels: { app: "demo", draft: "yes" } })] });
  await client.commit({ conversationId: prefix + "second", deltas: [setMetadata({ removeLabels: ["draft"] })] });
  const page = await client.listConversations({ prefix, labels: { app: "demo" }, order: ConversationOrder.UPDATED_DESC, updatedSinceUnixMs: since });
  assert.deepEqual(
    page.conversations.map((summary) => [summary.conversationId.slice(prefix.length), summary.title, summary.labels]),
    [
      ["second", "Second", { app: "demo" }],
      ["first", "First", { app: "demo" }],
    ],
  );
  assert.ok(page.conversations[0]!.updatedAtUnixMs >= page.conversations[1]!.updatedAtUnixMs);
  assert.ok(page.conversations[1]!.createdAtUnixMs >= since);
  assert.equal(page.nextPageToken, "");
});

test("pruneHistory and setMetadata({ idleTtlMs }) commit; exportConversations streams a prefix; deleteConversation(s) delete it", async () => {
  const client = dial();
  await client.waitReady();
  const prefix = freshId("retention") + "/";
  for (const name of ["a", "b"]) await client.commit({ conversationId: prefix + name, deltas: [appendUser("one"), appendUser("two")] });
  const pruned = await client.commit({ conversationId: prefix + "a", expectedVersion: 1n, deltas: [pruneHistory({ maxMessages: 1 }), setMetadata({ idleTtlMs: -1n })], includeState: true });
  assert.deepEqual(pruned.state!.history.map((message) => message.provenance?.kind.case), ["summary", undefined]);
  assert.equal(pruned.state!.idleTtlMs, -1n);
  const exported: [string, bigint][] = [];
  for await (const item of client.exportConversations({ prefix })) exported.push([item.state!.conversationId.slice(prefix.length), item.state!.version]);
  assert.deepEqual(exported, [["a", 2n], ["b", 1n]]);
  await assert.rejects(client.deleteConversation({ conversationId: prefix + "a", expectedVersion: 1n }), VersionConflictError);
  assert.equal((await client.deleteConversation({ conversationId: prefix + "a", expectedVersion: 2n })).deletedVersion, 2n);
  assert.deepEqual(await client.deleteConversations({ prefix }).then((page) => [page.deleted, page.nextPageToken]), [1, ""]);
  assert.equal((await client.getState({ conversationId: prefix + "b" })).state!.version, 0n);
});

test("a commit whose deadline runs out is of unknown outcome; sent again with its key it is stored once", async () => {
  const client = dial();
  const conversationId = freshId("deadline");
  await client.commit({ conversationId, deltas: [remember("first")] });
  const request = { conversationId, deltas: [appendUser("maybe"), appendAssistant("ok")] };
  // A frozen sidecar cannot answer: the deadline runs out whatever the machine's speed. Thawed, it
  // may still apply the request it had received, which is why the outcome is unknown.
  sidecar.process.kill("SIGSTOP");
  let unknown: unknown;
  try {
    unknown = await client.commit(request, { timeoutMs: 300 }).catch((e: unknown) => e);
  } finally {
    sidecar.process.kill("SIGCONT");
  }
  assert.ok(unknown instanceof OutcomeUnknownError, String(unknown));
  assert.equal(unknown.code, Code.DeadlineExceeded);
  await client.commit({ ...request, idempotencyKey: unknown.idempotencyKey });
  const again = await client.commit({ ...request, idempotencyKey: unknown.idempotencyKey });
  assert.ok(again.replayed);
  const state = await client.getState({ conversationId });
  assert.equal(shape(state.state!.history), "USER:text ASSISTANT:text");
});

test("a commit to a sidecar that does not answer is reported as of unknown outcome, naming its key", async () => {
  const client = dial({ address: "127.0.0.1:9", retry: { maxAttempts: 3, initialBackoffMs: 1, maxBackoffMs: 5, multiplier: 2 } });
  const unknown = await client.commit({ conversationId: "nowhere", deltas: [remember("x")], idempotencyKey: "mine" }).catch((e: unknown) => e);
  assert.ok(unknown instanceof OutcomeUnknownError, String(unknown));
  assert.equal(unknown.code, Code.Unavailable);
  assert.equal(unknown.idempotencyKey, "mine");
  // A read is retried too and then fails with the code itself.
  const read = await client.getState({ conversationId: "nowhere" }).catch((e: unknown) => e);
  assert.ok(read instanceof ContextdError && !(read instanceof OutcomeUnknownError) && read.code === Code.Unavailable);
});
