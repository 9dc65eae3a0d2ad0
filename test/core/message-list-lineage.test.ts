import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, DeltaSchema, Segment } from "#gen/contextd/v1/state_pb";
import { applyDeltas } from "../../src/core/deltas/apply-deltas.js";
import { MessageListLineage } from "../../src/core/model/message-list-lineage.js";

const message = (id: string): Message => create(MessageSchema, { id, role: Role.USER, parts: [{ kind: { case: "text", value: { text: id } } }] });

describe("MessageListLineage", () => {
  it("knows a list extends every list of its line, and nothing it was not appended from", () => {
    const lineage = new MessageListLineage();
    const base = [message("a")];
    const one = base.concat(message("b"));
    const two = one.concat(message("c"));
    lineage.appended(base, one);
    lineage.appended(one, two);
    expect(lineage.extends(two, base)).toBe(true);
    expect(lineage.extends(two, one)).toBe(true);
    expect(lineage.extends(one, one)).toBe(true);
    expect(lineage.extends(one, two)).toBe(false);
    expect(lineage.extends(base.concat(message("b")), base)).toBe(false);
    expect(lineage.extends(two, [message("a")])).toBe(false);
  });

  it("names a list's line with a token that holds no list: a later list of the line extends it, another line's does not", () => {
    const lineage = new MessageListLineage();
    const base = [message("a")];
    const line = lineage.lineOf(base);
    expect(lineage.lineOf(base)).toBe(line);
    const one = base.concat(message("b"));
    lineage.appended(base, one);
    expect(lineage.extendsLine(one, line, base.length)).toBe(true);
    expect(lineage.extendsLine(one, line, one.length + 1)).toBe(false);
    // A second append to `base` starts another line, branched off `line` after `base`'s message:
    // its lists start with that message of `line`, not with `one`'s second.
    const branch = base.concat(message("x"));
    lineage.appended(base, branch);
    expect(lineage.extendsLine(branch, line, base.length)).toBe(true);
    expect(lineage.extendsLine(branch, line, one.length)).toBe(false);
    // And so do the lists of a branch of that branch, as far as both branches shared.
    const further = branch.concat(message("y"));
    lineage.appended(branch, further);
    const twig = branch.concat(message("z"));
    lineage.appended(branch, twig);
    expect([lineage.extendsLine(twig, line, 1), lineage.extendsLine(twig, line, 2), lineage.extendsLine(twig, lineage.lineOf(further), 2)]).toEqual([true, false, true]);
    expect(lineage.extendsLine([message("a"), message("b")], line, 1)).toBe(false);
  });

  it("knows a truncation is a head of the list it was cut from and of that line, and the append after it starts a line of its own", () => {
    const lineage = new MessageListLineage();
    const base = [message("a"), message("b")];
    const long = base.concat(message("c"), message("d"));
    lineage.appended(base, long);
    const head = long.slice(0, 3);
    lineage.truncated(long, head);
    expect(lineage.extends(long, head)).toBe(true);
    expect(lineage.extends(head, base)).toBe(true);
    expect(lineage.extends(head, long)).toBe(false);
    // Not recorded: the same messages in another array are not known to be a head.
    expect(lineage.extends(long, long.slice(0, 3))).toBe(false);
    const after = head.concat(message("x"));
    lineage.appended(head, after);
    expect(lineage.extends(after, head)).toBe(true);
    expect(lineage.extends(after, base)).toBe(false);
    expect(lineage.extends(after, long)).toBe(false);
    expect(lineage.extends(long, after)).toBe(false);
    // A "head" longer than the list is not one.
    lineage.truncated(head, long);
    expect(lineage.extends(head, long)).toBe(false);
  });

  it("starts a new line for an append to a list that is not its line's newest, so the branches never extend each other", () => {
    const lineage = new MessageListLineage();
    const base = [message("a")];
    const left = base.concat(message("l"));
    lineage.appended(base, left);
    const right = base.concat(message("r"));
    lineage.appended(base, right);
    const rightMore = right.concat(message("r2"));
    lineage.appended(right, rightMore);
    expect(lineage.extends(rightMore, base)).toBe(true);
    expect(lineage.extends(rightMore, right)).toBe(true);
    expect(lineage.extends(rightMore, left)).toBe(false);
    expect(lineage.extends(right, left)).toBe(false);
    // The first branch only loses what can no longer be proven cheaply: "not known", never a wrong "yes".
    expect(lineage.extends(left, right)).toBe(false);
  });

  it("is told by core's appends (append_messages, append_user, append_tool_round) and not by a removal or replace", () => {
    const lineage = new MessageListLineage();
    let next = 0;
    const context = { newMessageId: () => `id${next++}`, lineage };
    const state = create(ConversationStateSchema, { conversationId: "c", history: [message("h0"), message("h1")] });
    const appended = applyDeltas(
      state,
      [
        create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: [message("h2")] } } }),
        create(DeltaSchema, { operation: { case: "appendUser", value: { message: message("h3") } } }),
        create(DeltaSchema, {
          operation: {
            case: "appendToolRound",
            value: {
              assistant: create(MessageSchema, { id: "a", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "c1", name: "f", arguments: { data: "{}" } } } }] }),
              results: [create(MessageSchema, { id: "r", role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: "c1", name: "f", payload: { text: "ok" } } } }] })],
            },
          },
        }),
      ],
      context,
    );
    expect(appended.history.map((entry) => entry.id)).toEqual(["h0", "h1", "h2", "h3", "a", "r"]);
    expect(lineage.extends(appended.history, state.history)).toBe(true);
    const removed = applyDeltas(appended, [create(DeltaSchema, { operation: { case: "removeMessages", value: { segment: Segment.HISTORY, ids: ["h1"] } } })], context);
    expect(lineage.extends(removed.history, state.history)).toBe(false);
    expect(lineage.extends(removed.history, appended.history)).toBe(false);
    const replaced = applyDeltas(appended, [create(DeltaSchema, { operation: { case: "replaceSegment", value: { segment: Segment.HISTORY, messages: [...appended.history, message("x")] } } })], context);
    expect(lineage.extends(replaced.history, appended.history)).toBe(false);
  });

  it("knows what branches share: two appends to one list, a branch of a branch, and nothing for lists never recorded", () => {
    const lineage = new MessageListLineage();
    const base = [message("a"), message("b")];
    const source = base.concat(message("s1"));
    lineage.appended(base, source);
    // A second append to base (a fork's first commit) starts a line of its own.
    const fork = base.concat(message("f1"));
    lineage.appended(base, fork);
    expect(lineage.extends(fork, base)).toBe(true);
    expect(lineage.extends(fork, source)).toBe(false);
    expect(lineage.sharedPrefix(fork, source)).toBe(2);
    expect(lineage.sharedPrefix(source, fork)).toBe(2);
    const forkOfFork = fork.concat(message("g1"));
    lineage.appended(fork, forkOfFork);
    const other = fork.concat(message("h1"));
    lineage.appended(fork, other);
    expect(lineage.sharedPrefix(other, forkOfFork)).toBe(3);
    expect(lineage.sharedPrefix(other, source)).toBe(2);
    expect(lineage.sharedPrefix(source.concat(message("s2")), other)).toBe(0);
    expect(lineage.sharedPrefix(source, source)).toBe(3);
    expect(lineage.sharedPrefix([message("x")], source)).toBe(0);
  });

  it("knows a removal's list and the lists appended to it as that removal from its base, and what they share with it", () => {
    const lineage = new MessageListLineage();
    const base = Array.from({ length: 10 }, (_, index) => message(`m${index}`));
    const kept = base.filter((_, index) => index !== 3 && index !== 7);
    lineage.removed(base, kept, [3, 7]);
    expect(lineage.removalFrom(kept, base)).toEqual([3, 7]);
    expect(lineage.sharedPrefix(kept, base)).toBe(3);
    expect(lineage.extends(kept, base)).toBe(false);
    const appended = kept.concat(message("n0"));
    lineage.appended(kept, appended);
    expect(lineage.removalFrom(appended, base)).toEqual([3, 7]);
    expect(lineage.extends(appended, kept)).toBe(true);
    // Not from another list, nor for a head of the removal's list shorter than it.
    expect(lineage.removalFrom(kept, base.slice())).toBeUndefined();
    const head = kept.slice(0, 2);
    lineage.truncated(kept, head);
    expect(lineage.removalFrom(head, base)).toBeUndefined();
    // Removing the last messages is a truncation.
    const tail = base.slice(0, 8);
    lineage.removed(base, tail, [8, 9]);
    expect(lineage.extends(base, tail)).toBe(true);
    expect(lineage.removalFrom(tail, base)).toBeUndefined();
  });
});
