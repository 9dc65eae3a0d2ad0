import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { Role } from "#gen/contextd/v1/message_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import { Codec } from "../../src/codec/codec.js";
import { MessageListLineage } from "../../src/core/model/message-list-lineage.js";
import { CommitEngine, type CommitIo, type CommitRead, type CommitWrite } from "../../src/store/commit-engine.js";
import { emptyConversationState } from "../../src/store/commit-plan.js";
import { currentVersionTrailer } from "../../src/store/store-errors.js";
import { appendHistory, textMessage } from "./fixtures.js";

// The engine's retry and outcome rules, against a scripted store I/O (the contract suite runs it
// on the real stores). `stored` is what the "store" holds; `answers` script the conditional writes.
function scriptedStore(answers: Exclude<CommitWrite["outcome"], "whole">[]) {
  let stored: ConversationState = emptyConversationState("c");
  let copy: ConversationState | undefined;
  const calls: string[] = [];
  const io: CommitIo = {
    async read(): Promise<CommitRead> {
      calls.push("read");
      copy = stored;
      return { state: stored };
    },
    async write(_conversationId, base, plan): Promise<CommitWrite> {
      const outcome = answers.shift() ?? "ok";
      calls.push(`write ${outcome} from ${base.version}`);
      if (outcome === "ok") stored = copy = plan.state;
      if (outcome === "conflict" || outcome === "stale") stored = { ...stored, version: stored.version + 1n };
      if (outcome === "replay") return { outcome, record: { fingerprint: "other", version: 1n }, current: stored.version };
      return outcome === "ok" ? { outcome } : { outcome, current: stored.version };
    },
  };
  const engine = new CommitEngine({
    copies: { copy: () => copy, idIndex: () => undefined },
    io,
    codec: new Codec(),
    lineage: new MessageListLineage(),
    now: () => 0,
    maxCommitAttempts: 3,
  });
  return { engine, calls, setCopy: (state: ConversationState) => (copy = state) };
}

const turn = (id: string) => [appendHistory(textMessage(id, Role.USER, "x"))];

describe("CommitEngine", () => {
  it("commits from the copy without reading, and reads first once others wrote after it", async () => {
    const { engine, calls } = scriptedStore(["ok", "conflict", "ok", "ok"]);
    await engine.commit("c", undefined, turn("a"), "");
    expect(calls).toEqual(["read", "write ok from 0"]);
    calls.length = 0;
    // Refused as a conflict: read, planned again on the caught-up base.
    const second = await engine.commit("c", undefined, turn("b"), "");
    expect(calls).toEqual(["write conflict from 1", "read", "write ok from 2"]);
    expect(second.version).toBe(3n);
    calls.length = 0;
    // The copy that commit made followed others' writes: the next commit reads before writing.
    await engine.commit("c", undefined, turn("c"), "");
    expect(calls).toEqual(["read", "write ok from 3"]);
  });

  it("answers a conflict with an expected version ABORTED carrying the current version, and gives up after its attempts without one", async () => {
    const expected = scriptedStore(["ok", "conflict"]);
    await expected.engine.commit("c", undefined, turn("a"), "");
    const conflict = await expected.engine.commit("c", 1n, turn("b"), "").then(
      () => expect.unreachable("the commit was expected to fail"),
      (error: unknown) => error as ConnectError,
    );
    expect(conflict).toBeInstanceOf(ConnectError);
    expect(conflict.code).toBe(Code.Aborted);
    expect(conflict.metadata.get(currentVersionTrailer)).toBe("2");

    const busy = scriptedStore(["conflict", "stale", "conflict"]);
    const gaveUp = await busy.engine.commit("c", undefined, turn("a"), "").then(
      () => expect.unreachable("the commit was expected to fail"),
      (error: unknown) => error as ConnectError,
    );
    expect(gaveUp.code).toBe(Code.Aborted);
    expect(gaveUp.rawMessage).toMatch(/gave up after 3 attempts, other writers kept committing \(current version 3\)/);
    expect(busy.calls.filter((call) => call.startsWith("write"))).toHaveLength(3);
  });

  it("refuses a key whose record holds another batch's fingerprint, and reads before refusing a delta the copy cannot take", async () => {
    const replay = scriptedStore(["ok", "replay"]);
    await replay.engine.commit("c", undefined, turn("a"), "");
    const reused = await replay.engine.commit("c", undefined, turn("b"), "key").then(
      () => expect.unreachable("the commit was expected to fail"),
      (error: unknown) => error as ConnectError,
    );
    expect(reused.code).toBe(Code.InvalidArgument);
    expect(reused.rawMessage).toMatch(/idempotency_key "key" of conversation "c" was already used with different deltas/);

    const behind = scriptedStore(["ok"]);
    await behind.engine.commit("c", undefined, turn("a"), "");
    behind.calls.length = 0;
    const refused = await behind.engine.commit("c", undefined, turn("a"), "").then(
      () => expect.unreachable("the commit was expected to fail"),
      (error: unknown) => error as ConnectError,
    );
    expect(refused.code).toBe(Code.InvalidArgument);
    expect(refused.rawMessage).toMatch(/duplicate message id "a"/);
    expect(behind.calls).toEqual(["read"]);
  });
});
