import { Code, ConnectError } from "@connectrpc/connect";
import { Cluster, type ChainableCommander, type Redis } from "ioredis";
import { clusterRedirection } from "./redis-cluster-redirection.js";
import { clusterNode, commitScriptKeys, redisClusterOptions, type RedisConnection, type Scripts } from "./redis-connection.js";
import { commitScript, type ConversationKeys } from "./redis-scripts.js";

/**
 * `--redis-wait-replicas`: the commit script with a `WAIT` right behind it, and what a commit or
 * a replay is answered when fewer replicas acknowledged it. Why it exists apart from the store:
 * on a cluster the pair must follow redirections itself (see `behindWait`), which is most of it.
 */
export class RedisReplicaAcknowledgement {
  constructor(
    private readonly connection: RedisConnection,
    /** Replicas that must acknowledge a commit; 0 = none. */
    readonly waitReplicas: number,
    private readonly waitTimeoutMs: number,
  ) {}

  /**
   * The commit script, and with `waitReplicas` a `WAIT` right behind it on the same connection
   * (pipelined: on a cluster both go to the master of the conversation's slot, which is the node
   * whose replicas WAIT counts). `acknowledged` is how many replicas had the script's writes.
   */
  async runCommitScript(...args: (string | Buffer | number | (string | Buffer)[])[]): Promise<{ reply: (Buffer | null)[]; acknowledged: number }> {
    if (this.waitReplicas === 0) return { reply: await this.connection.redis.contextdCommitBuffer(...args), acknowledged: 0 };
    const [[scriptError, reply], [waitError, acknowledged]] = await this.behindWait((pipeline, onNode) => {
      // A node's own connection has not had the script defined: EVAL it (only on a redirection).
      if (onNode) pipeline.callBuffer("EVAL", commitScript, commitScriptKeys, ...(args.flat() as (string | Buffer | number)[]));
      else (pipeline as ChainableCommander & Scripts).contextdCommitBuffer(...args);
    });
    if (scriptError) throw scriptError;
    if (waitError) throw waitError;
    return { reply: reply as (Buffer | null)[], acknowledged: Number(acknowledged) };
  }

  /** UNAVAILABLE when `waitReplicas` is on and fewer replicas than it acknowledged the commit of `version`. */
  requireReplicated(conversationId: string, version: bigint, acknowledged: number): void {
    if (acknowledged >= this.waitReplicas) return;
    throw new ConnectError(
      `conversation "${conversationId}": version ${version} was written on the Redis master but only ${acknowledged} of ${this.waitReplicas} replicas ` +
        `acknowledged it within ${this.waitTimeoutMs} ms, so a failover may lose it; retry with the same idempotency key (a retry replays it if it survived)`,
      Code.Unavailable,
    );
  }

  /**
   * How many replicas have every write this process made on its connection to the conversation's
   * master (a replay's original commit was one of them unless the connection was made anew since):
   * a `WAIT` behind a read of the conversation's version, so on a cluster both go to its master.
   */
  async replicasAcknowledging(keys: ConversationKeys): Promise<number> {
    return this.connection.call("waiting for replicas", async () => {
      const [[readError], [waitError, acknowledged]] = await this.behindWait((pipeline) => pipeline.get(keys.version));
      if (readError) throw readError;
      if (waitError) throw waitError;
      return Number(acknowledged);
    });
  }

  /**
   * The replies of one command (queued by `queue` on the pipeline) and a `WAIT` behind it on the
   * same connection. On a cluster, a refusal of the command that Redis answers before running it
   * (`clusterRedirection`) is followed here: the cluster client follows a redirection in a pipeline
   * only when every reply is the same error, and `WAIT` answers a count wherever it runs, so
   * without this a commit pipeline refused with MOVED after a failover kept failing until some
   * other command taught the client the new slot map. The `WAIT` reply of a refused attempt counts
   * replicas of a node that wrote nothing and is dropped; the pair is sent again (`onNode` true when
   * to a node's own connection, where only the built-in commands exist), up to the cluster's
   * redirection limit.
   */
  private async behindWait(queue: (pipeline: ChainableCommander, onNode: boolean) => void): Promise<[Error | null, unknown][]> {
    const redis = this.connection.redis;
    const send = async (target: Redis | Cluster, asking: boolean) => {
      const pipeline = target.pipeline();
      if (asking) pipeline.asking();
      queue(pipeline, target !== redis);
      pipeline.call("WAIT", this.waitReplicas, this.waitTimeoutMs);
      const replies = (await pipeline.exec()) as [Error | null, unknown][];
      return asking ? replies.slice(1) : replies;
    };
    let [target, asking]: [Redis | Cluster, boolean] = [redis, false];
    let replies = await send(target, asking);
    if (!(redis instanceof Cluster)) return replies;
    for (let redirections = 0; redirections < redisClusterOptions.maxRedirections!; redirections++) {
      const redirection = clusterRedirection(replies[0]![0]);
      if (redirection === undefined) break;
      if (redirection.kind === "moved" || redirection.kind === "ask") {
        // MOVED: later commands route by a refreshed map; this one goes to the named node now.
        if (redirection.kind === "moved") redis.refreshSlotsCache();
        [target, asking] = [await clusterNodeAt(redis, redirection.address), redirection.kind === "ask"];
      } else {
        // TRYAGAIN, CLUSTERDOWN: the same node (behind ASKING again if it was asked), after a pause.
        await new Promise((resolve) => setTimeout(resolve, redisClusterOptions.retryDelayOnTryAgain));
      }
      replies = await send(target, asking);
    }
    return replies;
  }
}

/** The cluster client's connection to the node at `address` ("host:port"), once more after a slot map refresh if it knows none. */
async function clusterNodeAt(cluster: Cluster, address: string): Promise<Redis> {
  const { host, port } = clusterNode(address);
  const find = () => cluster.nodes("all").find((node) => node.options.host === host && node.options.port === port);
  const known = find() ?? (await new Promise<void>((resolve) => cluster.refreshSlotsCache(() => resolve())), find());
  if (known === undefined) throw new Error(`the cluster redirected a command to ${address}, a node its client does not know (yet)`);
  return known;
}
