import { toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import type { SegmentWindow } from "../../src/store/segment-window.js";
import { sharedStoreBackends, storesOnSharedBackend } from "../support/shared-store-backends.js";
import { appendHistory, textMessage } from "./fixtures.js";

// A process that keeps a conversation's tail (kept-tails.ts) and reads the tail again after
// another process appended (sidecars taking turns behind a round-robin balancer: the commit's tail
// read, the compile's window) takes the entries its kept tail holds from it instead of decoding
// them again (`StoredCopies.decodeHistoryWithFacts`). What it reads must be what a process that
// holds nothing reads, byte for byte, running facts included; and a conversation lost and written
// anew (another `created`) at the same version and `_at` must be decoded afresh.

const backends = sharedStoreBackends("kept_tail_reuse");

const encoded = (messages: readonly Message[]) => messages.map((message) => Buffer.from(toBinary(MessageSchema, message)).toString("base64"));
const comparable = (window: SegmentWindow) => ({
  version: window.state.version,
  start: window.start,
  length: window.length,
  history: encoded(window.state.history),
  running: window.stored?.running,
  epoch: window.stored?.epoch,
});

describe.each(backends)("%s store: a kept tail read again", (_, start) => {
  const { backend, newStore } = storesOnSharedBackend(start);
  const body = (from: number, count: number, text = (index: number) => `message ${index}`) =>
    Array.from({ length: count }, (_, index) => textMessage(`m${from + index}`, Role.USER, text(from + index)));
  const fresh = async (id: string, count: number) => {
    const reader = await newStore();
    return reader.readWindow(id, { segment: "history", count, withRest: true });
  };

  it("takes the entries it holds from the kept tail, and reads what a fresh process reads", async () => {
    const id = `reuse-${Date.now()}`;
    const [writer, cold] = [await newStore(), await newStore()];
    await writer.commit(id, undefined, [appendHistory(...body(0, 300))], "");
    // The first commit of the cold process reads the tail and keeps it (the write's state).
    await cold.commit(id, undefined, [appendHistory(textMessage("c1", Role.USER, "cold one"))], "", undefined, undefined, { withState: false });
    expect(cold.keptTails.count).toBe(1);
    // Another process appends: the cold process's write on its kept tail is refused (which drops
    // it), the tail read and kept again, and from then on read first (others write after it).
    await writer.commit(id, undefined, [appendHistory(textMessage("w0", Role.USER, "writer zero"))], "");
    await cold.commit(id, undefined, [appendHistory(textMessage("c0", Role.USER, "cold zero"))], "", undefined, undefined, { withState: false });
    const before = cold.keptTails.reusedEntries;
    // The other process again: the kept tail is one version behind.
    await writer.commit(id, undefined, [appendHistory(textMessage("w1", Role.USER, "writer one"))], "");
    const window = await cold.readWindow(id, { segment: "history", count: 100, withRest: true });
    expect(comparable(window)).toEqual(comparable(await fresh(id, 100)));
    // The window's last entry (the other process's) is decoded; those the kept tail holds are not.
    const reused = cold.keptTails.reusedEntries - before;
    expect(reused).toBeGreaterThanOrEqual(60);
    expect(reused).toBeLessThan(100);
    // The commit after it (its tail read) takes them from the kept tail too, and stores what a warm process would.
    const beforeCommit = cold.keptTails.reusedEntries;
    await cold.commit(id, undefined, [appendHistory(textMessage("c2", Role.USER, "cold two"))], "", undefined, undefined, { withState: false });
    expect(cold.keptTails.reusedEntries - beforeCommit).toBeGreaterThanOrEqual(60);
    const ids = (await (await newStore()).load(id)).history.map((message) => message.id);
    expect(ids.slice(-6)).toEqual(["m299", "c1", "w0", "c0", "w1", "c2"]);
    expect(comparable(await cold.readWindow(id, { segment: "history", count: 100, withRest: true }))).toEqual(comparable(await fresh(id, 100)));
  }, 60_000);

  it("decodes afresh a conversation lost and written anew at the same version", async () => {
    const id = `recreated-${Date.now()}`;
    const [writer, cold] = [await newStore(), await newStore()];
    await writer.commit(id, undefined, [appendHistory(...body(0, 300))], "");
    await cold.commit(id, undefined, [appendHistory(textMessage("c1", Role.USER, "cold one"))], "", undefined, undefined, { withState: false });
    expect(cold.keptTails.count).toBe(1);
    // The store loses everything; another process writes the conversation anew: the same
    // versions, lengths and `_at`, other texts.
    await backend().wipe();
    const again = await newStore();
    await again.commit(id, undefined, [appendHistory(...body(0, 300, (index) => `written anew ${index}`))], "");
    await again.commit(id, undefined, [appendHistory(textMessage("c1", Role.USER, "anew"))], "");
    await again.commit(id, undefined, [appendHistory(textMessage("w1", Role.USER, "writer one"))], "");
    const before = cold.keptTails.reusedEntries;
    const window = await cold.readWindow(id, { segment: "history", count: 100, withRest: true });
    expect(cold.keptTails.reusedEntries).toBe(before);
    expect(comparable(window)).toEqual(comparable(await fresh(id, 100)));
    expect(window.state.history.slice(0, 3).map((message) => message.parts[0]!.kind.value)).toEqual(
      [202, 203, 204].map((index) => expect.objectContaining({ text: `written anew ${index}` })),
    );
  }, 60_000);
});
