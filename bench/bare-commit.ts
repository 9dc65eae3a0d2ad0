// The bare commit script, the anchor the store benchmarks print beside the store and the RPC: the
// same Lua with the keys and arguments the store sends (`commitScriptArguments`, shared with
// RedisConversationStore), for a commit that appends messages to the history. Why it exists: the
// benchmarks once built the call themselves and kept sending the commit script's first 8 keys
// after it took 12, so `npm run bench:store` stopped with a Lua error instead of a figure. A reply
// other than {'ok', version} throws here, and test/bench/bare-commit.test.ts reads what these
// calls write back through the store.
import { create, toBinary } from "@bufbuild/protobuf";
import type { Cluster, Redis } from "ioredis";
import { ChangeSchema } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, type Message } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, DeltaSchema, Segment } from "#gen/contextd/v1/state_pb";
import { encodeStateRest } from "../src/codec/state-encoding.js";
import { commitScriptKeys } from "../src/store/redis-connection.js";
import { commitScript, commitScriptArguments, conversationKeys, type CommitScriptCall } from "../src/store/redis-scripts.js";
import { storedSegments } from "../src/store/segment-edits.js";
import { idIndexArguments } from "../src/store/stored-id-index.js";

/** A Redis or Cluster client with the bare commit script defined on it (`defineBareCommit`). */
export type BareCommitClient = (Redis | Cluster) & { bareCommit(...args: (string | Buffer | number | (string | Buffer)[])[]): Promise<unknown> };

/** Defines the commit script on `client` as the command `bareCommit`, with the store's key count. */
export function defineBareCommit(client: Redis | Cluster): BareCommitClient {
  client.defineCommand("bareCommit", { numberOfKeys: commitScriptKeys, lua: commitScript });
  return client as BareCommitClient;
}

/**
 * The call of a commit appending `messages` to the history of a conversation at `expectedVersion`
 * whose history holds `historyLength` messages, as the store makes it (no idempotency key, index
 * kept current, no expiry): a first commit (`expectedVersion` 0n) carries the state's rest. The
 * messages are in their plain encoding, which a stored history entry may be (Codec.decodeStoredEntry).
 */
export function bareAppendCall(conversationId: string, expectedVersion: bigint, historyLength: number, messages: readonly Message[]): CommitScriptCall {
  const appended = create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: [...messages] } } });
  const first = expectedVersion === 0n;
  return {
    idempotencyKey: "",
    expectedVersion,
    change: Buffer.from(toBinary(ChangeSchema, create(ChangeSchema, { version: expectedVersion + 1n, deltas: [appended] }))),
    fingerprint: "",
    idempotencyTtlSeconds: 86_400,
    maxChanges: 10_000,
    created: `bare-${conversationId}`,
    rest: first ? Buffer.from(encodeStateRest(create(ConversationStateSchema, { conversationId }))) : undefined,
    updatedAtUnixMs: BigInt(Date.now()),
    metadata: first ? { title: "", labels: "{}" } : undefined,
    segments: storedSegments.map((segment) =>
      segment === "history"
        ? { mode: "p" as const, baseLength: historyLength, keep: historyLength, encodings: messages.map((message) => Buffer.from(toBinary(MessageSchema, message))) }
        : { mode: "=" as const, baseLength: 0, keep: 0, encodings: [] },
    ),
    idIndex: idIndexArguments({ mode: "a", addedIds: messages.map((message) => message.id), removedIds: [], madeCalls: [], removedCalls: [] }),
    expiresAtUnixMs: undefined,
  };
}

/** Runs `call` on the conversation's keys under `keyPrefix`; throws unless the script answers {'ok', version}. */
export async function runBareCommit(client: BareCommitClient, keyPrefix: string, conversationId: string, call: CommitScriptCall): Promise<void> {
  const reply = (await client.bareCommit(...commitScriptArguments(conversationKeys(keyPrefix, conversationId), call))) as unknown[];
  if (String(reply[0]) !== "ok") throw new Error(`the bare commit script answered ${JSON.stringify(reply.map(String))} for ${conversationId} at version ${call.expectedVersion}`);
}
