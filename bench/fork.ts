// What Fork, a past version's read (GetState at_version) and Rewind cost per store as a
// conversation grows, beside a bare commit (a one-message append) to the same conversation: the
// anchor. Each conversation is built with 1,000-message commits, then 10 one-message appends
// (the anchor's commits among them), so "one back" is one small commit back and "10 back" ten:
// what a rebuild from the change log applies grows with the conversation, what an undo applies
// (version-history.ts) with the changes since the version read. Each figure is the median of 5
// calls, in one run; a rewind commits, so each call of one goes back from the version the last
// left; each fork at the latest version then takes ten one-message commits (1st, 2nd, 10th
// timed: the median over the 5 forks), with the state back and, on 5 more forks, without; a
// rewind that drops a just-appended tool round (its call and result appended untimed) last, so
// "fork (one back)" forks the version before that rewind; then forks at the version before a
// removal in the middle of the history and before a prune of its head. Run with `npm run bench:fork`. Redis, Postgres and this process share the machine's cores:
// compare the lines of one run, and read them with the load average printed beside them.
// CONTEXTD_FORK_ENCRYPTION=1 runs the Redis and Postgres stores with encryption at rest, under a
// key generated for the run and written to a key file as --encryption-key-file takes it.
import { create } from "@bufbuild/protobuf";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { DeltaSchema, Segment } from "#gen/contextd/v1/state_pb";
import { MessageSchema, Role, type Message } from "#gen/contextd/v1/message_pb";
import { parseEncryptionKeys, plainValues, storedValuesOf, type StoredValues } from "../src/store/at-rest-encryption.js";
import type { ConversationStore } from "../src/store/conversation-store.js";
import { MemoryConversationStore } from "../src/store/memory-conversation-store.js";
import { PostgresConversationStore } from "../src/store/postgres-conversation-store.js";
import { RedisConversationStore } from "../src/store/redis-conversation-store.js";
import { startPostgres } from "../test/support/postgres.js";
import { startRedis } from "../test/support/redis.js";
import { startRedisCluster } from "../test/support/redis-cluster.js";

const calls = 5;
const perCommit = 1_000;
const sizes = (process.env.CONTEXTD_FORK_SIZES ?? "1000,10000,100000").split(",").map(Number);

const message = (id: string) => create(MessageSchema, { id, role: Role.USER, parts: [{ kind: { case: "text", value: { text: `message ${id} `.padEnd(200, "x") } } }] });
const appendMessages = (messages: Message[]) => create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages } } });
const append = (ids: string[]) => appendMessages(ids.map(message));
const toolCall = (id: string, callId: string) =>
  create(MessageSchema, { id, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: callId, name: "read_file", arguments: { data: "{}" } } } }] });
const toolResult = (id: string, callId: string) =>
  create(MessageSchema, { id, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, name: "read_file", payload: { text: "ok" } } } }] });

/** The median in ms (of what `run` returns when it `timesItself`), or what failed (a fork at a past version of 100,000 messages may outlast Redis's command timeout). */
async function medianMs(run: (call: number) => Promise<unknown>, timesItself = false): Promise<string> {
  const times: number[] = [];
  for (let call = 0; call < calls; call++) {
    const start = process.hrtime.bigint();
    let timed: unknown;
    try {
      timed = await run(call);
    } catch (error) {
      return `failed (${(error as Error).message.slice(0, 80)})`;
    }
    times.push(timesItself ? (timed as number) : Number(process.hrtime.bigint() - start) / 1e6);
  }
  times.sort((a, b) => a - b);
  return `${times[times.length >> 1]!.toFixed(2)} ms`;
}

async function measure(name: string, open: () => Promise<ConversationStore>): Promise<void> {
  const store = await open();
  try {
    for (const size of sizes) {
      const id = `bench-fork-${process.pid}-${size}`;
      for (let from = 0; from < size; from += perCommit) {
        await store.commit(id, undefined, [append(Array.from({ length: Math.min(perCommit, size - from) }, (_, index) => `m${from + index}`))], "");
      }
      let extra = 0;
      const bare = await medianMs(() => store.commit(id, undefined, [append([`extra${extra++}`])], ""));
      while (extra < 10) await store.commit(id, undefined, [append([`extra${extra++}`])], "");
      const current = await store.currentVersion(id);
      // Reads and rewinds before the forks: a fork at a past version of 100,000 messages writes a
      // state as large as the source, which the Redis and Postgres stores' decoded-state cache
      // (--decoded-state-bytes) then holds instead of the source, so the next read of the source
      // reloads it whole (1.2 s once on Postgres) whatever version it reads.
      const readPast = await medianMs(() => store.loadAt(id, current - 1n));
      const readTenBack = await medianMs(() => store.loadAt(id, current - 10n));
      const rewindBy = (back: bigint) => async () => store.rewind(id, undefined, (await store.currentVersion(id)) - back, "");
      const rewind = await medianMs(rewindBy(1n));
      const rewindTen = await medianMs(rewindBy(10n));
      // The commit after a rewind: each call rewinds one back (untimed), then times a one-message
      // append to the rewound state, beside the bare commit (what the id index and the copies cost
      // to follow a truncation shows here).
      let afterRewind = 0;
      const commitAfterRewind = await medianMs(async () => {
        await rewindBy(1n)();
        const start = process.hrtime.bigint();
        await store.commit(id, undefined, [append([`after-rewind${afterRewind++}`])], "");
        return Number(process.hrtime.bigint() - start) / 1e6;
      }, true);
      // A rewind that drops a tool round (the usual undo): each call appends a call and its result
      // (untimed), then rewinds one back (timed). The stores' id index then forgets the call id.
      let round = 0;
      const rewindToolRound = await medianMs(async () => {
        const callId = `call_${round++}`;
        await store.commit(id, undefined, [appendMessages([toolCall(`round-call-${callId}`, callId), toolResult(`round-result-${callId}`, callId)])], "");
        const start = process.hrtime.bigint();
        await rewindBy(1n)();
        return Number(process.hrtime.bigint() - start) / 1e6;
      }, true);
      const latest = await store.currentVersion(id);
      const fork = await medianMs((call) => store.fork(id, undefined, `${id}-latest-${call}`));
      // The commits after a fork at the latest version: each of the 5 forks above takes ten
      // one-message appends with the state back (as Commit with include_state), the 1st, 2nd and
      // 10th timed, and 5 more forks ten without (the server's Commit otherwise: planned on the
      // stored tail). A fork shares the source's segments, but the id index and the decoded copy
      // the commits plan on are its own (issue 32).
      const forkCommitTimes = async (fork: (call: number) => string, withState: boolean) => {
        const all: number[][] = [];
        for (let call = 0; call < calls; call++) {
          const times: number[] = [];
          for (let commit = 0; commit < 10; commit++) {
            const start = process.hrtime.bigint();
            await store.commit(fork(call), undefined, [append([`fork-commit${commit}`])], "", undefined, undefined, { withState });
            times.push(Number(process.hrtime.bigint() - start) / 1e6);
          }
          all.push(times);
        }
        return (index: number) => `${all.map((times) => times[index]!).sort((a, b) => a - b)[calls >> 1]!.toFixed(2)} ms`;
      };
      const forkCommit = await forkCommitTimes((call) => `${id}-latest-${call}`, true);
      for (let call = 0; call < calls; call++) await store.fork(id, undefined, `${id}-stateless-${call}`);
      const forkCommitStateless = await forkCommitTimes((call) => `${id}-stateless-${call}`, false);
      const forkPast = await medianMs((call) => store.fork(id, latest - 1n, `${id}-past-${call}`));
      // Ten back: before the five tool rounds appended and rewound (what the source holds again).
      const forkTenBack = await medianMs((call) => store.fork(id, latest - 10n, `${id}-ten-back-${call}`));
      // Forks at a version before an edit that is not at the end: a removal of the middle message
      // (what a fork shares of each segment is the longest prefix the current list still holds:
      // half of the history here), then a prune of the 10 oldest (no prefix shared: every message
      // is the fork's own). Each edit once, untimed; then 5 forks at the version before it.
      const middle = (await store.load(id)).history[size >> 1]!.id;
      const removed = await store.commit(id, undefined, [create(DeltaSchema, { operation: { case: "removeMessages", value: { segment: Segment.HISTORY, ids: [middle] } } })], "");
      const forkBeforeRemoval = await medianMs((call) => store.fork(id, removed.version - 1n, `${id}-before-removal-${call}`));
      const historyLength = (await store.load(id)).history.length;
      const pruned = await store.commit(id, undefined, [create(DeltaSchema, { operation: { case: "pruneHistory", value: { maxMessages: historyLength - 10 } } })], "");
      const forkBeforePrune = await medianMs((call) => store.fork(id, pruned.version - 1n, `${id}-before-prune-${call}`));
      const figures = { "bare commit": bare, "fork (latest)": fork, "fork's 1st commit": forkCommit(0), "fork's 2nd commit": forkCommit(1), "fork's 10th commit": forkCommit(9), "without state: fork's 1st commit": forkCommitStateless(0), "2nd": forkCommitStateless(1), "10th": forkCommitStateless(9), "fork (one back)": forkPast, "fork (10 back)": forkTenBack, "fork (before a removal in the middle)": forkBeforeRemoval, "fork (before a prune)": forkBeforePrune, "read one back": readPast, "read 10 back": readTenBack, "rewind 1": rewind, "rewind 10": rewindTen, "commit after rewind": commitAfterRewind, "rewind a tool round": rewindToolRound };
      const line = Object.entries(figures).map(([what, figure]) => `${what} ${figure}`).join(", ");
      console.log(`${name.padEnd(13)} ${String(size).padStart(7)} messages (${current} versions): ${line} (load ${loadavg()[0]!.toFixed(1)})`);
    }
  } finally {
    await store.close();
  }
}

/** `--decoded-state-bytes` of the Redis and Postgres stores (`CONTEXTD_FORK_DECODED_STATE_BYTES`; the default when unset): a fork's copy is held only when it fits beside its source's (the messages they share weighed once). */
const cacheBytes = process.env.CONTEXTD_FORK_DECODED_STATE_BYTES === undefined ? undefined : Number(process.env.CONTEXTD_FORK_DECODED_STATE_BYTES);
/** The stores' values: sealed under a key generated into a key file (`CONTEXTD_FORK_ENCRYPTION=1`), or as they are. */
function benchValues(): StoredValues {
  if (process.env.CONTEXTD_FORK_ENCRYPTION !== "1") return plainValues;
  const directory = mkdtempSync(join(tmpdir(), "contextd-bench-keys-"));
  try {
    const file = join(directory, "keys");
    writeFileSync(file, `bench:${randomBytes(32).toString("base64")}\n`, { mode: 0o600 });
    return storedValuesOf(parseEncryptionKeys(readFileSync(file, "utf8"), file));
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
}
const values = benchValues();
if (values.encrypts) console.log("encryption at rest: on (one generated key)");
const only = process.env.CONTEXTD_FORK_STORES?.split(",");
const wanted = (name: string) => only === undefined || only.includes(name);

if (wanted("memory")) await measure("memory", async () => new MemoryConversationStore());
if (wanted("redis")) {
  const redis = await startRedis();
  try {
    await measure("redis", async () => {
      const store = new RedisConversationStore(redis.url, { cacheBytes, values });
      if (!(await store.connected())) throw new Error("redis store did not connect");
      return store;
    });
  } finally {
    await redis.stop();
  }
}
if (wanted("cluster")) {
  const cluster = await startRedisCluster();
  try {
    await measure("redis cluster", async () => {
      const store = new RedisConversationStore({ clusterNodes: cluster.addresses.slice(0, 1) }, { values });
      if (!(await store.connected())) throw new Error("redis cluster store did not connect");
      return store;
    });
  } finally {
    await cluster.stop();
  }
}
if (wanted("postgres")) {
  const postgres = await startPostgres();
  try {
    await measure("postgres", async () => {
      const store = new PostgresConversationStore(postgres.url, { cacheBytes, values });
      if (!(await store.connected())) throw new Error("postgres store did not connect");
      return store;
    });
  } finally {
    await postgres.destroy();
  }
}
