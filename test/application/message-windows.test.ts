import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it, vi } from "vitest";
import { GetStateResponseSchema, ReadMessagesRequestSchema, ReadMessagesResponseSchema, type ReadMessagesResponse } from "#gen/contextd/v1/conversation_service_pb";
import { Role, type Message } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { MessageWindows } from "../../src/application/message-windows.js";
import { assertStateFits } from "../../src/application/state-size.js";
import { Codec } from "../../src/codec/codec.js";
import { readErrorDetails } from "../../src/core/model/error-details.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { appendHistory, delta, textMessage } from "../store/fixtures.js";

function setup(options: { pinMs?: number; maxPinnedStates?: number; maxPinnedBytes?: number } = {}) {
  const codec = new Codec();
  const store = new MemoryConversationStore({ codec });
  const sized: Message[] = [];
  let now = 1_000;
  const windows = new MessageWindows(store, {
    messageLimitBytes: 16 * 1024 * 1024,
    messageBytes: (message) => {
      sized.push(message);
      return codec.encodeStoredMessage(message).byteLength;
    },
    now: () => now,
    ...options,
  });
  const read = (request: MessageInitShape<typeof ReadMessagesRequestSchema>) => windows.read(create(ReadMessagesRequestSchema, request));
  return { codec, store, windows, read, sized, advance: (ms: number) => (now += ms) };
}

async function seed(store: MemoryConversationStore, conversationId: string, count: number, text = (index: number) => `message ${index}`) {
  const messages = Array.from({ length: count }, (_, index) => textMessage(`m${index}`, index % 2 === 0 ? Role.USER : Role.ASSISTANT, text(index)));
  for (let from = 0; from < count; from += 10_000) await store.commit(conversationId, undefined, [appendHistory(...messages.slice(from, from + 10_000))], "");
}

const ids = (response: ReadMessagesResponse) => response.messages.map((message) => message.id);

async function refusal(promise: Promise<unknown>): Promise<ConnectError> {
  const error = await promise.then(() => undefined, (reason: unknown) => reason);
  expect(error, "expected a refusal").toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

describe("MessageWindows (ReadMessages over a store's loaded state)", () => {
  it("reads the last N messages, a range, and the whole segment, with every segment's size", async () => {
    const { store, read } = setup();
    await seed(store, "c", 25);
    await store.commit("c", undefined, [delta({ case: "appendMessages", value: { segment: Segment.MEMORY, messages: [textMessage("mem", Role.USER, "fact")] } })], "");

    const last = await read({ conversationId: "c", last: 3 });
    expect(ids(last)).toEqual(["m22", "m23", "m24"]);
    expect([last.position, last.windowStart, last.windowEnd, last.segment, last.version]).toEqual([22n, 22n, 25n, Segment.HISTORY, 2n]);
    expect(last.segmentSizes).toMatchObject({ system: 0n, history: 25n, memory: 1n, tools: 0n });
    expect(last.nextPageToken).toBe("");

    expect(ids(await read({ conversationId: "c", start: 5n, end: 8n }))).toEqual(["m5", "m6", "m7"]);
    expect((await read({ conversationId: "c" })).messages).toHaveLength(25);
    expect(ids(await read({ conversationId: "c", segment: Segment.MEMORY }))).toEqual(["mem"]);
    // A window past the end stops at the end; "the last 100 of 25" is all 25.
    expect((await read({ conversationId: "c", last: 100 })).messages).toHaveLength(25);
    const past = await read({ conversationId: "c", start: 40n });
    expect([past.messages.length, past.windowStart, past.windowEnd, past.nextPageToken]).toEqual([0, 25n, 25n, ""]);
    const unknown = await read({ conversationId: "never-written", last: 10 });
    expect([unknown.messages.length, unknown.version, unknown.segmentSizes?.history]).toEqual([0, 0n, 0n]);
  });

  it("pages a window by max_bytes; the pages put together are the window, and page_bytes is what the messages take", async () => {
    const { store, read, codec } = setup();
    await seed(store, "c", 200, (index) => "x".repeat(100 + index));
    const pages: ReadMessagesResponse[] = [];
    let token = "";
    do {
      const page = await read({ conversationId: "c", start: 10n, end: 190n, maxBytes: 2_000, pageToken: token });
      pages.push(page);
      token = page.nextPageToken;
    } while (token !== "");
    expect(pages.length).toBeGreaterThan(10);
    expect(pages.flatMap(ids)).toEqual(Array.from({ length: 180 }, (_, index) => `m${index + 10}`));
    for (const page of pages) {
      expect(page.pageBytes).toBeLessThanOrEqual(2_000n);
      expect([page.windowStart, page.windowEnd, page.version]).toEqual([10n, 190n, 1n]);
      // page_bytes is exactly the messages field of the response as encoded.
      const alone = codec.encode(ReadMessagesResponseSchema, create(ReadMessagesResponseSchema, { messages: page.messages }));
      expect(BigInt(alone.byteLength)).toBe(page.pageBytes);
    }
  });

  it("sends a message larger than max_bytes alone, so every message is readable", async () => {
    const { store, read } = setup();
    await store.commit("c", undefined, [appendHistory(textMessage("small", Role.USER, "a"), textMessage("big", Role.ASSISTANT, "b".repeat(50_000)), textMessage("after", Role.USER, "c"))], "");
    const first = await read({ conversationId: "c", maxBytes: 1_000 });
    expect(ids(first)).toEqual(["small"]);
    const second = await read({ conversationId: "c", maxBytes: 1_000, pageToken: first.nextPageToken });
    expect(ids(second)).toEqual(["big"]);
    expect(second.pageBytes).toBeGreaterThan(50_000n);
    const third = await read({ conversationId: "c", maxBytes: 1_000, pageToken: second.nextPageToken });
    expect([ids(third), third.nextPageToken]).toEqual([["after"], ""]);
  });

  it("keeps later pages at the first page's version while the conversation moves on", async () => {
    const { store, read } = setup();
    await seed(store, "c", 30);
    const first = await read({ conversationId: "c", maxBytes: 100 });
    // The conversation changes under the reader: appended to, and its first messages removed.
    await store.commit("c", undefined, [appendHistory(textMessage("late", Role.USER, "late"))], "");
    await store.commit("c", undefined, [delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: ["m0", "m1", "m2"] } })], "");
    const collected = [...ids(first)];
    let token = first.nextPageToken;
    while (token !== "") {
      const page = await read({ conversationId: "c", maxBytes: 100, pageToken: token });
      expect([page.version, page.segmentSizes?.history]).toEqual([1n, 30n]);
      collected.push(...ids(page));
      token = page.nextPageToken;
    }
    expect(collected).toEqual(Array.from({ length: 30 }, (_, index) => `m${index}`));
    // An explicit version still kept is served too; the current one always is.
    expect((await read({ conversationId: "c", version: 1n, last: 2 })).version).toBe(1n);
    expect((await read({ conversationId: "c", version: 3n, last: 2 })).segmentSizes?.history).toBe(28n);
  });

  it("answers ABORTED with the current version when the pinned version is neither current nor kept", async () => {
    const { store, read, advance } = setup({ pinMs: 60_000 });
    await seed(store, "c", 30);
    const first = await read({ conversationId: "c", maxBytes: 100 });
    await store.commit("c", undefined, [appendHistory(textMessage("late", Role.USER, "late"))], "");
    advance(60_001);
    const expired = await refusal(read({ conversationId: "c", pageToken: first.nextPageToken }));
    expect(expired.code).toBe(Code.Aborted);
    expect(expired.rawMessage).toBe('conversation "c": expected version 1 but the current version is 2');
    expect(expired.metadata.get("contextd-current-version")).toBe("2");
    // A version that never had a page token is not kept either.
    expect((await refusal(read({ conversationId: "c", version: 1n }))).code).toBe(Code.Aborted);
  });

  it("keeps at most maxPinnedStates states, the least recently used leaving first", async () => {
    const { store, read } = setup({ maxPinnedStates: 2 });
    const tokens: string[] = [];
    for (const id of ["a", "b", "c"]) {
      await seed(store, id, 20);
      tokens.push((await read({ conversationId: id, maxBytes: 50 })).nextPageToken);
      await store.commit(id, undefined, [appendHistory(textMessage("late", Role.USER, "late"))], "");
    }
    expect((await refusal(read({ conversationId: "a", pageToken: tokens[0]! }))).code).toBe(Code.Aborted);
    expect((await read({ conversationId: "b", pageToken: tokens[1]! })).version).toBe(1n);
    expect((await read({ conversationId: "c", pageToken: tokens[2]! })).version).toBe(1n);
  });

  it("keeps windows within maxPinnedBytes: the least recently used leave first, and a window larger than the bound alone is not kept", async () => {
    // Each conversation's window: 20 messages of ~1,000 bytes (about 20 KB); the bound holds two.
    const { store, read, windows } = setup({ maxPinnedBytes: 45_000 });
    const tokens: string[] = [];
    for (const id of ["a", "b", "c"]) {
      await seed(store, id, 20, () => "z".repeat(1_000));
      tokens.push((await read({ conversationId: id, maxBytes: 2_000 })).nextPageToken);
      await store.commit(id, undefined, [appendHistory(textMessage("late", Role.USER, "late"))], "");
      expect(windows.pinnedBytes).toBeLessThanOrEqual(45_000);
    }
    expect(windows.pinnedBytes).toBeGreaterThan(40_000);
    expect((await refusal(read({ conversationId: "a", pageToken: tokens[0]! }))).code).toBe(Code.Aborted);
    expect((await read({ conversationId: "b", pageToken: tokens[1]! })).version).toBe(1n);
    expect((await read({ conversationId: "c", pageToken: tokens[2]! })).version).toBe(1n);

    // 60 KB alone is over the bound: not kept, yet read to its end while its version is current.
    await seed(store, "big", 60, () => "z".repeat(1_000));
    const pages: ReadMessagesResponse[] = [await read({ conversationId: "big", maxBytes: 20_000 })];
    while (pages.at(-1)!.nextPageToken !== "") pages.push(await read({ conversationId: "big", pageToken: pages.at(-1)!.nextPageToken }));
    expect(pages.flatMap(ids)).toHaveLength(60);
    expect(windows.pinnedBytes).toBeLessThanOrEqual(45_000);
    const again = await read({ conversationId: "big", maxBytes: 20_000 });
    await store.commit("big", undefined, [appendHistory(textMessage("late", Role.USER, "late"))], "");
    const moved = await refusal(read({ conversationId: "big", pageToken: again.nextPageToken }));
    expect([moved.code, moved.metadata.get("contextd-current-version")]).toEqual([Code.Aborted, "2"]);
  });

  it("reads windows from the store's readWindow, never loading the whole state", async () => {
    const { store, read } = setup();
    await seed(store, "long", 1_000);
    const load = vi.spyOn(store, "load");
    const readWindow = vi.spyOn(store, "readWindow");
    expect(ids(await read({ conversationId: "long", last: 3 }))).toEqual(["m997", "m998", "m999"]);
    expect(readWindow.mock.calls.map(([, query]) => [query.count, query.end])).toEqual([[3, undefined]]);
    expect(ids(await read({ conversationId: "long", start: 10n, end: 12n }))).toEqual(["m10", "m11"]);
    expect(readWindow.mock.calls.at(-1)![1]).toMatchObject({ end: 12, count: 2 });
    // From a position to the end: the length first (no messages), then that range at its version.
    readWindow.mockClear();
    expect(ids(await read({ conversationId: "long", start: 998n }))).toEqual(["m998", "m999"]);
    expect(readWindow.mock.calls.map(([, query]) => [query.count, query.end, query.atVersion])).toEqual([[0, undefined, undefined], [2, 1000, 1n]]);
    expect(load).not.toHaveBeenCalled();
  });

  it("refuses bad windows, bounds and tokens with INVALID_ARGUMENT naming the field", async () => {
    const { store, read } = setup();
    await seed(store, "c", 30);
    const cases: [MessageInitShape<typeof ReadMessagesRequestSchema>, string][] = [
      [{ conversationId: "" }, "conversation_id is required"],
      [{ conversationId: "c", last: 3, start: 1n }, "last: set to 3 together with start or end; a window is either the last N messages or a range"],
      [{ conversationId: "c", start: 5n, end: 2n }, "end: 2 is before start 5"],
      [{ conversationId: "c", maxBytes: 15 * 1024 * 1024 + 1 }, "max_bytes: at most 15728640 (15/16 of the message limit, --max-request-bytes), got 15728641"],
      [{ conversationId: "c", segment: 9 as Segment }, "segment: unknown segment 9"],
      [{ conversationId: "c", version: -1n }, "version: must not be negative, got -1"],
      [{ conversationId: "c", pageToken: "not-a-token" }, 'page_token: "not-a-token" is not a token from a previous ReadMessages response'],
    ];
    for (const [request, message] of cases) {
      const error = await refusal(read(request));
      expect([error.code, error.rawMessage]).toEqual([Code.InvalidArgument, message]);
    }
    const token = (await read({ conversationId: "c", last: 20, maxBytes: 100 })).nextPageToken;
    await seed(store, "other", 30);
    for (const request of [{ conversationId: "other", pageToken: token }, { conversationId: "c", last: 21, pageToken: token }]) {
      const error = await refusal(read(request));
      expect(error.code).toBe(Code.InvalidArgument);
      expect(error.rawMessage).toMatch(/^page_token: was issued for another conversation or window/);
    }
    // A token whose numbers were edited is checked against the state it is used on.
    const forged = (fields: string) => "m" + Buffer.from(fields, "utf8").toString("base64url");
    const check = Buffer.from(token.slice(1), "base64url").toString("utf8").split(".")[5]!;
    const beyond = await refusal(read({ conversationId: "c", pageToken: forged(`1.2.0.0.31.${check}`) }));
    expect([beyond.code, beyond.rawMessage]).toEqual([Code.InvalidArgument, "page_token: names positions up to 31, but the segment holds 30 messages at version 1"]);
    const noSegment = await refusal(read({ conversationId: "c", pageToken: forged(`1.7.0.0.3.${check}`) }));
    expect([noSegment.code, noSegment.rawMessage]).toEqual([Code.InvalidArgument, "page_token: names no segment (7); it is not a token from a ReadMessages response"]);
    // Repeating the first request's fields with the token is fine.
    expect((await read({ conversationId: "c", last: 20, maxBytes: 100, pageToken: token })).position).toBeGreaterThan(10n);
  });

  it("sizes only the page's messages: the last 10 of 100,000 look at 10", async () => {
    const { store, read, sized } = setup();
    await seed(store, "long", 100_000);
    sized.length = 0;
    const page = await read({ conversationId: "long", last: 10 });
    expect(ids(page)).toEqual(Array.from({ length: 10 }, (_, index) => `m${99_990 + index}`));
    expect(sized).toEqual(page.messages);
    // A window with pages to come is sized once whole, for the bytes its pin holds; each page after it sizes the page.
    sized.length = 0;
    const middle = await read({ conversationId: "long", start: 50_000n, maxBytes: 1_000 });
    expect(sized.length - 50_000 - middle.messages.length).toBeOneOf([0, 1]);
    sized.length = 0;
    const next = await read({ conversationId: "long", pageToken: middle.nextPageToken });
    expect(sized.length - next.messages.length).toBeOneOf([0, 1]);
  });
});

describe("assertStateFits (GetState over the message limit)", () => {
  it("refuses with RESOURCE_EXHAUSTED STATE_TOO_LARGE naming ReadMessages, stopping at the limit", async () => {
    const { store, codec } = setup();
    await seed(store, "big", 5_000, () => "y".repeat(1_000));
    const state = await store.load("big");
    let sizedMessages = 0;
    const sizing = {
      messageBytes: (message: Message) => (sizedMessages++, codec.encodeStoredMessage(message).byteLength),
      restBytes: (loaded: typeof state) => codec.encodeStateRest(loaded).byteLength,
    };
    const error = await refusal(Promise.resolve().then(() => assertStateFits(state, 1_000_000, sizing)));
    expect(error.code).toBe(Code.ResourceExhausted);
    expect(error.rawMessage).toBe(
      'conversation "big" (version 1, 5000 messages) is larger than the message limit of 1000000 bytes (--max-request-bytes): read its messages in pages with ConversationService.ReadMessages',
    );
    expect(readErrorDetails(error).errorInfo).toMatchObject({ reason: "STATE_TOO_LARGE", metadata: { limit_bytes: "1000000", read_with: "contextd.v1.ConversationService.ReadMessages" } });
    // About 1 MB of 1 KB messages were sized, not all 5,000.
    expect(sizedMessages).toBeLessThan(1_000);

    // Exactly at the limit fits; one byte less does not.
    const exact = codec.encode(GetStateResponseSchema, create(GetStateResponseSchema, { state })).byteLength;
    expect(() => assertStateFits(state, exact, sizing)).not.toThrow();
    expect(() => assertStateFits(state, exact - 1, sizing)).toThrow(/larger than the message limit/);
  });
});
