// Resident memory of the embedded store after 4,000 commits to one conversation, with and without
// an idempotency key per commit (issue 15 item 5: every keyed commit used to keep its whole new
// state as the record, +95 MB for 4,000 keyed commits). Each mode runs in its own child process so
// one mode's heap cannot lend memory to the other. Heap used is the steady figure; RSS also moves
// with the codec's retained encodings (array buffers, bounded by the codec) and allocator slack.
// Run with `npm run bench:idempotency`.
import { create } from "@bufbuild/protobuf";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment } from "#gen/contextd/v1/state_pb";
import { MemoryConversationStore } from "../src/store/memory-conversation-store.js";

const commits = 4_000;
/** A short chat turn: what an agent loop commits one at a time. */
const text = "a user turn of about one hundred characters, as an agent loop commits one message at a time....";

async function run(keyed: boolean): Promise<void> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error("run with node --expose-gc");
  const store = new MemoryConversationStore();
  gc();
  const before = process.memoryUsage();
  for (let index = 0; index < commits; index++) {
    const message = create(MessageSchema, { id: `m${index}`, role: Role.USER, parts: [{ kind: { case: "text", value: { text } } }] });
    const delta = create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages: [message] } } });
    await store.commit("bench", undefined, [delta], keyed ? `key-${index}` : "");
  }
  gc();
  const after = process.memoryUsage();
  const mb = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);
  console.log(
    `${keyed ? "keyed  " : "unkeyed"}: ${commits} commits to one conversation: RSS +${mb(after.rss - before.rss)} MB, heap used +${mb(after.heapUsed - before.heapUsed)} MB, ` +
      `array buffers +${mb(after.arrayBuffers - before.arrayBuffers)} MB (RSS ${mb(before.rss)} -> ${mb(after.rss)} MB)`,
  );
  await store.close();
}

const mode = process.argv[2];
if (mode === "keyed" || mode === "unkeyed") {
  await run(mode === "keyed");
} else {
  const self = fileURLToPath(import.meta.url);
  for (const child of ["unkeyed", "keyed"]) {
    process.stdout.write(execFileSync(process.execPath, ["--expose-gc", self, child], { encoding: "utf8" }));
  }
}
