import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { openConfiguredStore } from "../../../src/server/composition-root.js";
import { loadConfig } from "../../../src/server/operations/config.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";
import { startRedis, type RedisProcess } from "../../support/redis.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

// /metrics of a real sidecar shows what its store holds between calls: the decoded states
// (--decoded-state-bytes) and the kept tails (--kept-tail-bytes), and how its commits used them.
// Values only, never times: each step below changes them by a known amount.

const storeSeries = ["contextd_decoded_states", "contextd_decoded_state_bytes", "contextd_kept_tails", "contextd_kept_tail_bytes", "contextd_kept_tail_commits_total", "contextd_commit_tail_reads_total", "contextd_followed_conversations", "contextd_prefetch_catch_ups_total"];

async function scrape(sidecar: Sidecar): Promise<Record<string, number>> {
  const text = await (await fetch(`${sidecar.url}/metrics`)).text();
  const values: Record<string, number> = {};
  for (const line of text.split("\n")) {
    const [name, value] = line.split(" ");
    if (name !== undefined && storeSeries.includes(name)) values[name] = Number(value);
  }
  return values;
}

describe("store cache gauges (real sidecar, Redis)", () => {
  let redis: RedisProcess;
  let sidecar: Sidecar;
  beforeAll(async () => {
    redis = await startRedis();
    sidecar = await startSidecar(["--redis-url", redis.url]);
  });
  afterAll(async () => {
    await sidecar?.stop();
    await redis?.stop();
  });

  it("show the kept tail of a cold commit, the commit planned on it, and the decoded state a read keeps", async () => {
    const conversationId = `gauges/${process.pid}`;
    // Another sidecar's store wrote the conversation (the same flags, so the same stored token
    // counts): the sidecar holds no copy of it.
    const { store: writer } = await openConfiguredStore(loadConfig(["--redis-url", redis.url], {}), {});
    try {
      await writer.commit(conversationId, undefined, [appendHistory(...Array.from({ length: 200 }, (_, index) => textMessage(`m${index}`, Role.USER, `message ${index} `.repeat(10))))], "");
    } finally {
      await writer.close();
    }
    const conversations = createClient(ConversationService, createGrpcTransport({ baseUrl: sidecar.url }));
    expect(await scrape(sidecar)).toEqual({
      contextd_decoded_states: 0,
      contextd_decoded_state_bytes: 0,
      contextd_kept_tails: 0,
      contextd_kept_tail_bytes: 0,
      contextd_kept_tail_commits_total: 0,
      contextd_commit_tail_reads_total: 0,
      // One sidecar alone: no other writer, nothing followed.
      contextd_followed_conversations: 0,
      contextd_prefetch_catch_ups_total: 0,
    });

    // Cold: the commit reads the stored tail, writes, and keeps the tail.
    await conversations.commit({ conversationId, deltas: [appendHistory(textMessage("cold", Role.USER, "first from the sidecar"))] });
    const cold = await scrape(sidecar);
    expect(cold).toMatchObject({ contextd_decoded_states: 0, contextd_kept_tails: 1, contextd_kept_tail_commits_total: 0, contextd_commit_tail_reads_total: 1 });
    // A tail of 64-128 messages of ~130 bytes, weighed as decoded (640 bytes a message and more).
    expect(cold.contextd_kept_tail_bytes).toBeGreaterThan(64 * 640);

    // The next commit is planned on the kept tail: no read.
    await conversations.commit({ conversationId, deltas: [appendHistory(textMessage("warm", Role.USER, "second from the sidecar"))] });
    expect(await scrape(sidecar)).toMatchObject({ contextd_kept_tails: 1, contextd_kept_tail_commits_total: 1, contextd_commit_tail_reads_total: 1 });

    // A whole read keeps the decoded state (202 messages).
    const state = await conversations.getState({ conversationId });
    expect(state.state?.history.length).toBe(202);
    const read = await scrape(sidecar);
    expect(read.contextd_decoded_states).toBe(1);
    expect(read.contextd_decoded_state_bytes).toBeGreaterThan(202 * 640);
  }, 60_000);
});

describe("store cache gauges (real sidecar, memory store)", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await startSidecar();
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  it("are absent: the memory store holds its conversations, not copies of them", async () => {
    const conversations = createClient(ConversationService, createGrpcTransport({ baseUrl: sidecar.url }));
    await conversations.commit({ conversationId: `gauges-memory/${process.pid}`, deltas: [appendHistory(textMessage("m", Role.USER, "hello"))] });
    const text = await (await fetch(`${sidecar.url}/metrics`)).text();
    expect(text).toContain("contextd_serving 1");
    for (const name of storeSeries) expect(text).not.toContain(name);
  });
});
