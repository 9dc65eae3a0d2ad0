import type * as grpc from "@grpc/grpc-js";
import { status } from "@grpc/grpc-js";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { appendHistory, textMessage } from "../store/fixtures.js";
import type { grpcJsClient } from "./grpc-js.js";

/** What six writers saw while their store went down and came back. */
export interface OutageOutcome {
  /** The message ids whose commits were acknowledged. */
  acknowledged: string[];
  /** How many commit attempts were answered UNAVAILABLE. */
  unavailable: number;
  /** The conversation as stored afterwards. */
  state: ConversationState;
}

/**
 * Six writers append 15 messages each to one conversation through a real sidecar, the way an
 * agent's loop would: UNAVAILABLE is retried with the same idempotency key (a commit that applied
 * but whose answer was lost is then answered from its record), ABORTED re-reads the version from
 * the trailer. Once 12 commits are acknowledged, `interrupt` takes the store down and, 300 ms
 * later, `restore` brings it back. Shared by the Redis and Postgres outage tests, which assert that
 * every acknowledged commit is stored exactly once.
 */
export async function commitThroughOutage(
  client: ReturnType<typeof grpcJsClient>,
  conversationId: string,
  interrupt: () => Promise<void>,
  restore: () => Promise<void>,
): Promise<OutageOutcome> {
  let unavailable = 0;
  const appendThroughOutage = async (messageId: string) => {
    let expected: bigint | undefined;
    for (let attempt = 0; attempt < 500; attempt++) {
      try {
        expected ??= (await client.unary(ConversationService.method.getState, { conversationId })).state!.version;
        return await client.unary(ConversationService.method.commit, {
          conversationId,
          expectedVersion: expected,
          deltas: [appendHistory(textMessage(messageId, Role.USER, messageId))],
          idempotencyKey: messageId,
        });
      } catch (error) {
        const serviceError = error as grpc.ServiceError;
        if (serviceError.code === status.ABORTED) {
          expected = BigInt(String(serviceError.metadata.get("contextd-current-version")[0]));
        } else if (serviceError.code === status.UNAVAILABLE) {
          unavailable++;
          await new Promise((resolve) => setTimeout(resolve, 20));
        } else {
          throw error;
        }
      }
    }
    throw new Error(`${messageId}: not acknowledged after 500 attempts`);
  };
  const acknowledged: string[] = [];
  const writers = Array.from({ length: 6 }, async (_, writer) => {
    for (let turn = 0; turn < 15; turn++) {
      await appendThroughOutage(`w${writer}-t${turn}`);
      acknowledged.push(`w${writer}-t${turn}`);
    }
  });
  const outage = (async () => {
    while (acknowledged.length < 12) await new Promise((resolve) => setTimeout(resolve, 5));
    await interrupt();
    await new Promise((resolve) => setTimeout(resolve, 300));
    await restore();
  })();
  await Promise.all([...writers, outage]);
  const state = (await client.unary(ConversationService.method.getState, { conversationId })).state!;
  return { acknowledged, unavailable, state };
}
