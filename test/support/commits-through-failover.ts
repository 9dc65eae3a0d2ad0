import * as grpc from "@grpc/grpc-js";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { conversationKeys } from "../../src/store/redis-scripts.js";
import { appendHistory, textMessage } from "../store/fixtures.js";
import { grpcJsClient } from "./grpc-js.js";
import type { ClusterNode, RedisCluster } from "./redis-cluster.js";

/** What the writers saw while a master of the cluster was killed and its replica took over. */
export interface FailoverOutcome {
  writers: number;
  turns: number;
  /** Commit attempts answered UNAVAILABLE. */
  unavailable: number;
  /** Whether health said anything but SERVING at some point. */
  notServing: boolean;
  /** Per conversation, the message ids whose commits were acknowledged, in order. */
  acknowledged: Map<string, string[]>;
  /** Per conversation, the message ids stored afterwards. */
  stored: Map<string, string[]>;
  /** How many of the conversations live on the killed master's shard. */
  victimConversations: number;
  /**
   * From the moment the killed master's replica reported itself master to the first commit to a
   * conversation of that shard acknowledged after it (undefined if none was), in milliseconds.
   */
  resumedAfterPromotionMs: number | undefined;
  /** From the promotion to the new master having a replica in sync (the restarted node, or another replica). */
  replicaBackAfterPromotionMs: number;
}

/**
 * `writers` agents each append `turns` messages to their own conversation through `sidecar`, on a
 * real cluster whose master of the first conversation's slot is killed (SIGKILL) once 5 turns per
 * writer are acknowledged; once a replica of it is master the killed node comes back (empty) as
 * a replica. The writers ONLY commit: each keeps the version its last commit answered,
 * retries UNAVAILABLE with the same idempotency key and expected version (a commit that applied but
 * whose answer was lost is then answered from its record) and takes the current version from the
 * ABORTED trailer. No read goes to the store between commits, so nothing but the commit path can
 * teach the sidecar's cluster client where the slot went. The stored states are read once at the end.
 */
export async function commitThroughFailover(cluster: RedisCluster, sidecarPort: number, writers = 12, turns = 30): Promise<FailoverOutcome> {
  const client = grpcJsClient(`127.0.0.1:${sidecarPort}`);
  const acknowledged = new Map<string, string[]>();
  const acknowledgedAt = new Map<string, number[]>();
  let unavailable = 0;
  let notServing = false;
  let done = false;
  const append = async (conversationId: string, expected: bigint, messageId: string): Promise<bigint> => {
    for (let attempt = 0; attempt < 1_000; attempt++) {
      try {
        const response = await client.unary(ConversationService.method.commit, {
          conversationId,
          expectedVersion: expected,
          deltas: [appendHistory(textMessage(messageId, Role.USER, messageId))],
          idempotencyKey: messageId,
        });
        return response.version;
      } catch (error) {
        const serviceError = error as grpc.ServiceError;
        if (serviceError.code === grpc.status.ABORTED) {
          expected = BigInt(String(serviceError.metadata.get("contextd-current-version")[0]));
        } else if (serviceError.code === grpc.status.UNAVAILABLE) {
          unavailable++;
          await new Promise((resolve) => setTimeout(resolve, 20));
        } else {
          throw error;
        }
      }
    }
    throw new Error(`${messageId}: not acknowledged after 1,000 attempts`);
  };
  try {
    const conversationIds = Array.from({ length: writers }, (_, writer) => `failover-${sidecarPort}-${writer}`);
    const victimKey = conversationKeys("contextd", conversationIds[0]!).version;
    const victim = await cluster.masterOf(victimKey);
    const onVictim = new Set<string>();
    for (const conversationId of conversationIds) {
      if ((await cluster.masterOf(conversationKeys("contextd", conversationId).version)) === victim) onVictim.add(conversationId);
    }
    let total = 0;
    let promotedAt: number | undefined;
    let replicaBackAt: number | undefined;
    const writing = conversationIds.map(async (conversationId, writer) => {
      const mine: string[] = [];
      const times: number[] = [];
      acknowledged.set(conversationId, mine);
      acknowledgedAt.set(conversationId, times);
      let version = 0n;
      for (let turn = 0; turn < turns; turn++) {
        const messageId = `w${writer}-t${turn}`;
        version = await append(conversationId, version, messageId);
        mine.push(messageId);
        times.push(performance.now());
        total++;
      }
    });
    const health = (async () => {
      while (!done) {
        const status = await client.unary(Health.method.check, { service: "" }).then((response) => response.status, () => ServingStatus.UNKNOWN);
        if (status !== ServingStatus.SERVING) notServing = true;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    })();
    const failover = (async () => {
      while (total < writers * 5) await new Promise((resolve) => setTimeout(resolve, 5));
      await victim.kill();
      // The shard's new master: the replica the cluster promoted (with two replicas, either one).
      let heir: ClusterNode | undefined;
      while (heir === undefined) {
        const master = await cluster.masterOf(victimKey).catch(() => undefined);
        if (master !== undefined && master !== victim && (await master.role()) === "master") heir = master;
        else await new Promise((resolve) => setTimeout(resolve, 20));
      }
      promotedAt = performance.now();
      // With --redis-wait-replicas 1 commits to that shard wait for a replica of the new master: the
      // killed node, which comes back at once (empty: no persistence) as one from its nodes.conf,
      // or with two replicas per master the other one, which follows the new master.
      await victim.restart();
      while ((await heir.onlineReplicas()) < 1) await new Promise((resolve) => setTimeout(resolve, 20));
      replicaBackAt = performance.now();
    })();
    await Promise.all([...writing, failover]);
    done = true;
    await health;
    await cluster.settled();
    const stored = new Map<string, string[]>();
    for (const conversationId of conversationIds) {
      const state = (await client.unary(ConversationService.method.getState, { conversationId })).state!;
      stored.set(conversationId, state.history.map((message) => message.id));
    }
    const resumed = [...onVictim].flatMap((conversationId) => acknowledgedAt.get(conversationId)!.filter((at) => at > promotedAt!));
    const resumedAfterPromotionMs = resumed.length > 0 ? Math.min(...resumed) - promotedAt! : undefined;
    return { writers, turns, unavailable, notServing, acknowledged, stored, victimConversations: onVictim.size, resumedAfterPromotionMs, replicaBackAfterPromotionMs: replicaBackAt! - promotedAt! };
  } finally {
    client.close();
  }
}

/** Acknowledged commits missing from the stored states, and conversations storing a message twice. */
export function failoverLosses(outcome: FailoverOutcome): { lost: Map<string, string[]>; duplicated: string[] } {
  const lost = new Map<string, string[]>();
  const duplicated: string[] = [];
  for (const [conversationId, acknowledged] of outcome.acknowledged) {
    const stored = outcome.stored.get(conversationId)!;
    if (new Set(stored).size !== stored.length) duplicated.push(conversationId);
    const missing = acknowledged.filter((id) => !stored.includes(id));
    if (missing.length > 0) lost.set(conversationId, missing);
  }
  return { lost, duplicated };
}
