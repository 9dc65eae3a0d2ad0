import { toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { deletePage, exportPageSize, exportStates, type ExportedState } from "../../src/application/conversation-retention.js";
import { StateSizeLimit } from "../../src/application/state-size.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { appendHistory, textMessage } from "../store/fixtures.js";

/** Messages weighed by their encoding, the rest of a state as 16 bytes: a 10,000-character message is over a 4 KiB limit. */
const sizing = { messageBytes: (message: Message) => toBinary(MessageSchema, message).byteLength, restBytes: () => 16 };

async function seeded(count: number): Promise<MemoryConversationStore> {
  const store = new MemoryConversationStore({ expirySweepMs: 0 });
  for (let index = 0; index < count; index++) {
    const text = index === 3 ? "x".repeat(10_000) : `conversation ${index}`;
    await store.commit(`t/${String(index).padStart(3, "0")}`, 0n, [appendHistory(textMessage("u1", Role.USER, text))], "");
  }
  await store.commit("u/other", 0n, [appendHistory(textMessage("u1", Role.USER, "another tenant"))], "");
  return store;
}

describe("exportStates", () => {
  it("reads a prefix in id order over several listing pages, sends a state over the limit without its messages, and resumes after a token", async () => {
    const count = 2 * exportPageSize + 3;
    const store = await seeded(count);
    const limit = new StateSizeLimit(4_096, sizing);
    const all: ExportedState[] = [];
    for await (const exported of exportStates(store, limit, "t/", "", new AbortController().signal)) all.push(exported);
    expect(all.map((item) => item.state.conversationId)).toEqual(Array.from({ length: count }, (_, index) => `t/${String(index).padStart(3, "0")}`));
    expect(all.filter((item) => item.withoutMessages).map((item) => [item.state.conversationId, item.state.history.length, item.state.version])).toEqual([["t/003", 0, 1n]]);
    const rest: string[] = [];
    for await (const exported of exportStates(store, limit, "t/", all[exportPageSize]!.resumeToken, new AbortController().signal)) rest.push(exported.state.conversationId);
    expect(rest).toEqual(all.slice(exportPageSize + 1).map((item) => item.state.conversationId));
    await store.close();
  });
});

describe("deletePage", () => {
  it("deletes one page of a prefix per call, the token going on after it, other prefixes untouched; refuses a page size over the bound", async () => {
    const store = await seeded(5);
    const first = await deletePage(store, "t/", "", 2);
    expect(first.deleted).toBe(2);
    expect(first.nextPageToken).not.toBe("");
    const second = await deletePage(store, "t/", first.nextPageToken, 10);
    expect(second).toEqual({ deleted: 3, nextPageToken: "" });
    expect((await store.currentVersion("u/other"))).toBe(1n);
    const error = await deletePage(store, "t/", "", 1_001).catch((reason: unknown) => reason);
    expect(error).toBeInstanceOf(ConnectError);
    expect([(error as ConnectError).code, (error as ConnectError).rawMessage]).toEqual([Code.InvalidArgument, "page_size: 0 to 1000, got 1001"]);
    await store.close();
  });
});
