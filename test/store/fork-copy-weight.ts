import { expect } from "vitest";
import { Role } from "#gen/contextd/v1/message_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import type { PostgresConversationStore } from "../../src/store/postgres-conversation-store.js";
import type { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { appendHistory, textMessage } from "./fixtures.js";

/**
 * What both shared-segments suites show of a fork's decoded copy under `bound` (`--decoded-state-bytes`
 * that holds one 5,000-message copy weighed in full, not two): the fork's copy weighs only what it
 * does not share with its source's, so both are held, commits to either read nothing and answer as
 * a fresh reader reads (`expectFresh`), what the copies weigh stays under the bound, and once the
 * source is deleted the fork's copy weighs the messages it shared (the heap still holds them).
 * `grow` writes the source's 5,000 messages.
 */
export async function expectForkCopyWeighedOnce(
  store: RedisConversationStore | PostgresConversationStore,
  bound: number,
  grow: (conversationId: string) => Promise<unknown>,
  expectFresh: (conversationId: string, state: ConversationState) => Promise<void>,
): Promise<void> {
  await grow("unseeded-source");
  const alone = store.heldCopies.decodedStates.bytes;
  expect(alone * 2).toBeGreaterThan(bound);
  await store.fork("unseeded-source", undefined, "unseeded-fork");
  expect(store.heldCopies.decodedStates.count).toBe(2);
  expect(store.heldCopies.decodedStates.bytes - alone).toBeLessThan(alone / 10);
  const before = store.commitTraffic;
  const { state: grown } = await store.commit("unseeded-source", undefined, [appendHistory(textMessage("more", Role.USER, "more"))], "");
  const { state: fork } = await store.commit("unseeded-fork", undefined, [appendHistory(textMessage("f0", Role.USER, "fork"))], "");
  expect(store.commitTraffic).toEqual({ ...before, writes: before.writes + 2 });
  await expectFresh("unseeded-source", grown!);
  await expectFresh("unseeded-fork", fork!);
  expect(store.heldCopies.decodedStates.bytes).toBeLessThanOrEqual(bound);
  await store.delete("unseeded-source", undefined);
  expect(store.heldCopies.decodedStates.count).toBe(1);
  expect(store.heldCopies.decodedStates.bytes).toBeGreaterThan(alone * 0.9);
  const after = store.commitTraffic;
  await store.commit("unseeded-fork", undefined, [appendHistory(textMessage("f1", Role.USER, "fork"))], "");
  expect(store.commitTraffic).toEqual({ ...after, writes: after.writes + 1 });
}
