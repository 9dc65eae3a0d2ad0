// The benchmarks' bare commit (bench/bare-commit.ts) is a commit the store makes: against a real
// redis-server its calls answer {'ok'}, and the store reads back what they wrote, messages, version
// and id index. So a bare line times the store's own script call, not one it no longer makes.
import { describe, expect, it } from "vitest";
import { Role } from "#gen/contextd/v1/message_pb";
import { bareAppendCall, defineBareCommit, runBareCommit } from "../../bench/bare-commit.js";
import { redisForFile } from "../support/redis-for-file.js";
import { textMessage } from "../store/fixtures.js";

const redis = redisForFile();

describe("the benchmarks' bare commit", () => {
  it("writes, version by version, a conversation the store reads back whole, its ids indexed", async () => {
    const client = defineBareCommit(redis.raw);
    const id = "bare-read-back";
    const messages = Array.from({ length: 5 }, (_, index) => textMessage(`m${index}`, Role.USER, `message ${index}`));
    await runBareCommit(client, "contextd", id, bareAppendCall(id, 0n, 0, messages.slice(0, 3)));
    for (let index = 3; index < messages.length; index++) await runBareCommit(client, "contextd", id, bareAppendCall(id, BigInt(index - 2), index, [messages[index]!]));
    const store = await redis.openStore();
    const state = await store.load(id);
    expect(state.version).toBe(3n);
    expect(state.history.map((message) => message.id)).toEqual(["m0", "m1", "m2", "m3", "m4"]);
    expect(state.history[4]!.parts[0]!.kind).toEqual({ case: "text", value: expect.objectContaining({ text: "message 4" }) });
    const indexed = await store.indexedIds(id);
    expect(indexed?.current).toBe(true);
    expect([...indexed!.ids].sort()).toEqual(["m0", "m1", "m2", "m3", "m4"]);
  });

  it("throws on a reply other than ok: a call at a version the conversation is not at", async () => {
    const client = defineBareCommit(redis.raw);
    const id = "bare-conflict";
    await runBareCommit(client, "contextd", id, bareAppendCall(id, 0n, 0, [textMessage("a", Role.USER, "a")]));
    await expect(runBareCommit(client, "contextd", id, bareAppendCall(id, 0n, 0, [textMessage("b", Role.USER, "b")]))).rejects.toThrow(/answered \["conflict","1"\]/);
  });
});
