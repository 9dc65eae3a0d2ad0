// What the bench:fleet sections share: conversations of alternating user/assistant texts of ~250
// bytes (the size issue 30 measured with), the agent turn of bench:scale (a Commit appending one
// such user message, then a stateful Compile with an 8,000-token budget rendered for OpenAI Chat
// with gpt-4o, o200k) over the minimal HTTP/2 gRPC client, and the figures' formatting.
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { loadavg } from "node:os";
import { CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { CommitRequestSchema, ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Provider, Role, type Message } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment, type Delta } from "#gen/contextd/v1/state_pb";
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

/** Stores `size` alternating user/assistant messages of ~`bytes` each in `conversationId`, in commits of ~512 KB. */
export async function seedConversation(client: MinimalGrpcClient, conversationId: string, size: number, bytes = 250): Promise<void> {
  const perCommit = Math.max(1, Math.floor(512_000 / bytes));
  for (let start = 0; start < size; start += perCommit) {
    const batch = Array.from({ length: Math.min(perCommit, size - start) }, (_, offset) => {
      const index = start + offset;
      return textMessage(`${conversationId}-${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, prose(index, bytes));
    });
    await client.call(commitPath, commitRequest({ conversationId, deltas: [appendHistory(batch)] }));
  }
}

/** One agent turn's milliseconds: in all, its Commit's and its Compile's. */
export interface TurnTime {
  total: number;
  commit: number;
  compile: number;
}

/**
 * One agent turn (Commit of one ~250-byte user message, then the stateful Compile) on `client`.
 * The message id is unique per call, so several sidecars or runs may turn one conversation with the same `turn`.
 */
export async function agentTurn(client: MinimalGrpcClient, conversationId: string, turn: number): Promise<TurnTime> {
  const started = process.hrtime.bigint();
  await client.call(commitPath, commitRequest({ conversationId, deltas: [appendHistory([textMessage(`${conversationId}-t${turn}-${started}`, Role.USER, prose(100_000 + turn, 250))])] }));
  const committed = process.hrtime.bigint();
  await client.call(compilePath, compileRequest(conversationId));
  const done = process.hrtime.bigint();
  return { total: Number(done - started) / 1e6, commit: Number(committed - started) / 1e6, compile: Number(done - committed) / 1e6 };
}

export const percentile = (values: readonly number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
};
export const ms = (value: number) => `${value.toFixed(2)} ms`;
export const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`;
export const verdict = (met: boolean) => (met ? "met" : "NOT met");
export const loadAverage = () => `${loadavg().map((value) => value.toFixed(2)).join(" / ")} (1/5/15 min; the cores are shared with other work)`;
