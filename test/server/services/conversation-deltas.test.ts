import { create, toBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { ArtifactLifecycle, ArtifactSchema, MergePolicy } from "#gen/contextd/v1/artifact_pb";
import { ProvenanceSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, Segment, type ConversationState, type Delta } from "#gen/contextd/v1/state_pb";
import { applyDeltas } from "../../../src/core/deltas/apply-deltas.js";
import { appendHistory, delta, textMessage } from "../../store/fixtures.js";
import { thrownConnectError } from "../../support/thrown.js";

function counterIds() {
  let next = 0;
  return { newMessageId: () => `gen_${++next}` };
}

function apply(deltas: Delta[], state: ConversationState = create(ConversationStateSchema, { conversationId: "c" }), strictToolRounds = false): ConversationState {
  return applyDeltas(state, deltas, { ...counterIds(), strictToolRounds });
}


const texts = (messages: Message[]) =>
  messages.map((message) => message.parts.map((part) => (part.kind.case === "text" ? part.kind.value.text : part.kind.case === "toolResult" ? part.kind.value.payload?.text : part.kind.case)).join("|"));

const openTwoCalls = delta({ case: "appendAssistant", value: { text: "let me look", toolCalls: [{ id: "call_1", name: "search" }, { id: "call_2", name: "fetch" }] } });

describe("applyDeltas", () => {
  it("never mutates its input state", () => {
    const before = apply([appendHistory(textMessage("u1", Role.USER, "hi"))]);
    const bytes = toBinary(ConversationStateSchema, before);
    apply([appendHistory(textMessage("u2", Role.USER, "x")), delta({ case: "remember", value: { text: "f" } }), delta({ case: "clearState", value: {} })], before);
    expect(toBinary(ConversationStateSchema, before)).toEqual(bytes);
  });

  it("writes the exact truncation text, with and without a reason", () => {
    const state = apply([
      delta({ case: "truncateAssistant", value: { partialText: "Once upon", abortReason: "user pressed stop" } }),
      delta({ case: "truncateAssistant", value: { partialText: "Hi" } }),
    ]);
    expect(texts(state.history)).toEqual(["Once upon<Truncated due to cancel from user. Reason: user pressed stop>", "Hi<Truncated due to cancel from user.>"]);
    expect(state.history.every((message) => message.role === Role.ASSISTANT)).toBe(true);
  });

  it("closes open calls in place with the exact cancellation text, keeping results that arrived", () => {
    const state = apply([
      openTwoCalls,
      delta({ case: "appendToolResult", value: { toolCallId: "call_2", payload: { text: "page body" } } }),
      delta({ case: "cancelToolCalls", value: { abortReason: "took too long" } }),
      appendHistory(textMessage("u2", Role.USER, "next")),
    ]);
    expect(texts(state.history)).toEqual([
      "let me look|toolCall|toolCall",
      "page body",
      "<Tool execution cancelled by user. Tool: search. Reason: took too long>",
      "next",
    ]);
    const cancelled = state.history[2]!.parts[0]!.kind;
    expect(cancelled.case === "toolResult" && cancelled.value.isError && cancelled.value.toolCallId).toBe("call_1");
    const withoutReason = apply([openTwoCalls, delta({ case: "cancelToolCalls", value: { toolCallIds: ["call_2"] } })]);
    expect(texts(withoutReason.history)[1]).toBe("<Tool execution cancelled by user. Tool: fetch.>");
  });

  it("stores a user message while a round is open (the approval flow); strict mode rejects it, naming the delta index and the missing calls", () => {
    const deltas = [appendHistory(textMessage("u1", Role.USER, "hi")), openTwoCalls, delta({ case: "appendUser", value: { message: textMessage("", Role.UNSPECIFIED, "and?") } })];
    expect(texts(apply(deltas).history)).toEqual(["hi", "let me look|toolCall|toolCall", "and?"]);
    const error = thrownConnectError(() => apply(deltas, undefined, true));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.rawMessage).toMatch(/^deltas\[2\]\.append_user: tool round still open, missing results for call_1, call_2/);
  });

  it("stores a tool result that answers no open call (the compile leaves it out); strict mode rejects it", () => {
    const deltas = [openTwoCalls, delta({ case: "appendToolResult", value: { toolCallId: "call_9", payload: { text: "?" } } })];
    expect(texts(apply(deltas).history)).toEqual(["let me look|toolCall|toolCall", "?"]);
    const error = thrownConnectError(() => apply(deltas, undefined, true));
    expect(error.rawMessage).toContain('deltas[1].append_tool_result: tool call "call_9" is not an open call of the last assistant message (open calls: "call_1", "call_2")');
  });

  it("appends nothing for an assistant turn without text or calls, and keeps reasoning before the text", () => {
    const state = apply([
      delta({ case: "appendAssistant", value: { reasoning: [{ text: "hmm", signature: "s", provider: Provider.ANTHROPIC_MESSAGES }] } }),
      delta({ case: "appendAssistant", value: { text: "answer", reasoning: [{ text: "why", signature: "sig" }] } }),
    ]);
    expect(state.history).toHaveLength(1);
    expect(state.history[0]!.parts.map((part) => part.kind.case)).toEqual(["reasoning", "text"]);
    expect(state.history[0]!.id).toBe("gen_1");
  });

  it("refuses to remove part of a tool round but removes a whole one", () => {
    const round = delta({
      case: "appendToolRound",
      value: {
        assistant: { id: "a1", parts: [{ kind: { case: "toolCall", value: { id: "c1", name: "t" } } }] },
        results: [{ id: "r1", parts: [{ kind: { case: "toolResult", value: { toolCallId: "c1", payload: { text: "ok" } } } }] }],
      },
    });
    const state = apply([round]);
    expect(state.history.map((message) => message.role)).toEqual([Role.ASSISTANT, Role.TOOL]);
    const split = thrownConnectError(() => apply([delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: ["r1"] } })], state));
    expect(split.rawMessage).toContain("deltas[0].remove_messages: removing \"r1\" would split the tool round at history[0]");
    expect(apply([delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: ["r1", "a1"] } })], state).history).toEqual([]);
    const incomplete = thrownConnectError(() => apply([delta({ case: "appendToolRound", value: { assistant: { id: "a2", parts: [{ kind: { case: "toolCall", value: { id: "c2", name: "t" } } }] } } })]));
    expect(incomplete.rawMessage).toContain("deltas[0].append_tool_round: invalid tool round (open_tool_round_not_last)");
  });

  it("compacts a prefix into a summary listing every covered id, replacing earlier summaries (never covering one), never cutting or covering an open round", () => {
    let state = apply([
      appendHistory(textMessage("u1", Role.USER, "1"), textMessage("a1", Role.ASSISTANT, "2"), textMessage("u2", Role.USER, "3")),
      delta({ case: "compact", value: { summary: textMessage("s1", Role.SYSTEM, "first two"), throughMessageId: "a1", remember: ["  user  likes\ttea "] } }),
    ]);
    expect(state.history.map((message) => message.id)).toEqual(["s1", "u2"]);
    const provenance = state.history[0]!.provenance!.kind;
    expect(provenance.case === "summary" && provenance.value.coveredMessageIds).toEqual(["u1", "a1"]);
    expect(state.experiences).toMatchObject([{ id: "exp_1", text: "user likes tea" }]);

    state = apply([openTwoCalls, delta({ case: "compact", value: { summary: textMessage("s2", Role.SYSTEM, "all") } })], state);
    expect(state.history.map((message) => message.id)).toEqual(["s2", "gen_1"]);
    const rolled = state.history[0]!.provenance!.kind;
    expect(rolled.case === "summary" && rolled.value.coveredMessageIds).toEqual(["u1", "a1", "u2"]);
    expect(rolled.case === "summary" && rolled.value.replacedSummaryIds).toEqual(["s1"]);

    // A summary appended by hand that covers another summary is refused: summaries never nest.
    const nesting = { ...textMessage("s9", Role.SYSTEM, "nested"), provenance: create(ProvenanceSchema, { kind: { case: "summary", value: { coveredMessageIds: ["u1", "s2"] } } }) };
    const nested = thrownConnectError(() => apply([appendHistory(nesting)], state));
    expect(nested.code).toBe(Code.InvalidArgument);
    expect(nested.rawMessage).toContain('deltas[0].append_messages: messages[0].provenance.summary.covered_message_ids names "s2", which is a summary: a summary replaces an earlier one');

    const open = thrownConnectError(() => apply([delta({ case: "compact", value: { summary: textMessage("s3", Role.SYSTEM, "x"), throughMessageId: "gen_1" } })], state));
    expect(open.rawMessage).toContain("deltas[0].compact: through_message_id: \"gen_1\" is in the open tool round");
  });

  it("remembers with normalised dedup and never reuses an experience id after forget", () => {
    const state = apply([
      delta({ case: "remember", value: { text: "a  b" } }),
      delta({ case: "remember", value: { text: " a b " } }),
      delta({ case: "remember", value: { text: "c" } }),
      delta({ case: "forget", value: { experienceId: "exp_2" } }),
      delta({ case: "forget", value: { experienceId: "exp_99" } }),
      delta({ case: "remember", value: { text: "d" } }),
    ]);
    expect(state.experiences.map((experience) => [experience.id, experience.text])).toEqual([["exp_1", "a b"], ["exp_3", "d"]]);
    expect(state.lastExperienceNumber).toBe(3n);
    expect(thrownConnectError(() => apply([delta({ case: "remember", value: { text: " \n " } })])).rawMessage).toBe("deltas[0].remember: text is empty after normalising whitespace");
  });

  it("merges artifacts: APPEND joins texts, REPLACE_BY_ORIGIN drops same-origin others, DEDUPLICATE_BY_LAYER keeps on a shared ref, EPHEMERAL replaces", () => {
    type Ref = { namespace: string; kind: string; id: string };
    const artifact = (id: string, text: string, mergePolicy: MergePolicy, extra: { owner?: Ref; sourceRefs?: Ref[]; lifecycle?: ArtifactLifecycle } = {}) =>
      delta({ case: "upsertArtifact", value: { artifact: create(ArtifactSchema, { id, payload: { text }, mergePolicy, ...extra }) } });
    const owner = { namespace: "kb", kind: "doc", id: "1" };
    const state = apply([
      artifact("a", "one", MergePolicy.APPEND),
      artifact("a", "two", MergePolicy.APPEND),
      artifact("b", "old", MergePolicy.APPEND, { owner }),
      artifact("c", "new", MergePolicy.REPLACE_BY_ORIGIN, { owner }),
      artifact("d", "kept", MergePolicy.APPEND, { sourceRefs: [owner] }),
      artifact("d", "ignored", MergePolicy.DEDUPLICATE_BY_LAYER, { sourceRefs: [owner] }),
      artifact("a", "eph", MergePolicy.APPEND, { lifecycle: ArtifactLifecycle.EPHEMERAL }),
    ]);
    expect(state.artifacts.map((item) => [item.id, item.payload?.text])).toEqual([["a", "eph"], ["c", "new"], ["d", "kept"]]);
  });

  it("rejects duplicate message ids across segments and an unset segment, applying nothing", () => {
    const state = apply([appendHistory(textMessage("m1", Role.USER, "hi"))]);
    expect(thrownConnectError(() => apply([delta({ case: "appendMessages", value: { segment: Segment.MEMORY, messages: [textMessage("m1", Role.USER, "again")] } })], state)).rawMessage).toBe(
      'deltas[0].append_messages: messages[0]: duplicate message id "m1"',
    );
    // Small batches look ids up in place, batches of more than 8 index them: both answer alike.
    for (const size of [1, 2, 8, 9, 40]) {
      const fresh = Array.from({ length: size - 1 }, (_, index) => textMessage(`new${index}`, Role.USER, "x"));
      const batch = (last: Message) => [appendHistory(...fresh, last)];
      expect(thrownConnectError(() => apply(batch(textMessage("m1", Role.USER, "taken")), state)).rawMessage).toBe(
        `deltas[0].append_messages: messages[${size - 1}]: duplicate message id "m1"`,
      );
      if (size > 1) {
        expect(thrownConnectError(() => apply(batch(textMessage("new0", Role.USER, "twice")), state)).rawMessage).toBe(
          `deltas[0].append_messages: messages[${size - 1}]: duplicate message id "new0"`,
        );
      }
      expect(apply(batch(textMessage("free", Role.USER, "ok")), state).history).toHaveLength(size + 1);
      // replace_segment frees the ids of the messages it replaces, in that segment only.
      const replace = (segment: Segment) => [delta({ case: "replaceSegment", value: { segment, messages: [...fresh, textMessage("m1", Role.USER, "again")] } })];
      expect(apply(replace(Segment.HISTORY), state).history.map((message) => message.id)).toEqual([...fresh.map((message) => message.id), "m1"]);
      expect(thrownConnectError(() => apply(replace(Segment.MEMORY), state)).rawMessage).toContain('duplicate message id "m1"');
    }
    expect(thrownConnectError(() => apply([delta({ case: "clearSegment", value: {} })])).rawMessage).toBe("deltas[0].clear_segment: segment: a segment is required");
    expect(thrownConnectError(() => apply([delta({ case: "setToolDefinitions", value: { toolDefinitions: [{ name: "t", parameters: "[]" }] } })])).rawMessage).toContain("must be a JSON object");
  });
});
