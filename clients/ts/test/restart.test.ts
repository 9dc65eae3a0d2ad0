// A sidecar restart under a running client: watch resumes after the last change it yielded, and
// the client's connection comes back, on a Redis store that outlives the process.
// redis.ts is the repository's test/support helper, copied next to this file by
// scripts/test-installed.sh.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, remember } from "@contextd/client";
import { startRedis } from "./redis.ts";
import { freshId, startSidecar, type Sidecar } from "./sidecar.ts";

test("across a sidecar restart a commit is retried until it lands and watch resumes after the last change it yielded", async () => {
  const redis = await startRedis();
  const first = await startSidecar(["--redis-url", redis.url]);
  const port = first.address.slice(first.address.lastIndexOf(":") + 1);
  // Enough attempts to outlast a restart on a loaded machine.
  const client = new Client({ address: first.address, retry: { maxAttempts: 40, initialBackoffMs: 50, maxBackoffMs: 500, multiplier: 2 } });
  let second: Sidecar | undefined;
  try {
    const conversationId = freshId("resume");
    await client.commit({ conversationId, deltas: [remember("one")] });
    await client.commit({ conversationId, deltas: [remember("two")] });
    const seen: bigint[] = [];
    for await (const change of client.watch({ conversationId })) {
      seen.push(change.version);
      if (change.version === 2n) {
        await first.stop();
        // Sent while no sidecar listens: retried with its key until the next one answers.
        const pending = client.commit({ conversationId, deltas: [remember("three")] });
        second = await startSidecar(["--redis-url", redis.url, "--port", port]);
        assert.equal((await pending).version, 3n);
      }
      if (change.version === 3n) break;
    }
    assert.deepEqual(seen, [1n, 2n, 3n]);
  } finally {
    client.close();
    await second?.stop();
    await first.stop();
    await redis.stop();
  }
});
