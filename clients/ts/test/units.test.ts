// Unit tests of the pieces that need no sidecar: builders, backoff bounds, error conversion.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ConnectError } from "@connectrpc/connect";
import {
  Code,
  ContextdError,
  DEFAULT_RETRY_POLICY,
  OutcomeUnknownError,
  ToolRound,
  VersionConflictError,
  appendProviderResponse,
  appendUser,
  backoffBound,
  isOutcomeUnknown,
  isResponseTooLarge,
  textPayload,
  toContextdError,
  toolCall,
} from "@contextd/client";
import { Provider, Role } from "@contextd/client/v1";

test("a tool round lists the assistant turn and one result per call, in call order", () => {
  const round = new ToolRound("checking", toolCall("c1", "weather", '{"city":"Oslo"}'), toolCall("c2", "clock", "{}"))
    .answer("c2", textPayload("09:30"))
    .answer("c1", textPayload("4°C"));
  const [assistant, ...results] = round.messages();
  assert.equal(assistant!.role, Role.ASSISTANT);
  assert.deepEqual(assistant!.parts.map((p) => p.kind.case), ["text", "toolCall", "toolCall"]);
  assert.deepEqual(results.map((m) => (m.parts[0]!.kind.case === "toolResult" ? m.parts[0]!.kind.value.toolCallId : "")), ["c1", "c2"]);
  assert.equal(round.delta().operation.case, "appendToolRound");
});

test("a tool round with a call unanswered or an answer to no call is refused", () => {
  assert.throws(() => new ToolRound("", toolCall("c1", "weather", "{}")).messages(), /calls without a result: c1 \(weather\)/);
  assert.throws(() => new ToolRound("", toolCall("c1", "weather", "{}")).answer("c1", textPayload("x")).answer("c9", textPayload("y")).messages(), /result for unknown call "c9"/);
});

test("appendUser takes text or a message; appendProviderResponse takes text, bytes or an object", () => {
  const delta = appendUser("hi");
  assert.equal(delta.operation.case === "appendUser" && delta.operation.value.message?.role, Role.USER);
  const body = { choices: [{ message: { role: "assistant", content: "ok" } }] };
  for (const given of [body, JSON.stringify(body), new TextEncoder().encode(JSON.stringify(body))]) {
    const d = appendProviderResponse(Provider.OPENAI_CHAT, given);
    assert.ok(d.operation.case === "appendProviderResponse");
    assert.equal(d.operation.value.provider, Provider.OPENAI_CHAT);
    assert.deepEqual(JSON.parse(new TextDecoder().decode(d.operation.value.json)), body);
  }
});

test("backoff bounds grow by the multiplier up to the cap", () => {
  assert.deepEqual([1, 2, 3, 4, 5, 6].map((n) => backoffBound(DEFAULT_RETRY_POLICY, n)), [100, 200, 400, 800, 1600, 2000]);
});

test("a conflict's current version is read from the trailer, else from the message", () => {
  const conflict = toContextdError(new ConnectError("expected version 0", Code.Aborted, { "contextd-current-version": "7" }));
  assert.ok(conflict instanceof VersionConflictError && conflict instanceof ConnectError);
  assert.equal(conflict.currentVersion, 7n);
  assert.equal((toContextdError(new ConnectError("expected version 1, current version 4", Code.Aborted)) as VersionConflictError).currentVersion, 4n);
  assert.equal((toContextdError(new ConnectError("no version", Code.Aborted)) as VersionConflictError).currentVersion, undefined);
  assert.equal(conflict.reason, "", "no ErrorInfo, no reason");
});

test("only a locally refused answer counts as too large; UNAVAILABLE and DEADLINE_EXCEEDED leave a write's outcome unknown", () => {
  const local = toContextdError(new ConnectError("message size 3000 is larger than configured readMaxBytes 2048", Code.ResourceExhausted));
  assert.ok(isResponseTooLarge(local) && isOutcomeUnknown(local));
  const refused = toContextdError(new ConnectError("request message of 9 bytes is over the limit of 8 bytes (--max-request-bytes)", Code.ResourceExhausted));
  assert.ok(!isResponseTooLarge(refused) && !isOutcomeUnknown(refused));
  assert.ok(isOutcomeUnknown(toContextdError(new ConnectError("gone", Code.Unavailable))));
  assert.ok(isOutcomeUnknown(toContextdError(new ConnectError("late", Code.DeadlineExceeded))));
  assert.ok(!isOutcomeUnknown(toContextdError(new ConnectError("bad", Code.InvalidArgument))));
  const unknown = new OutcomeUnknownError("k1", local);
  assert.ok(unknown instanceof ContextdError);
  assert.equal(unknown.code, Code.ResourceExhausted);
  assert.match(unknown.message, /idempotency key "k1"/);
});
