// `npm run bench:encryption`: what encryption at rest (AES-256-GCM of every stored entry, rest,
// change and listing field; docs/encryption-at-rest.md) costs per commit and per cold read, on a
// real redis-server and a real PostgreSQL, at 1,000, 10,000 and 100,000 messages, beside the same
// store without encryption in the same run (the anchor). Stores are used in process, as the
// sidecar uses them, so what differs between the two lines is the encryption alone. Plus the
// cipher alone per message, the floor of the difference.
//
// A commit: one 200-byte user message (BENCH_TEXT_BYTES) appended to a conversation of N messages by a store that
// holds its copy (what every turn of an agent does). A cold read: `load` by a store process with
// nothing cached (a restarted sidecar, another worker): every entry crosses the wire and is
// decrypted. Modes alternate per round so load on the machine falls on both alike. Each read is
// timed twice: wall clock, and the CPU this process spent (process.cpuUsage), which a machine
// shared with other work disturbs far less than it does the wall clock.
//
// The two cipher lines, in CPU µs per value: the store's seal and open, open also as the n-th
// value of a read (an opener works out the key and authenticated data once); then one open taken
// apart into node:crypto's calls, each figure adding one call to the figure before.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { createDecipheriv, createSecretKey, type DecipherGCM } from "node:crypto";
import { cpus, loadavg } from "node:os";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment, type Delta } from "#gen/contextd/v1/state_pb";
import { Codec } from "../src/codec/codec.js";
import { AtRestCipher, type StoredValues } from "../src/store/at-rest-encryption.js";
import type { ConversationStore } from "../src/store/conversation-store.js";
import { PostgresConversationStore } from "../src/store/postgres-conversation-store.js";
import { RedisConversationStore } from "../src/store/redis-conversation-store.js";
import { startPostgres } from "../test/support/postgres.js";
import { startRedis } from "../test/support/redis.js";

const sizes = (process.env.BENCH_SIZES ?? "1000,10000,100000").split(",").map(Number);
const commitsPerSize = Number(process.env.BENCH_COMMITS ?? 100);
const keyId = "bench-1";
const keyBytes = Buffer.alloc(32, 5);
const cipher = new AtRestCipher([{ id: keyId, key: keyBytes, tenant: "" }]);
// BENCH_TEXT_BYTES: about how long each message's text is (the cipher's cost per value is mostly fixed, a decode's grows with it).
const filler = "the quick brown fox jumps over the lazy dog, ".repeat(Math.max(1, Math.round(Number(process.env.BENCH_TEXT_BYTES ?? 200) / 45)));
const text = (index: number) => `message ${index}: ` + filler;

function message(id: string, index: number) {
  return create(MessageSchema, { id, role: index % 2 === 0 ? Role.USER : Role.ASSISTANT, parts: [{ kind: { case: "text", value: { text: text(index) } } }] });
}
function append(messages: ReturnType<typeof message>[]): Delta {
  return create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages } } });
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const ms = (since: bigint) => Number(process.hrtime.bigint() - since) / 1e6;
const cpuMs = (since: NodeJS.CpuUsage) => {
  const used = process.cpuUsage(since);
  return (used.user + used.system) / 1000;
};

type Open = (values: StoredValues | undefined) => Promise<ConversationStore & { close(): Promise<void> }>;

async function fill(store: ConversationStore, conversationId: string, count: number): Promise<void> {
  for (let start = 0; start < count; start += 10_000) {
    const batch = Array.from({ length: Math.min(10_000, count - start) }, (_, offset) => message(`m${start + offset}`, start + offset));
    await store.commit(conversationId, undefined, [append(batch)], "");
  }
}

async function benchStore(name: string, open: Open): Promise<void> {
  for (const size of sizes) {
    const modes = [
      { label: "plain", values: undefined as StoredValues | undefined },
      { label: "encrypted", values: cipher as StoredValues | undefined },
    ];
    const ids = modes.map((mode) => `bench-${mode.label}-${size}-${process.pid}`);
    const writers = await Promise.all(modes.map((mode) => open(mode.values)));
    for (const [index, writer] of writers.entries()) await fill(writer, ids[index]!, size);
    const commits: number[][] = [[], []];
    for (let round = 0; round < commitsPerSize; round++) {
      for (const [index, writer] of writers.entries()) {
        const started = process.hrtime.bigint();
        await writer.commit(ids[index]!, undefined, [append([message(`t${round}`, round)])], "");
        commits[index]!.push(ms(started));
      }
    }
    const reads: number[][] = [[], []];
    const readsCpu: number[][] = [[], []];
    // A loaded machine can make a whole-state reply of 100,000 messages miss the Redis client's 2 s
    // command timeout (before anything is decrypted): such reads are counted and left out.
    const timedOut = [0, 0];
    const readRounds = size >= 100_000 ? 3 : size >= 10_000 ? 7 : 21;
    for (let round = 0; round < readRounds; round++) {
      for (const [index, mode] of modes.entries()) {
        const cold = await open(mode.values);
        try {
          const started = process.hrtime.bigint();
          const startedCpu = process.cpuUsage();
          const state = await cold.load(ids[index]!);
          readsCpu[index]!.push(cpuMs(startedCpu));
          reads[index]!.push(ms(started));
          if (state.history.length !== size + commitsPerSize) throw new Error(`read ${state.history.length} messages, want ${size + commitsPerSize}`);
        } catch (error) {
          if (!(error instanceof ConnectError && error.code === Code.Unavailable && /timed out/.test(error.rawMessage))) throw error;
          timedOut[index]!++;
        } finally {
          await cold.close();
        }
      }
    }
    await Promise.all(writers.map((writer) => writer.close()));
    const [plainCommit, sealedCommit] = commits.map(median);
    const [plainRead, sealedRead] = reads.map(median);
    const [plainCpu, sealedCpu] = readsCpu.map(median);
    const messages = size + commitsPerSize;
    console.log(
      `${name.padEnd(9)} ${String(size).padStart(7)} messages  commit p50 ${plainCommit!.toFixed(3)} ms plain, ${sealedCommit!.toFixed(3)} ms encrypted (${(sealedCommit! - plainCommit!).toFixed(3)} ms)` +
        `  cold read p50 ${plainRead?.toFixed(1)} ms plain, ${sealedRead?.toFixed(1)} ms encrypted (+${(((sealedRead! - plainRead!) / plainRead!) * 100).toFixed(0)}%)` +
        `, CPU p50 ${plainCpu?.toFixed(1)} ms plain, ${sealedCpu?.toFixed(1)} ms encrypted (+${(((sealedCpu! - plainCpu!) / plainCpu!) * 100).toFixed(0)}%, +${(((sealedCpu! - plainCpu!) * 1000) / messages).toFixed(2)} µs a message)  (n=${commitsPerSize} commits, ${readRounds} reads` +
        (timedOut[0]! + timedOut[1]! > 0 ? `; timed out: ${timedOut[0]} plain, ${timedOut[1]} encrypted)` : ")"),
    );
  }
}

/**
 * CPU µs per call of each of `runs`, the median of 7 rounds of 30,000 calls that take turns, so
 * that a change in the machine's load falls on all of them alike.
 */
function cpuMicros(runs: (() => unknown)[]): number[] {
  const calls = 30_000;
  const rounds: number[][] = runs.map(() => []);
  for (const run of runs) for (let index = 0; index < 5_000; index++) run();
  for (let round = 0; round < 7; round++) {
    for (const [index, run] of runs.entries()) {
      const started = process.cpuUsage();
      for (let call = 0; call < calls; call++) run();
      rounds[index]!.push((cpuMs(started) * 1000) / calls);
    }
  }
  return rounds.map(median) as number[];
}

/**
 * The cipher alone: seal and open of one stored message entry (the floor of the difference per
 * message), and one open taken apart into node:crypto's calls (the sealed value's layout is in
 * at-rest-encryption.ts: 3 bytes, the key id, the nonce, the ciphertext, the tag).
 */
function benchCipher(): void {
  const codec = new Codec();
  const entry = codec.encodeStoredEntry(message("m1", 1));
  const sealed = cipher.seal("c", "message", entry);
  const where = () => "bench";
  // The n-th value of a read; a build without openers (main before them) opens each on its own.
  const open = typeof cipher.opener === "function" ? cipher.opener("c", "message") : (stored: Uint8Array) => cipher.open("c", "message", stored, where);
  const key = createSecretKey(keyBytes);
  const idEnd = 3 + sealed[2]!;
  const nonce = sealed.subarray(idEnd, idEnd + 12);
  const tag = sealed.subarray(sealed.length - 16);
  const body = sealed.subarray(idEnd + 12, sealed.length - 16);
  const additionalData = () => Buffer.from(`contextd at rest 1\0message\0${keyId}\0c\0`, "utf8");
  const additional = additionalData();
  const steps: [string, (decipher: DecipherGCM) => void][] = [
    ["createDecipheriv", () => {}],
    ["+ setAAD", (decipher) => decipher.setAAD(additional)],
    ["+ setAuthTag", (decipher) => decipher.setAuthTag(tag)],
    ["+ update", (decipher) => decipher.update(body)],
    ["+ final (verifies the tag)", (decipher) => decipher.final()],
  ];
  const stepRuns = steps.map((_, count) => {
    const run = steps.slice(0, count + 1).map(([, step]) => step);
    return () => {
      const decipher = createDecipheriv("aes-256-gcm", key, nonce, { authTagLength: 16 });
      for (const step of run) step(decipher);
    };
  });
  const [sealUs, openUs, openerUs, decodeUs, additionalUs, subarraysUs, ...stepUs] = cpuMicros([
    () => cipher.seal("c", "message", entry),
    () => cipher.open("c", "message", sealed, where),
    () => open(sealed, where),
    () => codec.decodeStoredEntry(entry),
    additionalData,
    () => (sealed.subarray(idEnd, idEnd + 12), sealed.subarray(sealed.length - 16), sealed.subarray(idEnd + 12, sealed.length - 16)),
    ...stepRuns,
  ]);
  console.log(
    `cipher alone, one ${entry.length}-byte entry, CPU per value: seal ${sealUs!.toFixed(2)} µs, open ${openUs!.toFixed(2)} µs, open as the n-th value of a read ${openerUs!.toFixed(2)} µs` +
      ` (its protobuf decode, the anchor: ${decodeUs!.toFixed(2)} µs; +${sealed.length - entry.length} bytes stored)`,
  );
  const parts = steps.map(([label], index) => `${label} ${stepUs[index]!.toFixed(2)}`);
  console.log(`one open, node:crypto's calls cumulatively, CPU µs: ${parts.join(", ")}; beside them: building the authenticated data ${additionalUs!.toFixed(2)}, three subarrays ${subarraysUs!.toFixed(2)}`);
}

const [redis, postgres] = await Promise.all([startRedis(), startPostgres()]);
try {
  console.log(
    `encryption at rest, ${commitsPerSize} one-message commits per size, cold reads by a fresh store, ${text(0).length}-character texts; ${cpus().length} cores, load average ${loadavg()[0]!.toFixed(1)} at the start`,
  );
  benchCipher();
  await benchStore("redis", async (values) => {
    const store = new RedisConversationStore(redis.url, values ? { values } : {});
    await store.connected();
    return store;
  });
  await benchStore("postgres", async (values) => {
    const store = new PostgresConversationStore(postgres.url, values ? { values } : {});
    await store.connected();
    return store;
  });
  console.log(`load average ${loadavg()[0]!.toFixed(1)} at the end`);
} finally {
  await Promise.all([redis.stop(), postgres.destroy()]);
}
