// What RedisConnection.call answers for what fails inside it: a refused or lost connection is
// UNAVAILABLE (a client retries it), a JavaScript engine's RangeError or TypeError is this
// sidecar's own bug and INTERNAL (a retry would fail the same way); a command unanswered for its
// command timeout is UNAVAILABLE. Against a real redis-server.
import { Code, ConnectError } from "@connectrpc/connect";
import { once } from "node:events";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisConnection } from "../../src/store/redis-connection.js";
import { startRedis, type RedisProcess } from "../support/redis.js";

let redis: RedisProcess;
let connection: RedisConnection;
beforeAll(async () => {
  redis = await startRedis();
  connection = new RedisConnection(redis.url, undefined);
  if (connection.redis.status !== "ready") await once(connection.redis, "ready");
});
afterAll(async () => {
  connection.redis.disconnect();
  await redis.stop();
});

const codeOf = (promise: Promise<unknown>) =>
  promise.then(
    () => undefined,
    (error: unknown) => ConnectError.from(error),
  );

describe("RedisConnection.call", () => {
  it("answers INTERNAL for a RangeError or TypeError of the sidecar's own, naming what it was doing", async () => {
    const overflow = await codeOf(connection.call("forking a conversation", () => connection.redis.get("k").then(() => { throw new RangeError("Maximum call stack size exceeded"); })));
    expect(overflow?.code).toBe(Code.Internal);
    expect(overflow?.rawMessage).toBe("the sidecar failed while forking a conversation: Maximum call stack size exceeded");
    expect((await codeOf(connection.call("reading", async () => { throw new TypeError("x is undefined"); })))?.code).toBe(Code.Internal);
  });

  it("gives a command up after its command timeout as UNAVAILABLE, and waits the longer timeout out", async () => {
    // A stopped redis-server (SIGSTOP) keeps its socket open and answers nothing: a hang.
    const short = new RedisConnection(redis.url, undefined, 150);
    const long = new RedisConnection(redis.url, undefined, 10_000);
    try {
      await Promise.all([short, long].map((each) => (each.redis.status === "ready" ? undefined : once(each.redis, "ready"))));
      process.kill(redis.pid()!, "SIGSTOP");
      let stopped = true;
      try {
        const waited = long.call("reading a conversation", () => long.redis.set("waited", "1"));
        const failure = await codeOf(short.call("reading a conversation", () => short.redis.get("k")));
        expect(failure?.code).toBe(Code.Unavailable);
        expect(failure?.rawMessage).toContain("Command timed out");
        await new Promise((resolve) => setTimeout(resolve, 500));
        process.kill(redis.pid()!, "SIGCONT");
        stopped = false;
        expect(await waited).toBe("OK");
      } finally {
        if (stopped) process.kill(redis.pid()!, "SIGCONT");
      }
      expect(await connection.redis.get("waited")).toBe("1");
    } finally {
      short.redis.disconnect();
      long.redis.disconnect();
    }
  });

  it("answers UNAVAILABLE for a Redis that is gone", async () => {
    const gone = new RedisConnection(`redis://127.0.0.1:1`, undefined);
    try {
      const failure = await codeOf(gone.call("reading a conversation", () => gone.redis.get("k")));
      expect(failure?.code).toBe(Code.Unavailable);
      expect(failure?.rawMessage).toMatch(/^redis store unavailable while reading a conversation at redis:\/\/127\.0\.0\.1:1/);
    } finally {
      gone.redis.disconnect();
    }
  });
});
