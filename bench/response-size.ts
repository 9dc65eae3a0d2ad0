/**
 * `npm run bench:response-size`: how many bytes a stateful compile and a commit answer with, by
 * default and with every heavy part asked for, at 100, 1,000 and 10,000 stored messages of ~1 KB
 * (an agent turn: append one message, then compile with a budget of 8,000 tokens rendered for
 * OpenAI Chat). It exists because the answer used to repeat the history five times (source,
 * normalized_snapshot, writeback.snapshot, persistence, a record per message) and so grew with the
 * stored conversation, not with the prompt; the default now follows the prompt. Beside the
 * rendered body the typed payload was a second copy of the prompt (2.00x–2.05x the body); it is
 * sent only with PAYLOAD now, and the "with PAYLOAD" column is what the default used to be. Bytes are
 * protobuf encodings (`toBinary`), exact and independent of the machine; the use case runs
 * in-process on the memory store, as the services call it.
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { Compiler } from "../src/application/compiler.js";
import { TokenCountCache } from "../src/core/tokens/token-count-cache.js";
import { MemoryConversationStore } from "../src/store/memory-conversation-store.js";
import { CompileRequestSchema, CompileResultPart, CompileResultSchema, EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { CommitResponseSchema } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment, type Delta } from "#gen/contextd/v1/state_pb";

const everyPart = [CompileResultPart.SOURCE, CompileResultPart.NORMALIZED_SNAPSHOT, CompileResultPart.WRITEBACK_SNAPSHOT, CompileResultPart.PERSISTENCE, CompileResultPart.ALL_TRANSFORMATIONS, CompileResultPart.PAYLOAD];
const sentence = "The agent read the file, ran the tests and noted what failed and why it failed. ";
const kilobyte = sentence.repeat(Math.ceil(1024 / sentence.length)).slice(0, 1024);

function append(messages: { id: string; role: Role; text: string }[]): Delta {
  return create(DeltaSchema, {
    operation: {
      case: "appendMessages",
      value: { segment: Segment.HISTORY, messages: messages.map(({ id, role, text }) => ({ id, role, parts: [{ kind: { case: "text" as const, value: { text } } }] })) },
    },
  });
}

const kb = (bytes: number) => `${(bytes / 1024).toFixed(1)} KB`;
console.log("stored messages | rendered body | compile answer, default | ratio to body | with PAYLOAD | every part included | commit answer, default | with include_state");
for (const count of [100, 1_000, 10_000]) {
  const store = new MemoryConversationStore();
  const compiler = new Compiler({ store, tokenCounts: new TokenCountCache() });
  const id = `c${count}`;
  const messages = Array.from({ length: count }, (_, i) => ({ id: `m${i}`, role: i % 2 === 0 ? Role.USER : Role.ASSISTANT, text: `${i} ${kilobyte}` }));
  for (let start = 0; start < count; start += 1_000) await store.commit(id, undefined, [append(messages.slice(start, start + 1_000))], "");
  const version = (await store.load(id)).version;
  // The turn's append, answered as Commit answers it by default and with include_state.
  const outcome = await store.commit(id, version, [append([{ id: `m${count}`, role: Role.USER, text: "What failed?" }])], "");
  const commitDefault = toBinary(CommitResponseSchema, create(CommitResponseSchema, { version: outcome.version, replayed: outcome.replayed })).length;
  const commitWithState = toBinary(CommitResponseSchema, create(CommitResponseSchema, { version: outcome.version, replayed: outcome.replayed, state: outcome.state })).length;
  const compile = async (include: CompileResultPart[]) =>
    compiler.compileAndCommit(
      create(CompileRequestSchema, {
        conversationId: id,
        budget: { maxTokens: 8_000n, estimator: { kind: EstimatorKind.CHAR_FALLBACK } },
        render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" },
        include,
      }),
      { observer: () => {} },
    );
  const lean = await compile([]);
  const withPayload = await compile([CompileResultPart.PAYLOAD]);
  const full = await compile(everyPart);
  const body = lean.rendered!.json.length;
  const leanBytes = toBinary(CompileResultSchema, lean).length;
  const fullBytes = toBinary(CompileResultSchema, full).length;
  const withPayloadBytes = toBinary(CompileResultSchema, withPayload).length;
  console.log(
    `${count.toLocaleString("en")} | ${kb(body)} | ${kb(leanBytes)} | ${(leanBytes / body).toFixed(2)}x | ${kb(withPayloadBytes)} (${(withPayloadBytes / body).toFixed(2)}x) | ${kb(fullBytes)} (${(fullBytes / body).toFixed(1)}x) | ${commitDefault} B | ${kb(commitWithState)}`,
  );
}
