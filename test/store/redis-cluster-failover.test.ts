import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConversationService } from "../../gen/ts/contextd/v1/conversation_service_pb.js";
import { Role } from "../../gen/ts/contextd/v1/message_pb.js";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "../../gen/ts/grpc/health/v1/health_pb.js";
import { conversationKeys } from "../../src/store/redis-scripts.js";
import { grpcJsClient } from "../support/grpc-js.js";
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";
import { startSidecar, type Sidecar } from "../support/sidecar.js";
import { appendHistory, textMessage } from "./fixtures.js";

// A master of a real cluster killed (SIGKILL) while a sidecar commits to conversations on every
// master: its replica is promoted (cluster-node-timeout 1 s), the sidecar answers UNAVAILABLE for
// that master's conversations during the switch and recovers by itself. With --redis-wait-replicas 1
// no acknowledged commit is lost; without it the test reports how many were (replication is
// asynchronous, so a commit acknowledged just before the kill may be missing from the replica).

const writers = 12;
const turns = 30;

interface Outcome {
  unavailable: number;
  notServing: boolean;
  acknowledged: Map<string, string[]>;
  stored: Map<string, string[]>;
}

async function commitThroughFailover(cluster: RedisCluster, sidecar: Sidecar): Promise<Outcome> {
  const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
  const acknowledged = new Map<string, string[]>();
  let unavailable = 0;
  let notServing = false;
  let done = false;
  // An agent's loop: retry UNAVAILABLE with the same idempotency key (a commit that applied but
  // whose answer was lost is then answered from its record), re-read the version on ABORTED.
  const append = async (conversationId: string, messageId: string) => {
    let expected: bigint | undefined;
    for (let attempt = 0; attempt < 1_000; attempt++) {
      try {
        expected ??= (await client.unary(ConversationService.method.getState, { conversationId })).state!.version;
        await client.unary(ConversationService.method.commit, {
          conversationId,
          expectedVersion: expected,
          deltas: [appendHistory(textMessage(messageId, Role.USER, messageId))],
          idempotencyKey: messageId,
        });
        return;
      } catch (error) {
        const serviceError = error as grpc.ServiceError;
        if (serviceError.code === grpc.status.ABORTED) {
          expected = BigInt(String(serviceError.metadata.get("contextd-current-version")[0]));
        } else if (serviceError.code === grpc.status.UNAVAILABLE) {
          unavailable++;
          expected = undefined;
          await new Promise((resolve) => setTimeout(resolve, 20));
        } else {
          throw error;
        }
      }
    }
    throw new Error(`${messageId}: not acknowledged after 1,000 attempts`);
  };
  try {
    const conversationIds = Array.from({ length: writers }, (_, writer) => `failover-${sidecar.port}-${writer}`);
    const victim = await cluster.masterOf(conversationKeys("contextd", conversationIds[0]!).version);
    const heir = await cluster.replicaOf(victim);
    let total = 0;
    const writing = conversationIds.map(async (conversationId, writer) => {
      const mine: string[] = [];
      acknowledged.set(conversationId, mine);
      for (let turn = 0; turn < turns; turn++) {
        const messageId = `w${writer}-t${turn}`;
        await append(conversationId, messageId);
        mine.push(messageId);
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
      // Once its replica took over, the killed node comes back (empty: no persistence) as that
      // replica's replica, from its nodes.conf: with --redis-wait-replicas 1 commits to that
      // shard wait for it.
      while ((await heir.role()) !== "master") await new Promise((resolve) => setTimeout(resolve, 50));
      await cluster.settled();
      await victim.restart();
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
    return { unavailable, notServing, acknowledged, stored };
  } finally {
    client.close();
  }
}

const variants = [
  ["with --redis-wait-replicas 1", ["--redis-wait-replicas", "1"]],
  ["without replica acknowledgement", []],
] as const;

describe("Redis Cluster failover under commit load", () => {
  // One cluster and sidecar per variant, started together; the two variants run at the same time.
  const setups: { cluster: RedisCluster; sidecar: Sidecar }[] = [];
  beforeAll(async () => {
    setups.push(
      ...(await Promise.all(
        variants.map(async ([, flags]) => {
          const cluster = await startRedisCluster();
          const sidecar = await startSidecar(["--redis-cluster-nodes", cluster.addresses.join(","), "--health-interval-ms", "100", "--redis-wait-timeout-ms", "250", ...flags]);
          return { cluster, sidecar };
        }),
      )),
    );
  }, 30_000);
  afterAll(async () => {
    await Promise.all(setups.map(async ({ cluster, sidecar }) => {
      await sidecar.stop();
      await cluster.stop();
    }));
  });

  it.concurrent.each(variants.map(([label, flags], index) => [label, flags, index] as const))(
    "%s: answers UNAVAILABLE while a killed master's replica takes over, then recovers without a restart",
    async (label, flags, index) => {
      const { cluster, sidecar } = setups[index]!;
      const outcome = await commitThroughFailover(cluster, sidecar);
      expect(outcome.unavailable, "commits hit the failover").toBeGreaterThan(0);
      expect(outcome.notServing, "health said NOT_SERVING during the switch").toBe(true);
      let lost = 0;
      for (const [conversationId, acknowledged] of outcome.acknowledged) {
        const stored = outcome.stored.get(conversationId)!;
        // Never twice: a retried commit is answered from its idempotency record.
        expect(new Set(stored).size, conversationId).toBe(stored.length);
        const missing = acknowledged.filter((id) => !stored.includes(id));
        lost += missing.length;
        if (missing.length > 0) console.log(conversationId, "missing", missing.join(","), "stored", stored.join(","));
        if (flags.length > 0) expect(missing, `${conversationId}: acknowledged commits lost`).toEqual([]);
      }
      // Without acknowledgement a loss is possible, not certain: the figure goes to the test output.
      console.log(`failover ${label}: ${outcome.unavailable} UNAVAILABLE answers, ${lost} of ${writers * turns} acknowledged commits lost`);
      // Every writer got through all its turns after the failover: the sidecar recovered by itself.
      expect([...outcome.acknowledged.values()].every((ids) => ids.length === turns)).toBe(true);
      expect(await sidecar.stop()).toBe(0);
    },
    60_000,
  );
});
