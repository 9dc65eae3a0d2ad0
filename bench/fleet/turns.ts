// What the fleet sections share: a conversation of ~250-byte messages (the size issue 30 measured
// with), the agent turn (a Commit appending one message, then a stateful Compile rendered for
// OpenAI Chat with an 8,000-token budget), and the figures.
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { CompileRequestSchema } from "../../gen/ts/contextd/v1/compile_pb.js";
import { ContextService } from "../../gen/ts/contextd/v1/context_service_pb.js";
import { CommitRequestSchema, ConversationService } from "../../gen/ts/contextd/v1/conversation_service_pb.js";
import { MessageSchema, Provider, Role, type Message } from "../../gen/ts/contextd/v1/message_pb.js";
import { DeltaSchema, Segment, type Delta } from "../../gen/ts/contextd/v1/state_pb.js";
import type { MinimalGrpcClient } from "../minimal-grpc-client.js";

export const commitPath = `/${ConversationService.typeName}/${ConversationService.method.commit.name}`;
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

const append = (messages: Message[]): Delta => create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages } } });
const commitRequest = (request: MessageInitShape<typeof CommitRequestSchema>) => Buffer.from(toBinary(CommitRequestSchema, create(CommitRequestSchema, request)));

/** Writes `size` alternating user/assistant messages of ~`bytes` each, in commits of ~512 KB. */
export async function seedConversation(client: MinimalGrpcClient, conversationId: string, size: number, bytes = 250): Promise<void> {
  const perCommit = Math.max(1, Math.floor(512_000 / bytes));
  for (let from = 0; from < size; from += perCommit) {
    const batch: Message[] = [];
    for (let index = from; index < Math.min(size, from + perCommit); index++) {
      batch.push(textMessage(`${conversationId}-${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, prose(index, bytes)));
    }
    await client.call(commitPath, commitRequest({ conversationId, deltas: [append(batch)] }));
  }
}

/** The compile of an agent turn: budget 8,000 tokens, rendered for OpenAI Chat with gpt-4o (o200k). */
export function compileRequest(conversationId: string): Buffer {
  return Buffer.from(toBinary(CompileRequestSchema, create(CompileRequestSchema, { conversationId, budget: { maxTokens: 8_000n }, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" } })));
}

/** One agent turn; the commit's and the compile's milliseconds. */
export async function turn(client: MinimalGrpcClient, conversationId: string, number: number): Promise<{ commit: number; compile: number; total: number }> {
  const started = process.hrtime.bigint();
  await client.call(commitPath, commitRequest({ conversationId, deltas: [append([textMessage(`${conversationId}-t${number}-${Date.now()}`, Role.USER, prose(100_000 + number, 250))])] }));
  const committed = process.hrtime.bigint();
  await client.call(compilePath, compileRequest(conversationId));
  const done = process.hrtime.bigint();
  return { commit: Number(committed - started) / 1e6, compile: Number(done - committed) / 1e6, total: Number(done - started) / 1e6 };
}

export const percentile = (values: readonly number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
};
export const ms = (value: number) => `${value.toFixed(2)} ms`;
export const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`;
