import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { Role } from "#gen/contextd/v1/message_pb";
import type { WatchResponse } from "#gen/contextd/v1/conversation_service_pb";
import { watchWithHeartbeats } from "../../src/application/conversation-watch.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { appendHistory, textMessage } from "../store/fixtures.js";

describe("watchWithHeartbeats", () => {
  it("ends with NOT_FOUND once a heartbeat finds the conversation deleted, after the changes it had sent", async () => {
    const store = new MemoryConversationStore();
    await store.commit("c", 0n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "");
    const received: WatchResponse[] = [];
    const watching = (async () => {
      for await (const response of watchWithHeartbeats({ store, shutdown: new AbortController().signal, watchHeartbeatMs: 20 }, "c", 0n, new AbortController().signal)) {
        received.push(response);
        if (response.kind.case === "change") await store.delete("c", 1n);
      }
    })();
    const error = await watching.then(() => undefined, (reason: unknown) => reason);
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.NotFound);
    expect((error as ConnectError).rawMessage).toBe('conversation "c" no longer exists: it was deleted or expired (the watch had reached version 1, the store is at 0)');
    expect(received.map((response) => response.kind.case)).toEqual(["change"]);
    await store.close();
  });

  it("keeps watching a conversation that never existed (version 0 is not a deletion)", async () => {
    const store = new MemoryConversationStore();
    const stop = new AbortController();
    const kinds: string[] = [];
    for await (const response of watchWithHeartbeats({ store, shutdown: new AbortController().signal, watchHeartbeatMs: 10 }, "nobody", 0n, stop.signal)) {
      kinds.push(response.kind.case!);
      if (kinds.length === 3) stop.abort();
    }
    expect(kinds).toEqual(["heartbeat", "heartbeat", "heartbeat"]);
    await store.close();
  });
});
