// `node dist/bench/store-round-robin.js`: the round-robin commit of bench:fleet's "Round-robin" in one
// process, without the RPC and without two sidecar processes on the shared cores: two Redis stores on
// one Redis take a conversation's commits (one ~250-byte message, no state asked back) in turn,
// beside the same commits by one store alone (the warm commit, the anchor), at 1,000 and 10,000
// stored messages, with commit notices off (--prefetch-conversations 0) and on (1,024) in the same
// run. Store a read the conversation whole (its copy); store b holds only the kept tail, as the
// fleet bench's two sidecars do. Each commit is followed by a 3 ms pause (a turn's compile, while a
// notice is caught up in the background). Why it exists: the fleet bench's figures on this shared
// 2-core machine moved by more than the round trip the notices take off the commit; here the
// commit's own latency, round trips (EVAL/EVALSHA per commit, INFO commandstats) and reads show it.
// CONTEXTD_ROUND_ROBIN_REDIS=cluster: the two stores on one Redis Cluster (three masters, a replica
// each) instead of one Redis, with the notices on sharded pub/sub; the script calls are summed over
// every node's commandstats.
import { Redis } from "ioredis";
import { Role } from "#gen/contextd/v1/message_pb";
import { Codec } from "../src/codec/codec.js";
import { storedTokenEstimator } from "../src/server/operations/stored-token-estimator.js";
import { RedisConversationStore } from "../src/store/redis-conversation-store.js";
import { startRedis } from "../test/support/redis.js";
import { startRedisCluster } from "../test/support/redis-cluster.js";
import { appendHistory, textMessage } from "../test/store/fixtures.js";

const commitsPerBlock = 20;
const blocks = 4;
const pause = () => new Promise((resolve) => setTimeout(resolve, 3));
const p50 = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const text = "a sentence of the agent's conversation, some forty bytes long. ".repeat(4);

const onCluster = process.env.CONTEXTD_ROUND_ROBIN_REDIS === "cluster";
if (!onCluster && (process.env.CONTEXTD_ROUND_ROBIN_REDIS ?? "redis") !== "redis") throw new Error(`CONTEXTD_ROUND_ROBIN_REDIS is redis or cluster, not ${process.env.CONTEXTD_ROUND_ROBIN_REDIS}`);
const redis = onCluster ? await startRedisCluster() : await startRedis();
const target = "addresses" in redis ? { clusterNodes: redis.addresses } : redis.url;
// Every node: a cluster's commits run on the conversation's master, whichever that is.
const raw = "addresses" in redis ? redis.nodes.map((node) => new Redis({ port: node.port })) : [new Redis(redis.url)];
const scriptCalls = async () => {
  let calls = 0;
  for (const node of raw) {
    const stats = await node.info("commandstats");
    calls += ["eval", "evalsha"].reduce((sum, name) => sum + Number(new RegExp(`^cmdstat_${name}:calls=(\\d+)`, "m").exec(stats)?.[1] ?? 0), 0);
  }
  return calls;
};
try {
  console.log(`round-robin commits in one process, two Redis stores on one ${onCluster ? "Redis Cluster" : "Redis"}; load average ${(await import("node:os")).loadavg().map((value) => value.toFixed(2)).join(" / ")}`);
  for (const size of [1_000, 10_000]) {
    for (const prefetchConversations of [0, 1_024]) {
      const open = async () => new RedisConversationStore(target, { prefetchConversations, codec: new Codec(undefined, await storedTokenEstimator("openai_chat:gpt-4o")) });
      const [a, b] = [await open(), await open()];
      await Promise.all([a.connected(), b.connected()]);
      const id = `round-robin-${size}-${prefetchConversations}`;
      for (let start = 0; start < size; start += 500) {
        await a.commit(id, undefined, [appendHistory(...Array.from({ length: 500 }, (_, offset) => textMessage(`${id}-${start + offset}`, Role.USER, text)))], "", undefined, undefined, { withState: false });
      }
      await a.load(id);
      let turn = 0;
      const commit = async (store: RedisConversationStore) => {
        const started = process.hrtime.bigint();
        await store.commit(id, undefined, [appendHistory(textMessage(`${id}-t${turn++}`, Role.USER, text))], "", undefined, undefined, { withState: false });
        const elapsed = Number(process.hrtime.bigint() - started) / 1e6;
        await pause();
        return elapsed;
      };
      for (let warmUp = 0; warmUp < 10; warmUp++) await commit(warmUp % 2 === 0 ? a : b);
      const warm: number[] = [];
      const roundRobin: number[] = [];
      let roundRobinScripts = 0;
      const reads = () => a.commitTraffic.wholeReads + a.commitTraffic.tailReads + b.commitTraffic.wholeReads + b.commitTraffic.tailReads;
      let roundRobinReads = 0;
      for (let block = 0; block < blocks; block++) {
        for (let index = 0; index < commitsPerBlock; index++) warm.push(await commit(a));
        const [scriptsBefore, readsBefore] = [await scriptCalls(), reads()];
        for (let index = 0; index < commitsPerBlock; index++) roundRobin.push(await commit(index % 2 === 0 ? b : a));
        roundRobinScripts += (await scriptCalls()) - scriptsBefore;
        roundRobinReads += reads() - readsBefore;
      }
      const count = blocks * commitsPerBlock;
      console.log(
        `  ${size.toLocaleString("en-US")} messages, --prefetch-conversations ${prefetchConversations}: warm commit p50 ${p50(warm).toFixed(3)} ms, round-robin ${p50(roundRobin).toFixed(3)} ms ` +
          `(${(p50(roundRobin) / p50(warm)).toFixed(2)}x; per round-robin commit ${(roundRobinScripts / count).toFixed(2)} script calls with the catch-ups, reads before a commit ${(roundRobinReads / count).toFixed(2)})`,
      );
      await a.close();
      await b.close();
    }
  }
} finally {
  for (const node of raw) node.disconnect();
  await redis.stop();
}
