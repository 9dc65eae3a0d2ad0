// ReadMessages from the TypeScript client against a real sidecar, over gRPC and Connect: a
// 100,000-message, 50 MB conversation that getState refuses (STATE_TOO_LARGE, naming the paged
// read) is read whole with messagePages; pages stay at the first page's version while a commit
// lands; a version the sidecar no longer keeps is a VersionConflictError. A 52 MB conversation
// goes through the AI SDK adapter both ways (read whole and compiled within a budget, written with
// responseDeltas), and commitWithRetry with historyTail takes turns on it.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, Code, ContextdError, VersionConflictError, appendMessages, appendUser, userText } from "@contextd/client";
import { Segment, type Message } from "@contextd/client/v1";
import { aiSdkPrompt, fromModelMessages, responseDeltas, toModelMessages } from "@contextd/client/ai-sdk";
import { freshId, startSidecar, type Sidecar } from "./sidecar.ts";

let sidecar: Sidecar;
const clients: Client[] = [];
function dial(protocol: "grpc" | "connect"): Client {
  const client = new Client({ address: sidecar.address, protocol });
  clients.push(client);
  return client;
}

/** `count` messages of about `bytesEach` bytes, in commits of 10,000 (the sidecar's --max-messages). */
async function commitLongConversation(client: Client, conversationId: string, count: number, bytesEach: number): Promise<void> {
  const filler = "x".repeat(bytesEach);
  for (let start = 0; start < count; start += 10_000) {
    const messages: Message[] = [];
    for (let index = start; index < Math.min(start + 10_000, count); index++) messages.push({ ...userText(`${index} ${filler}`), id: `m${index}` });
    await client.commit({ conversationId, deltas: [appendMessages(Segment.HISTORY, ...messages)] });
  }
}

before(async () => {
  sidecar = await startSidecar();
});
after(async () => {
  for (const client of clients) client.close();
  await sidecar.stop();
});

describe("a 100,000-message, 50 MB conversation", () => {
  const conversationId = freshId("fifty-mb");
  before(async () => {
    await commitLongConversation(dial("grpc"), conversationId, 100_000, 500);
  });

  for (const protocol of ["grpc", "connect"] as const) {
    test(`over ${protocol}: getState refuses it naming ReadMessages; messagePages reads every message in order at one version`, async () => {
      const client = dial(protocol);
      const refused = await client.getState({ conversationId }).catch((error: unknown) => error);
      assert.ok(refused instanceof ContextdError, String(refused));
      assert.equal(refused.code, Code.ResourceExhausted);
      assert.equal(refused.reason, "STATE_TOO_LARGE");
      assert.match(refused.rawMessage, /read its messages in pages with ConversationService\.ReadMessages$/);

      let read = 0;
      let bytes = 0n;
      for await (const page of client.messagePages({ conversationId })) {
        assert.equal(page.version, 10n);
        assert.equal(page.segmentSizes!.history, 100_000n);
        assert.equal(page.position, BigInt(read));
        assert.ok(page.pageBytes <= 4n << 20n, `page of ${page.pageBytes} bytes`);
        for (const message of page.messages) assert.equal(message.id, `m${read++}`);
        bytes += page.pageBytes;
      }
      assert.equal(read, 100_000);
      assert.ok(bytes > 50_000_000n, `${bytes} bytes`);

      const last = await client.readMessages({ conversationId, last: 10 });
      assert.deepEqual(last.messages.map((message) => message.id), Array.from({ length: 10 }, (_, index) => `m${99_990 + index}`));
      assert.equal(last.nextPageToken, "");
    });
  }
});

test("pages stay at the first page's version while a commit lands; a version not kept is a VersionConflictError", async () => {
  const client = dial("grpc");
  const conversationId = freshId("pinned");
  await commitLongConversation(client, conversationId, 30, 100);
  const ids: string[] = [];
  for await (const page of client.messagePages({ conversationId, maxBytes: 300 })) {
    if (ids.length === 0) await client.commit({ conversationId, deltas: [appendUser("late")] });
    assert.equal(page.version, 1n);
    ids.push(...page.messages.map((message) => message.id));
  }
  assert.deepEqual(ids, Array.from({ length: 30 }, (_, index) => `m${index}`));
  const stale = await client.readMessages({ conversationId, version: 0n }).catch((error: unknown) => error);
  assert.ok(stale instanceof VersionConflictError, String(stale));
  assert.equal(stale.currentVersion, 2n);
});

/** The text of an AI SDK message, whether its content is a string or parts. */
function textOf(message: { content: unknown }): string {
  if (typeof message.content === "string") return message.content;
  return (message.content as { type: string; text?: string }[]).map((part) => part.text ?? "").join("");
}

test("a 52 MB conversation through the AI SDK adapter: read whole and within a budget, written on; commitWithRetry with historyTail takes turns", async () => {
  const client = dial("grpc");
  const conversationId = freshId("ai-sdk-52-mb");
  // 20 user messages of 2.6 MB in 4 commits of about 13 MB, each under the 16 MiB message limit.
  for (let commit = 0; commit < 4; commit++) {
    const messages = Array.from({ length: 5 }, (_, offset) => ({ role: "user" as const, content: `${commit * 5 + offset} ${"w".repeat(2_600_000)}` }));
    await client.commit({ conversationId, deltas: [appendMessages(Segment.HISTORY, ...fromModelMessages(messages))] });
  }
  const refused = await client.getState({ conversationId }).catch((error: unknown) => error);
  assert.ok(refused instanceof ContextdError && refused.code === Code.ResourceExhausted, String(refused));

  const stored: Message[] = [];
  for await (const page of client.messagePages({ conversationId })) stored.push(...page.messages);
  const modelMessages = toModelMessages(stored);
  assert.deepEqual(modelMessages.map((message) => textOf(message).split(" ")[0]), Array.from({ length: 20 }, (_, index) => String(index)));
  assert.ok(modelMessages.reduce((sum, message) => sum + textOf(message).length, 0) > 52_000_000);

  // A budgeted compile keeps the newest message that fits, read from the tail (no whole-state read).
  const compiled = await client.compile({ conversationId, budget: { maxTokens: 2_000_000n } });
  const prompt = aiSdkPrompt(compiled.result!);
  assert.ok(prompt.messages.length >= 1 && prompt.messages.length < 20, `${prompt.messages.length} messages kept`);
  assert.ok(textOf(prompt.messages.at(-1)!).startsWith("19 "));

  // The model's answer appended with responseDeltas, then turns that read only the tail.
  await client.commit({ conversationId, deltas: responseDeltas([{ role: "assistant", content: [{ type: "text", text: "read it all" }] }]) });
  const whole = await client.commitWithRetry(conversationId, () => [appendUser("never")]).catch((error: unknown) => error);
  assert.ok(whole instanceof ContextdError && whole.code === Code.ResourceExhausted, String(whole));
  for (const protocol of ["grpc", "connect"] as const) {
    const seen: string[][] = [];
    const response = await dial(protocol).commitWithRetry(
      conversationId,
      (state) => {
        seen.push(state.history.map((message) => toModelMessages([message])[0]!.role));
        return [appendUser(`${protocol} turn`)];
      },
      { historyTail: 2 },
    );
    assert.equal(seen.length, 1);
    assert.equal(seen[0]!.length, 2);
    const last = await client.readMessages({ conversationId, last: 1 });
    assert.equal(last.version, response.version);
    assert.deepEqual(toModelMessages(last.messages).map(textOf), [`${protocol} turn`]);
  }
});
