// What storing what frameworks produce costs (issue 28): a stateless compile of a history whose
// rounds reuse `call_0` (nothing to repair) against the same history with one late result (the
// default tool-round repair runs), and appending a `call_0` round to a long history (the commit's
// tool-round check, the store's id index answering for message ids).
// Run: npm run build --silent && node dist/bench/tool-round-repair.js
import { create } from "@bufbuild/protobuf";
import { CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, DeltaSchema, Segment, type ConversationState } from "#gen/contextd/v1/state_pb";
import { compile } from "../src/core/compile/compile.js";
import { applyDeltas } from "../src/core/deltas/apply-deltas.js";
import { TokenCountCache } from "../src/core/tokens/token-count-cache.js";

const text = (id: string, role: Role, value: string) => create(MessageSchema, { id, role, parts: [{ kind: { case: "text", value: { text: value } } }] });
const call = (id: string, callId: string) => create(MessageSchema, { id, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: callId, name: "f", arguments: { data: "{}" } } } }] });
const result = (id: string, callId: string) => create(MessageSchema, { id, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, name: "f", payload: { text: "r" } } } }] });

/** Rounds of user, call_0, result, answer; with `late`, round 10's result comes after a user message. */
function history(size: number, late: boolean): Message[] {
  const messages: Message[] = [];
  for (let round = 0; messages.length < size; round++) {
    messages.push(text(`u${round}`, Role.USER, `question ${round} ${"x".repeat(80)}`), call(`a${round}`, "call_0"));
    if (late && round === 10) messages.push(text(`w${round}`, Role.USER, "meanwhile"));
    messages.push(result(`t${round}`, "call_0"), text(`r${round}`, Role.ASSISTANT, `answer ${round}`));
  }
  return messages;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const elapsedMs = (start: bigint) => Number(process.hrtime.bigint() - start) / 1e6;
const context = () => {
  let next = 0;
  return { randomId: () => `r${next++}`, now: () => 0, monotonicNs: () => process.hrtime.bigint(), observer: () => undefined, tokenCounts: new TokenCountCache() };
};

for (const size of [1_000, 10_000]) {
  const requests = [false, true].map((late) => create(CompileRequestSchema, { history: { messages: history(size, late) }, budget: { maxTokens: 4_000n } }));
  const times: [number[], number[]] = [[], []];
  for (let run = 0; run < 31; run++) {
    for (const which of [0, 1] as const) {
      const start = process.hrtime.bigint();
      await compile(requests[which]!, context());
      if (run > 0) times[which].push(elapsedMs(start));
    }
  }
  console.log(`compile ${size} messages: call_0 reused, nothing to repair ${median(times[0]).toFixed(2)} ms; one late result repaired ${median(times[1]).toFixed(2)} ms (median of 30)`);
}

for (const size of [10_000, 100_000]) {
  const append = (messages: Message[]) => [create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages } } })];
  let state: ConversationState = applyDeltas(create(ConversationStateSchema, { conversationId: "c" }), append(history(size, false)), { newMessageId: () => "unused" });
  const times: number[] = [];
  for (let run = 0; run < 41; run++) {
    const start = process.hrtime.bigint();
    state = applyDeltas(state, append([call(`na${run}`, "call_0"), result(`nt${run}`, "call_0")]), { newMessageId: () => "unused", messageIds: () => ({ has: () => false }) });
    if (run > 0) times.push(elapsedMs(start));
  }
  console.log(`append a call_0 round to ${size} messages: ${median(times).toFixed(3)} ms (median of 40)`);
}
