import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ChangeSchema, type Change } from "#gen/contextd/v1/conversation_service_pb";
import { Role, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, type ConversationState } from "#gen/contextd/v1/state_pb";
import { ArtifactSchema } from "#gen/contextd/v1/artifact_pb";
import { Code, ConnectError } from "@connectrpc/connect";
import { MessageListLineage } from "../../src/core/model/message-list-lineage.js";
import { undoneState, undoOf } from "../../src/store/change-undo.js";
import { randomSource } from "../support/random-messages.js";
import { textMessage } from "./fixtures.js";

// The undo a commit records and the state undos give back, without a store: random segment edits
// (appends, removals and replacements at the head, the middle and the tail, rest changes), each
// version read back from the newest through every undo since, against the states as they were.

const state = (version: bigint, fields: Partial<ConversationState> = {}): ConversationState => ({ ...create(ConversationStateSchema, { conversationId: "c", version }), ...fields });

describe("change undo", () => {
  it("gives every earlier version back from the newest, through up to 200 random edits of every segment and the rest", () => {
    const random = randomSource(7);
    let counter = 0;
    const fresh = (): Message => textMessage(`m${++counter}`, Role.USER, `text ${counter}`);
    const lineage = new MessageListLineage();
    const states: ConversationState[] = [state(1n, { history: [fresh(), fresh()], system: [fresh()] })];
    const changes: Change[] = [];
    for (let version = 2n; version <= 200n; version++) {
      const before = states.at(-1)!;
      const segment = (["system", "history", "memory", "tools"] as const)[Math.floor(random() * 4)]!;
      const list = before[segment];
      const at = Math.floor(random() * (list.length + 1));
      const cut = Math.floor(random() * (list.length - at + 1));
      const added = Array.from({ length: Math.floor(random() * 3) }, fresh);
      const draw = random();
      let next: Message[];
      if (draw < 0.4) {
        next = [...list, ...added];
        lineage.appended(list, next);
      } else next = draw < 0.7 ? [...list.slice(0, at), ...added, ...list.slice(at + cut)] : added;
      const after: ConversationState = { ...before, version, [segment]: next, ...(random() < 0.2 ? { title: `title ${version}` } : {}) };
      changes.push(create(ChangeSchema, { conversationId: "c", version, undo: undoOf(before, after, { maxBytes: 1 << 20, lineage }) }));
      states.push(after);
    }
    const newest = states.at(-1)!;
    for (const [index, expected] of states.entries()) {
      const version = BigInt(index + 1);
      const read = undoneState(newest, changes.slice(index), version);
      expect({ ...read, version }, `version ${version}`).toEqual({ ...expected, version });
      // The messages are the ones the states held, never copies: a store writes by identity.
      for (const segment of ["system", "history", "memory", "tools"] as const) read[segment].forEach((message, at) => expect(message).toBe(expected[segment][at]));
    }
  });

  it("undoes an append by keeping the old length: no message is held, and the current array is kept when nothing changed it", () => {
    const lineage = new MessageListLineage();
    const history = Array.from({ length: 1_000 }, (_, index) => textMessage(`h${index}`, Role.USER, "x"));
    const longer = [...history, textMessage("new", Role.USER, "y")];
    lineage.appended(history, longer);
    const before = state(1n, { history });
    // Core shares what a batch left alone: the rest is the same objects.
    const after = { ...before, version: 2n, history: longer };
    const undo = undoOf(before, after, { maxBytes: 1 << 20, lineage });
    expect(undo.segments.map(({ keepHead, keep, messages }) => ({ keepHead, keep, messages }))).toEqual([{ keepHead: true, keep: 1_000, messages: [] }]);
    expect(undo.restBefore).toBeUndefined();
    const read = undoneState(after, [create(ChangeSchema, { version: 2n, undo })], 1n);
    expect(read.history).toHaveLength(1_000);
    expect(read.system).toBe(after.system);
  });

  it("records not_undoable, and nothing else, for an undo past the bound; a plan on the stored tail keeps the head it did not hold", () => {
    const history = Array.from({ length: 50 }, (_, index) => textMessage(`h${index}`, Role.USER, "x".repeat(100)));
    const undo = undoOf(state(1n, { history }), state(2n, { history: [] }), { maxBytes: 1_000 });
    expect([undo.notUndoable, undo.segments]).toEqual(["its undo (the history messages the change removed or replaced) would hold more than 1000 bytes, the bound of one change's undo (--history-undo-bytes)", []]);
    const titled = state(1n, { title: "t".repeat(2_000) });
    const rest = undoOf(titled, { ...titled, version: 2n, title: "" }, { maxBytes: 1_000 });
    expect(rest.notUndoable).toContain("its undo (the state's title before the change) would hold more than 1000 bytes");
    // A tail of messages [40, 50): the plan replaced its first, so the undo keeps 40 + 0 from the head.
    const tail = history.slice(40);
    const replaced = [textMessage("r", Role.USER, "r"), ...tail.slice(1)];
    const onTail = undoOf(state(1n, { history: tail }), state(2n, { history: replaced }), { maxBytes: 1 << 20, historyStart: 40 });
    expect(onTail.segments.map(({ keepHead, keep, messages }) => ({ keepHead, keep, messages: messages.map((message) => message.id) }))).toEqual([
      { keepHead: true, keep: 40, messages: tail.map((message) => message.id) },
    ]);
  });

  it("holds only the fields of the rest the change altered: a title set beside large artifacts holds the old title", () => {
    const artifacts = [create(ArtifactSchema, { id: "doc", payload: { text: "a".repeat(100_000) } })];
    const before = state(1n, { title: "old", artifacts, lastExperienceNumber: 3n });
    const after = { ...before, version: 2n, title: "new", labels: { team: "x" } };
    const undo = undoOf(before, after, { maxBytes: 1_000 });
    expect([undo.notUndoable, undo.restFields]).toEqual(["", ["title", "labels"]]);
    expect([undo.restBefore!.title, undo.restBefore!.labels, undo.restBefore!.artifacts]).toEqual(["old", {}, []]);
    const read = undoneState(after, [create(ChangeSchema, { version: 2n, undo })], 1n);
    expect(read).toEqual(before);
    expect(read.artifacts).toBe(artifacts);
  });

  it("answers DATA_LOSS naming the version for an undo that does not fit the state", () => {
    const undo = undoOf(state(1n, { history: [textMessage("a", Role.USER, "a"), textMessage("b", Role.USER, "b")] }), state(2n, { history: [] }), { maxBytes: 1 << 20 });
    let error: unknown;
    try {
      undoneState(state(2n, { history: [] }), [create(ChangeSchema, { version: 2n, undo: { ...undo, segments: [{ ...undo.segments[0]!, keep: 3 }] } })], 1n);
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(ConnectError);
    expect([(error as ConnectError).code, (error as ConnectError).rawMessage]).toEqual([Code.DataLoss, 'conversation "c": the undo logged with version 2 does not fit the state after it (it keeps 3 history messages of 0)']);
  });
});
