// What the bench:fleet sections share: the agent turn of bench:scale (a Commit appending one ~1 KB
// user message, then a stateful Compile with an 8,000-token budget rendered for OpenAI Chat) over
// the minimal HTTP/2 gRPC client, conversations of alternating ~1 KB user/assistant texts, and the
// figures' formatting.
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { loadavg } from "node:os";
import { CompileRequestSchema } from "../../gen/ts/contextd/v1/compile_pb.js";
import { ContextService } from "../../gen/ts/contextd/v1/context_service_pb.js";
import { CommitRequestSchema, ConversationService } from "../../gen/ts/contextd/v1/conversation_service_pb.js";
import { MessageSchema, Provider, Role, type Message } from "../../gen/ts/contextd/v1/message_pb.js";
import { DeltaSchema, Segment, type Delta } from "../../gen/ts/contextd/v1/state_pb.js";
import type { MinimalGrpcClient } from "../minimal-grpc-client.js";

export const commitPath = `/${ConversationService.typeName}/${ConversationService.method.commit.name}`;
export const getStatePath = `/${ConversationService.typeName}/${ConversationService.method.getState.name}`;
export const compilePath = `/${ContextService.typeName}/${ContextService.method.compile.name}`;

const words = "the agent reads the file, runs the tests, and writes a short note about what it found in the logs".split(" ");
/** ~`bytes` characters of prose, different per `seed` (so token counts are not one cached text). */
export function prose(seed: number, bytes: number): string {
  let text = `#${seed}`;
  for (let index = seed; text.length < bytes; index = (index * 31 + 7) % 9973) text += " " + words[index % words.length];
  return text.slice(0, bytes);
}

export function textMessage(id: string, role: Role, text: string): Message {
  return create(MessageSchema, { id, role, parts: [{ kind: { case: "text", value: { text } } }] });
}

export const appendHistory = (messages: Message[]): Delta => create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages } } });

export const commitRequest = (request: MessageInitShape<typeof CommitRequestSchema>) => Buffer.from(toBinary(CommitRequestSchema, create(CommitRequestSchema, request)));

export const compileRequest = (conversationId: string) =>
  Buffer.from(toBinary(CompileRequestSchema, create(CompileRequestSchema, { conversationId, budget: { maxTokens: 8_000n }, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" } })));

/** Stores `size` alternating ~1 KB user/assistant messages in `conversationId`, in commits of ~500 KB. */
export async function buildConversation(client: MinimalGrpcClient, conversationId: string, size: number): Promise<void> {
  for (let start = 0; start < size; start += 500) {
    const batch = Array.from({ length: Math.min(500, size - start) }, (_, offset) => {
      const index = start + offset;
      return textMessage(`${conversationId}-${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, prose(index, 1_000));
    });
    await client.call(commitPath, commitRequest({ conversationId, deltas: [appendHistory(batch)] }));
  }
}

/** One agent turn's time in ms, and its Commit's part. */
export interface TurnTime {
  total: number;
  commit: number;
}

/** One agent turn (Commit of one ~1 KB user message, then the stateful Compile) on `client`. */
export async function agentTurn(client: MinimalGrpcClient, conversationId: string, turn: number): Promise<TurnTime> {
  const started = process.hrtime.bigint();
  await client.call(commitPath, commitRequest({ conversationId, deltas: [appendHistory([textMessage(`${conversationId}-t${turn}`, Role.USER, prose(100_000 + turn, 1_000))])] }));
  const committed = process.hrtime.bigint();
  await client.call(compilePath, compileRequest(conversationId));
  return { total: Number(process.hrtime.bigint() - started) / 1e6, commit: Number(committed - started) / 1e6 };
}

export const percentile = (values: readonly number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
};
export const ms = (value: number) => `${value.toFixed(2)} ms`;
export const verdict = (met: boolean) => (met ? "met" : "NOT met");
export const loadAverage = () => `${loadavg().map((value) => value.toFixed(2)).join(" / ")} (1/5/15 min; the cores are shared with other work)`;
