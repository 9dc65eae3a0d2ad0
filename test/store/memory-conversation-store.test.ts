// What the in-memory store does for a fork beyond the store contract: the fork at the latest
// version shares its source's lists, and its first commits share the source's id index instead of
// building one over every message (message-id-index.ts, `sharedWith`).
import { afterEach, describe, expect, it, vi } from "vitest";
import { Role } from "#gen/contextd/v1/message_pb";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { MessageIdIndex } from "../../src/store/message-id-index.js";
import { appendHistory, textMessage } from "./fixtures.js";

afterEach(() => vi.restoreAllMocks());

describe("MemoryConversationStore forks", () => {
  it("a fork at the latest version takes its source's id index: its commits build none, refuse the source's ids, and each side's new ids stay its own", async () => {
    const store = new MemoryConversationStore();
    for (let from = 0; from < 5_000; from += 1_000) {
      await store.commit("source", undefined, [appendHistory(...Array.from({ length: 1_000 }, (_, index) => textMessage(`m${from + index}`, Role.USER, "hello")))], "");
    }
    const built = vi.spyOn(MessageIdIndex, "ofAll");
    await store.fork("source", undefined, "fork");
    await store.commit("fork", undefined, [appendHistory(textMessage("fork-only", Role.USER, "on the fork"))], "");
    await store.commit("source", undefined, [appendHistory(textMessage("source-only", Role.USER, "on the source"))], "");
    await expect(store.commit("fork", undefined, [appendHistory(textMessage("m42", Role.USER, "again"))], "")).rejects.toThrow(/m42/);
    await expect(store.commit("fork", undefined, [appendHistory(textMessage("fork-only", Role.USER, "again"))], "")).rejects.toThrow(/fork-only/);
    // Each side's id is free on the other.
    await store.commit("fork", undefined, [appendHistory(textMessage("source-only", Role.USER, "free here"))], "");
    await store.commit("source", undefined, [appendHistory(textMessage("fork-only", Role.USER, "free here"))], "");
    expect(built).not.toHaveBeenCalled();

    // A fork at a past version holds other lists: its first commit builds its own.
    await store.fork("source", 2n, "past");
    await store.commit("past", undefined, [appendHistory(textMessage("past-only", Role.USER, "on the past fork"))], "");
    expect(built).toHaveBeenCalledTimes(1);
  });
});
