import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { RecallRequestSchema, type RecallRequest } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { HistoryRecall, maxRecallBytes } from "../../src/application/history-recall.js";
import { RecallTermIndex } from "../../src/application/recall-term-index.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { appendHistory, textMessage } from "../store/fixtures.js";

const toolRound = (index: number, command: string, output: string): Message[] => [
  create(MessageSchema, { id: `a${index}`, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: `c${index}`, name: "run_command", arguments: { data: JSON.stringify({ command }) } } } }] }),
  create(MessageSchema, { id: `t${index}`, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: `c${index}`, name: "run_command", payload: { text: output } } } }] }),
];

async function conversation(rounds: number): Promise<MemoryConversationStore> {
  const store = new MemoryConversationStore();
  const messages: Message[] = [];
  for (let index = 0; index < rounds; index++) {
    messages.push(textMessage(`u${index}`, Role.USER, `step ${index}: look at the module`));
    messages.push(...toolRound(index, `cat src/module${index}/index.ts`, `export const value${index} = ${index};\n`.repeat(20)));
  }
  await store.commit("c", 0n, [appendHistory(...messages)], "");
  return store;
}

const request = (init: Parameters<typeof create<typeof RecallRequestSchema>>[1]): RecallRequest => create(RecallRequestSchema, { conversationId: "c", ...init });

async function refusal(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(() => undefined, (reason: unknown) => reason);
  expect(error).toBeInstanceOf(ConnectError);
  expect((error as ConnectError).code).toBe(Code.InvalidArgument);
  return (error as ConnectError).rawMessage;
}

describe("HistoryRecall", () => {
  it("finds a path by its parts and whole, best first, and tells the model where each hit is", async () => {
    const recall = new HistoryRecall(await conversation(50), new RecallTermIndex(1 << 20), { scanBytes: 1 << 24 });
    const answer = await recall.recall(request({ query: "module17/index.ts" }));
    expect(answer.hits[0]!.messageId).toBe("a17");
    expect(answer.hits[0]!.position).toBe(52n);
    expect(answer.hits[0]!.excerpt).toContain("cat src/module17/index.ts");
    expect(answer.text).toContain("--- message a17 · position 52 · assistant · run_command");
    expect(answer.complete).toBe(true);
    expect(answer.examinedMessages).toBe(150n);
    expect(answer.historyMessages).toBe(150n);
    expect(answer.version).toBe(1n);
    expect(answer.hits.length).toBe(5);
    // The same search again reads nothing: the terms are kept.
    expect(answer.scannedBytes).toBeGreaterThan(0n);
    const again = await recall.recall(request({ query: "module17/index.ts" }));
    expect(again.scannedBytes).toBe(0n);
    expect(again.hits.map((hit) => hit.messageId)).toEqual(answer.hits.map((hit) => hit.messageId));
  });

  it("answers a model's tool call, by id and by query, and names the ids it does not hold", async () => {
    const recall = new HistoryRecall(await conversation(5), new RecallTermIndex(0), { scanBytes: 1 << 24 });
    const byId = await recall.recall(request({ toolCall: { name: "contextd_recall_message", arguments: '{"message_ids":["t3","nope","u0"]}' } }));
    expect(byId.hits.map((hit) => hit.messageId)).toEqual(["t3", "u0"]);
    expect(byId.missingIds).toEqual(["nope"]);
    expect(byId.text).toContain("export const value3 = 3;");
    expect(byId.text).toContain("Not in the stored history: nope");
    const search = await recall.recall(request({ toolCall: { name: "contextd_search_history", arguments: '{"query":"value4","max_results":1}' } }));
    expect(search.hits.map((hit) => hit.messageId)).toEqual(["t4"]);
    // Nothing kept at 0: every search reads again.
    expect((await recall.recall(request({ query: "value4" }))).scannedBytes).toBe(search.scannedBytes);
    const none = await recall.recall(request({ query: "nothing-like-this" }));
    expect(none.hits).toEqual([]);
    expect(none.text).toMatch(/^No stored message matches "nothing-like-this" \(searched 15 messages\)\./);
  });

  it("keeps the answer within max_bytes and says how to read the rest of a long message", async () => {
    const store = new MemoryConversationStore();
    const output = "line of a very long log\n".repeat(10_000);
    await store.commit("c", 0n, [appendHistory(...toolRound(0, "npm test", output))], "");
    const recall = new HistoryRecall(store, new RecallTermIndex(1 << 20), { scanBytes: 1 << 24 });
    const answer = await recall.recall(request({ messageIds: ["t0"], maxBytes: 2_000 }));
    expect(Buffer.byteLength(answer.text)).toBeLessThanOrEqual(2_000);
    expect(answer.text).toMatch(/more bytes of this message not shown: the whole result is readable with read_tool_result \(tool_call_id "c0"\)/);
    await store.commit("c", 1n, [appendHistory(textMessage("long", Role.USER, "word ".repeat(1_000)))], "");
    expect((await recall.recall(request({ messageIds: ["long"], maxBytes: 1_000 }))).text).toContain("not shown: the whole message is readable with ReadMessages (start 2)");
    const search = await recall.recall(request({ query: "log", maxBytes: 300 }));
    expect(Buffer.byteLength(search.text)).toBeLessThanOrEqual(300);
  });

  it("stops at the scan bound and at the deadline, newest first, and says so", async () => {
    const store = await conversation(50);
    const scanBound = new HistoryRecall(store, new RecallTermIndex(0), { scanBytes: 10_000 });
    const cut = await scanBound.recall(request({ query: "module1/index.ts" }));
    expect(cut.complete).toBe(false);
    expect(cut.scannedBytes).toBeLessThanOrEqual(10_000n);
    expect(cut.examinedMessages).toBeLessThan(150n);
    expect(cut.text).toContain("the per-request text limit was reached");
    // A clock that moves 400 ms per reading: the clock is read every 32 short messages, the event
    // loop gets its turn at the first reading past 20 ms of work, and the 2 s budget ends at the second.
    let clock = 0;
    let turns = 0;
    const slow = new HistoryRecall(store, new RecallTermIndex(0), { scanBytes: 1 << 24, now: () => (clock += 400), yieldToEventLoop: async () => void turns++ });
    const late = await slow.recall(request({ query: "module1/index.ts" }));
    expect(late.complete).toBe(false);
    expect(late.examinedMessages).toBe(64n);
    expect(turns).toBe(1);
    expect(late.text).toContain("the time limit was reached");
    // A cancelled call stops the search as its deadline does.
    const cancelled = new AbortController();
    cancelled.abort();
    expect((await new HistoryRecall(store, new RecallTermIndex(0), { scanBytes: 1 << 24 }).recall(request({ query: "x" }), undefined, cancelled.signal)).examinedMessages).toBe(0n);
    // The call's own deadline is sooner: nothing is looked at once it has passed.
    expect((await new HistoryRecall(store, new RecallTermIndex(0), { scanBytes: 1 << 24 }).recall(request({ query: "x" }), 0)).examinedMessages).toBe(0n);
  });

  it("refuses bad requests with the field and the limit", async () => {
    const recall = new HistoryRecall(await conversation(1), new RecallTermIndex(0), { scanBytes: 1 << 24 });
    expect(await refusal(recall.recall(request({})))).toMatch(/exactly one of message_ids, query and tool_call; it set 0/);
    expect(await refusal(recall.recall(request({ query: "a", messageIds: ["b"] })))).toMatch(/it set 2/);
    expect(await refusal(recall.recall(request({ query: "x".repeat(1_025) })))).toMatch(/query: at most 1024 UTF-8 bytes, got 1025/);
    expect(await refusal(recall.recall(request({ query: Array.from({ length: 33 }, (_, index) => `w${index}`).join(" ") })))).toMatch(/query: at most 32 distinct terms, got 33/);
    expect(await refusal(recall.recall(request({ query: "... --" })))).toMatch(/holds no word to search for/);
    expect(await refusal(recall.recall(request({ messageIds: Array.from({ length: 17 }, (_, index) => `m${index}`) })))).toMatch(/message_ids: 1 to 16 ids, got 17/);
    expect(await refusal(recall.recall(request({ query: "a", maxResults: 51 })))).toMatch(/max_results: at most 50, got 51/);
    expect(await refusal(recall.recall(request({ query: "a", maxBytes: maxRecallBytes + 1 })))).toMatch(/max_bytes: at most 262144/);
    expect(await refusal(recall.recall(request({ toolCall: { name: "contextd_search_history", arguments: '{"query":"a","max_results":99}' } })))).toMatch(/tool_call.arguments.max_results: at most 50, got 99/);
    expect(await refusal(recall.recall(create(RecallRequestSchema, { query: "a" })))).toMatch(/conversation_id is required/);
  });
});

describe("HistoryRecall over a history of several windows", () => {
  /** A real memory store that counts its window reads. */
  class CountingStore extends MemoryConversationStore {
    reads = 0;
    override async readWindow(...args: Parameters<MemoryConversationStore["readWindow"]>) {
      this.reads++;
      return super.readWindow(...args);
    }
  }

  async function longConversation(rounds: number): Promise<CountingStore> {
    const store = new CountingStore();
    const messages: Message[] = [];
    for (let index = 0; index < rounds; index++) messages.push(textMessage(`u${index}`, Role.USER, `step ${index}`), ...toolRound(index, `cat src/module${index}/index.ts`, `value${index}`));
    await store.commit("c", 0n, [appendHistory(...messages)], "");
    store.reads = 0;
    return store;
  }

  it("reads the windows newest first down to the oldest, and finds and recalls a message in the oldest", async () => {
    const store = await longConversation(1_000);
    const recall = new HistoryRecall(store, new RecallTermIndex(1 << 24), { scanBytes: 1 << 24 });
    const answer = await recall.recall(request({ query: "module1/index.ts", maxResults: 1 }));
    expect(answer.hits.map((hit) => [hit.messageId, hit.position])).toEqual([["a1", 4n]]);
    expect(answer.examinedMessages).toBe(3_000n);
    expect(answer.complete).toBe(true);
    // Three windows of 1,000, and the hit's message read again by its position.
    expect(store.reads).toBe(4);
    store.reads = 0;
    const byId = await recall.recall(request({ messageIds: ["t0"] }));
    expect(byId.hits[0]!.position).toBe(2n);
    expect(byId.text).toContain("value0");
    expect(store.reads).toBe(3);
  });

  it("reads no window past the one where a bound stopped the search", async () => {
    const store = await longConversation(1_000);
    const recall = new HistoryRecall(store, new RecallTermIndex(0), { scanBytes: 2_000 });
    const answer = await recall.recall(request({ query: "module999/index.ts" }));
    expect(answer.complete).toBe(false);
    expect(answer.hits[0]!.messageId).toBe("a999");
    expect(store.reads).toBe(1);
  });
});

describe("RecallTermIndex", () => {
  it("keeps terms up to its bound, the least recently used leaving first, and none larger than the bound alone", () => {
    const messages = Array.from({ length: 10 }, (_, index) => textMessage(`m${index}`, Role.USER, `word${index} `.repeat(50)));
    const index = new RecallTermIndex(2_000);
    for (const message of messages) expect(index.termsOf(message, 0, 1 << 20)!.scannedBytes).toBeGreaterThan(0);
    expect(index.size).toBeLessThanOrEqual(2_000);
    expect(index.messages).toBeGreaterThan(0);
    expect(index.messages).toBeLessThan(10);
    // The newest is kept; the oldest is read again.
    expect(index.termsOf(messages[9]!, 0, 1 << 20)!.scannedBytes).toBe(0);
    expect(index.termsOf(messages[0]!, 0, 1 << 20)!.scannedBytes).toBeGreaterThan(0);
    const huge = textMessage("h", Role.USER, "x ".repeat(5_000));
    index.termsOf(huge, 0, 1 << 20);
    expect(index.termsOf(huge, 0, 1 << 20)!.scannedBytes).toBeGreaterThan(0);
    // A message that would pass the request's scan bound is not read.
    expect(index.termsOf(textMessage("n", Role.USER, "new text"), 100, 105)).toBeUndefined();
  });
});
