// A sidecar restart under a running client: watch resumes after the last change it yielded, and
// the client's connection comes back, on a Redis store that outlives the process.
// redis.ts is the repository's test/support helper, copied next to this file by
// scripts/test-installed.sh.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, remember } from "@contextd/client";
import { startRedis } from "./redis.ts";
import { freshId, startSidecar, type Sidecar } from "./sidecar.ts";

test("watch resumes after a sidecar restart from the last change it yielded, losing and repeating none", async () => {
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
        second = await startSidecar(["--redis-url", redis.url, "--port", port]);
        await client.commit({ conversationId, deltas: [remember("three")] });
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
