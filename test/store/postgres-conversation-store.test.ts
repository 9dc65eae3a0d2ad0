// The Postgres store beyond the shared contract (docs/stores.md, "The Postgres store"): its
// migrations, the rows a commit writes, catching a cached copy up, idempotency expiry, change
// retention, LISTEN/NOTIFY delivery, DATA_LOSS and UNAVAILABLE. Against a real PostgreSQL.
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { createHash } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChangeSchema, type Change } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, Segment, type ConversationState } from "#gen/contextd/v1/state_pb";
import { PostgresConversationStore, type PostgresStoreOptions } from "../../src/store/postgres-conversation-store.js";
import { migratePostgres, postgresMigrations } from "../../src/store/postgres-schema.js";
import { listById } from "../../src/store/conversation-listing.js";
import { rememberedIdOverheadBytes } from "../../src/store/recent-ids.js";
import { startPostgres, type PostgresProcess } from "../support/postgres.js";
import { randomSource } from "../support/random-messages.js";
import { appendHistory, delta, randomEdits, textMessage } from "./fixtures.js";

let postgres: PostgresProcess;
let url: string;
let raw: pg.Client;
const stores: PostgresConversationStore[] = [];
beforeAll(async () => {
  postgres = await startPostgres();
  url = await postgres.createDatabase("specifics");
  raw = new pg.Client({ connectionString: url });
  await raw.connect();
});
afterAll(async () => {
  for (const store of stores) await store.close();
  await raw?.end();
  await postgres?.destroy();
});

async function openStore(options: PostgresStoreOptions = {}, at = url): Promise<PostgresConversationStore> {
  const store = new PostgresConversationStore(at, options);
  stores.push(store);
  expect(await store.connected()).toBe(true);
  return store;
}

async function rejection(promise: Promise<unknown>): Promise<ConnectError> {
  const error = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error, "expected a rejection").toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

const encoded = (state: ConversationState) => Buffer.from(toBinary(ConversationStateSchema, state));
const sized = (id: string, bytes: number) => textMessage(id, Role.USER, `${id} `.padEnd(bytes, "x"));
const idOf = (conversationId: string) => Buffer.from(conversationId, "utf8");

/** Rows of `table` of the conversation written by the transaction that last wrote its header row. */
async function rowsOfLastCommit(table: string, conversationId: string): Promise<number> {
  const { rows } = await raw.query<{ count: string }>(
    `SELECT count(*) FROM ${table} t WHERE t.conversation_id = $1 AND t.xmin::text = (SELECT c.xmin::text FROM contextd_conversations c WHERE c.id = $1)`,
    [idOf(conversationId)],
  );
  return Number(rows[0]!.count);
}

describe("migrations", () => {
  it("creates the schema once when four sidecars start at once, records its version, and applies nothing the second time", async () => {
    const fresh = await postgres.createDatabase("concurrent-start");
    const opened = await Promise.all(Array.from({ length: 4 }, () => openStore({}, fresh)));
    expect(opened).toHaveLength(4);
    const client = new pg.Client({ connectionString: fresh });
    await client.connect();
    try {
      const { rows } = await client.query<{ version: number; name: string }>("SELECT version, name FROM contextd_schema_migrations ORDER BY version");
      expect(rows.map((row) => row.version)).toEqual(postgresMigrations.map((migration) => migration.version));
      expect(await migratePostgres(client)).toEqual([]);
      // Every store works on the one schema.
      await opened[0]!.commit("shared", 0n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "");
      expect((await opened[3]!.load("shared")).history.map((message) => message.id)).toEqual(["u1"]);
    } finally {
      await client.end();
    }
  });

  it("applies a later migration to a database at an earlier version, and refuses a database newer than the build", async () => {
    const fresh = await postgres.createDatabase("later-migration");
    const client = new pg.Client({ connectionString: fresh });
    await client.connect();
    try {
      expect(await migratePostgres(client, postgresMigrations.slice(0, 1))).toEqual([1]);
      // A database at version 1 (before the calibration table) takes this build's later migrations.
      const known = postgresMigrations.at(-1)!.version;
      expect(await migratePostgres(client)).toEqual(postgresMigrations.slice(1).map((migration) => migration.version));
      const later = { version: known + 1, name: "a later one", sql: "CREATE TABLE contextd_later (x integer)" };
      expect(await migratePostgres(client, [...postgresMigrations, later])).toEqual([known + 1]);
      // This build does not know the later one: the store refuses the database and says why.
      const store = new PostgresConversationStore(fresh);
      stores.push(store);
      expect(await store.connected(300)).toBe(false);
      const refused = await rejection(store.ping());
      expect(refused.code).toBe(Code.Unavailable);
      expect(refused.rawMessage).toContain(`creating or migrating the contextd schema failed: the database's contextd schema is at version ${known + 1}, newer than this build knows (${known})`);
    } finally {
      await client.end();
    }
  });
  it("migration 5 lists a conversation written before it with created and updated time 0, and its next commit sets the updated time only", async () => {
    const fresh = await postgres.createDatabase("before-metadata");
    const client = new pg.Client({ connectionString: fresh });
    await client.connect();
    try {
      expect(await migratePostgres(client, postgresMigrations.slice(0, 4))).toEqual([1, 2, 3, 4]);
      // A header row as migration 3's contextd_commit leaves a first commit with an empty state.
      const rest = Buffer.from(toBinary(ConversationStateSchema, create(ConversationStateSchema, { conversationId: "older" })));
      await client.query(
        "INSERT INTO contextd_conversations (id, version, created, rest, rest_at, segment_first, segment_length, segment_at) VALUES ($1, 1, 'c-older', $2, 1, '{0,0,0,0}', '{0,0,0,0}', '{1,1,1,1}')",
        [Buffer.from("older"), rest],
      );
    } finally {
      await client.end();
    }
    const store = await openStore({ now: () => 1_800_000_000_000 }, fresh);
    expect((await store.list(listById("", 10, ""))).conversations).toMatchObject([{ conversationId: "older", version: 1n, createdAtUnixMs: 0n, updatedAtUnixMs: 0n, title: "", labels: {} }]);
    await store.commit("older", 1n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "");
    const byUpdate = await store.list({ ...listById("", 10, ""), order: "updated" });
    expect(byUpdate.conversations).toMatchObject([{ conversationId: "older", version: 2n, createdAtUnixMs: 0n, updatedAtUnixMs: 1_800_000_000_000n }]);
  });

  it("migration 11: a commit through the previous release's contextd_commit_expiring leaves the id index stale, and the next cold commit plans on the whole state and writes it whole", async () => {
    const store = await openStore();
    const id = "rolling-upgrade";
    await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "one"), textMessage("u2", Role.USER, "two"))], "");
    // What a sidecar of the previous release sends for an append of one message to history.
    const message = Buffer.from(toBinary(MessageSchema, textMessage("old-1", Role.USER, "from the old release")));
    const { rows } = await raw.query<{ outcome: string; version: string }>(
      "SELECT * FROM contextd_commit_expiring(0, $1, 1, $2, ''::bytea, '', $3, 86400000, 10000, '', '', NULL, '{0,2,0,0}', '{=,p,=,=}', '{0,2,0,0}', '{0,1,0,0}', $4, '{1}', $5, $3, NULL, NULL)",
      [idOf(id), Buffer.from("a change"), Date.now(), message, [message.length]],
    );
    expect(rows[0]).toMatchObject({ outcome: "ok", version: "2" });
    const indexed = async () => {
      const { rows: header } = await raw.query<{ ids_at: string }>("SELECT ids_at FROM contextd_conversations WHERE id = $1", [idOf(id)]);
      const { rows: ids } = await raw.query<{ message_id: Buffer }>("SELECT message_id FROM contextd_indexed_ids($1) ORDER BY message_id", [idOf(id)]);
      return [header[0]!.ids_at, ids.map((row) => row.message_id.toString("utf8"))];
    };
    expect(await indexed()).toEqual(["1", ["u1", "u2"]]);
    // A cold commit of this release does not trust the stale index: the old release's id is taken.
    const cold = await openStore();
    const duplicate = await rejection(cold.commit(id, undefined, [appendHistory(textMessage("old-1", Role.USER, "again"))], "", undefined, undefined, { withState: false }));
    expect([duplicate.code, duplicate.rawMessage]).toEqual([Code.InvalidArgument, 'deltas[0].append_messages: messages[0]: duplicate message id "old-1"']);
    expect((await cold.commit(id, undefined, [appendHistory(textMessage("u3", Role.USER, "three"))], "", undefined, undefined, { withState: false })).version).toBe(3n);
    expect(cold.tailCommits).toBe(0);
    expect(await indexed()).toEqual(["3", ["old-1", "u1", "u2", "u3"]]);
    // Current again: the next cold commit is planned on the tail.
    const next = await openStore();
    expect((await next.commit(id, undefined, [appendHistory(textMessage("u4", Role.USER, "four"))], "", undefined, undefined, { withState: false })).version).toBe(4n);
    expect(next.tailCommits).toBe(1);
    expect((await next.load(id)).history.map((entry) => entry.id)).toEqual(["u1", "u2", "old-1", "u3", "u4"]);
  });

  it("remembers stale id indexes within --listed-id-bytes: 30 found stale past a 10-id bound keep the newest 10, and a forgotten one is found stale again", async () => {
    const id = (index: number) => `stale-memo-${String(index).padStart(3, "0")}`;
    const bound = 10 * (rememberedIdOverheadBytes + 2 * id(0).length);
    const store = await openStore({ listedIdBytes: bound });
    const idsAt = async (index: number) => (await raw.query<{ ids_at: string; version: string }>("SELECT ids_at, version FROM contextd_conversations WHERE id = $1", [idOf(id(index))])).rows[0]!;
    const say = (index: number, messageId: string) => store.commit(id(index), undefined, [appendHistory(textMessage(messageId, Role.USER, "hello"))], "");
    for (let index = 0; index < 30; index++) {
      await say(index, "first");
      // As a sidecar of the previous release leaves it: the index is behind the version.
      await raw.query("UPDATE contextd_conversations SET ids_at = 0 WHERE id = $1", [idOf(id(index))]);
      await say(index, "second");
      expect((await idsAt(index)).ids_at).toBe("0");
      expect(store.staleIdIndexIds.bytes).toBeLessThanOrEqual(bound);
    }
    expect(store.staleIdIndexIds).toEqual({ count: 10, bytes: bound });
    // The newest is remembered: its next commit writes the index whole.
    await say(29, "third");
    expect(await idsAt(29)).toEqual({ ids_at: "3", version: "3" });
    // The oldest was forgotten: its next commit leaves the index stale and remembers it, the one after rewrites it.
    await say(0, "third");
    expect((await idsAt(0)).ids_at).toBe("0");
    await say(0, "fourth");
    expect(await idsAt(0)).toEqual({ ids_at: "4", version: "4" });
    expect((await store.load(id(0))).history.map((message) => message.id)).toEqual(["first", "second", "third", "fourth"]);
  });

  it("two processes without a copy appending the same new id at once: one commit takes it, the other is refused naming it, and the id is stored once", async () => {
    const writer = await openStore();
    const id = "cold-race";
    await writer.commit(id, 0n, [appendHistory(...Array.from({ length: 200 }, (_, index) => textMessage(`h${index}`, Role.USER, `m${index}`)))], "");
    for (let round = 0; round < 5; round++) {
      const [first, second] = [await openStore(), await openStore()];
      const batch = [appendHistory(textMessage(`same-${round}`, Role.USER, "raced"))];
      const settled = await Promise.allSettled([first, second].map((store) => store.commit(id, undefined, batch, "", undefined, undefined, { withState: false })));
      expect(settled.filter((outcome) => outcome.status === "fulfilled")).toHaveLength(1);
      const refused = settled.find((outcome) => outcome.status === "rejected") as PromiseRejectedResult;
      expect([(refused.reason as ConnectError).code, (refused.reason as ConnectError).rawMessage]).toEqual([Code.InvalidArgument, `deltas[0].append_messages: messages[0]: duplicate message id "same-${round}"`]);
      expect(first.tailCommits + second.tailCommits).toBe(1);
    }
    const stored = await (await openStore()).load(id);
    expect(stored.history.map((message) => message.id).slice(-5)).toEqual(["same-0", "same-1", "same-2", "same-3", "same-4"]);
  });

  it("answers UNAVAILABLE saying why when its user may not create the schema", async () => {
    const fresh = await postgres.createDatabase("no-rights");
    await raw.query("CREATE ROLE contextd_no_rights LOGIN");
    const store = new PostgresConversationStore(fresh.replace("postgres@", "contextd_no_rights@"));
    stores.push(store);
    expect(await store.connected(300)).toBe(false);
    const refused = await rejection(store.load("x"));
    expect(refused.code).toBe(Code.Unavailable);
    expect(refused.rawMessage).toMatch(/creating or migrating the contextd schema failed: permission denied for schema public/);
  });
});

describe("rows per change", () => {
  it("writes one message row per appended message, keyed or not, on a 2,000-message conversation", async () => {
    const store = await openStore();
    const id = "append-rows";
    let version = 0n;
    for (let start = 0; start < 2_000; start += 500) {
      version = (await store.commit(id, version, [appendHistory(...Array.from({ length: 500 }, (_, index) => sized(`m${start + index}`, 1_000)))], "")).version;
    }
    for (const key of ["", "key-1"]) {
      version = (await store.commit(id, version, [appendHistory(sized(`appended${key}`, 1_000))], key)).version;
      expect(await rowsOfLastCommit("contextd_messages", id)).toBe(1);
      expect(await rowsOfLastCommit("contextd_changes", id)).toBe(1);
    }
    const { rows } = await raw.query<{ count: string }>("SELECT count(*) FROM contextd_messages WHERE conversation_id = $1", [idOf(id)]);
    expect(Number(rows[0]!.count)).toBe(2_002);
  });

  it("writes only the summary for a compaction that keeps the tail, and rewrites a segment from either end", async () => {
    const store = await openStore();
    const id = "compact-rows";
    const many = (prefix: string, count: number) => Array.from({ length: count }, (_, index) => textMessage(`${prefix}${index}`, Role.USER, "x"));
    let outcome = await store.commit(id, 0n, [delta({ case: "replaceSegment", value: { segment: Segment.MEMORY, messages: [...many("a", 2_500), ...many("t", 3)] } })], "");
    outcome = await store.commit(id, 1n, [delta({ case: "replaceSegment", value: { segment: Segment.MEMORY, messages: [...many("b", 2), ...outcome.state!.memory.slice(-3)] } })], "");
    expect(await rowsOfLastCommit("contextd_messages", id)).toBe(2);
    outcome = await store.commit(id, 2n, [delta({ case: "replaceSegment", value: { segment: Segment.MEMORY, messages: [...outcome.state!.memory.slice(0, 4), ...many("c", 1)] } })], "");
    expect(await rowsOfLastCommit("contextd_messages", id)).toBe(1);
    const reader = await openStore();
    const stored = await reader.load(id);
    expect(stored.memory.map((message) => message.id)).toEqual(["b0", "b1", "t0", "t1", "c0"]);
    expect(encoded(stored).equals(encoded(outcome.state!))).toBe(true);
    const { rows } = await raw.query<{ count: string }>("SELECT count(*) FROM contextd_messages WHERE conversation_id = $1", [idOf(id)]);
    expect(Number(rows[0]!.count)).toBe(5);
  });

  it("catches a cached copy up from the new rows, keeping its unchanged lists and messages", async () => {
    const [writer, reader] = [await openStore(), await openStore()];
    const id = "tail-read";
    const first = await writer.commit(id, 0n, [appendHistory(...Array.from({ length: 200 }, (_, index) => sized(`m${index}`, 200)))], "");
    const before = await reader.load(id);
    expect(await reader.load(id)).toBe(before);
    const written = await writer.commit(id, first.version, [appendHistory(sized("new-1", 200))], "");
    const caughtUp = await reader.load(id);
    expect(caughtUp.history[0]).toBe(before.history[0]);
    expect(caughtUp.system).toBe(before.system);
    expect(encoded(caughtUp).equals(encoded(written.state!))).toBe(true);
  });

  it("agrees with a fresh reader after every one of 300 random edits, caught up by a second process", async () => {
    const [writer, follower] = [await openStore(), await openStore()];
    const random = randomSource(14);
    const id = "random-edits";
    const edits = randomEdits(random);
    let state = await writer.load(id);
    for (let step = 0; step < 300; step++) {
      const deltas = edits(state);
      if (deltas === undefined) continue;
      state = (await writer.commit(id, state.version, deltas, "")).state!;
      if (random() < 0.5) continue;
      const caughtUp = await follower.load(id);
      const reader = new PostgresConversationStore(url, { poolSize: 1 });
      const whole = await reader.load(id);
      await reader.close();
      expect(encoded(caughtUp), `step ${step}`).toEqual(encoded(state));
      expect(encoded(whole), `step ${step}`).toEqual(encoded(state));
      // The id index the commits kept (migration 11) is the state's: every id, each history call id's latest name, current.
      const ids = [...state.system, ...state.history, ...state.memory, ...state.tools].map((message) => message.id);
      const latest: Record<string, string> = {};
      for (const message of state.history) if (message.role === Role.ASSISTANT) for (const part of message.parts) if (part.kind.case === "toolCall") latest[part.kind.value.id] = part.kind.value.name;
      const stored = await raw.query<{ message_id: Buffer }>("SELECT message_id FROM contextd_indexed_ids($1)", [idOf(id)]);
      const calls = await raw.query<{ call_id: Buffer; name: Buffer }>("SELECT call_id, name FROM contextd_indexed_calls($1)", [idOf(id)]);
      const header = await raw.query<{ ids_at: string }>("SELECT ids_at FROM contextd_conversations WHERE id = $1", [idOf(id)]);
      expect(stored.rows.map((row) => row.message_id.toString("utf8")).sort(), `step ${step}`).toEqual(ids.sort());
      expect(Object.fromEntries(calls.rows.map((row) => [row.call_id.toString("utf8"), row.name.toString("utf8")])), `step ${step}`).toEqual(latest);
      expect(header.rows[0]!.ids_at, `step ${step}`).toBe(String(state.version));
    }
    expect(state.version).toBeGreaterThan(100n);
  });

  it("reads the stored state again when its segments are not the cached copy's at the same version ('stale'), and commits onto it", async () => {
    const store = await openStore();
    const id = "stale-rows";
    const first = await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "hi"))], "");
    // Written behind the sidecar's back at the same version: one more message in history.
    await raw.query("INSERT INTO contextd_messages VALUES ($1, 1, 1, $2)", [idOf(id), Buffer.from(toBinary(MessageSchema, textMessage("behind", Role.USER, "behind")))]);
    await raw.query("UPDATE contextd_conversations SET segment_length[2] = 2 WHERE id = $1", [idOf(id)]);
    const outcome = await store.commit(id, first.version, [appendHistory(textMessage("u2", Role.USER, "again"))], "");
    expect(outcome.version).toBe(2n);
    expect(outcome.state!.history.map((message) => message.id)).toEqual(["u1", "behind", "u2"]);
  });
});

describe("idempotency records and changes", () => {
  it("forgets a record after idempotencyTtlMs and deletes expired records as later keyed commits come", async () => {
    let now = 1_000_000;
    const store = await openStore({ idempotencyTtlMs: 1_000, now: () => now });
    const id = "ttl";
    const once = [appendHistory(textMessage("", Role.USER, "x"))];
    for (let key = 0; key < 20; key++) await store.commit(id, undefined, once, `k${key}`);
    now += 999;
    expect((await store.commit(id, undefined, once, "k0")).replayed).toBe(true);
    now += 1;
    expect(await store.commit(id, undefined, once, "k0")).toMatchObject({ replayed: false, version: 21n });
    // Each keyed commit removes up to 8 expired records: three more commits leave none of the first 20.
    for (let key = 0; key < 2; key++) await store.commit(id, undefined, once, `later-${key}`);
    const { rows } = await raw.query<{ count: string }>("SELECT count(*) FROM contextd_idempotency WHERE conversation_id = $1 AND expires_at_ms <= $2", [idOf(id), now]);
    expect(Number(rows[0]!.count)).toBe(0);
  });

  it("keeps the newest maxChangesPerConversation changes; Watch from before them is OUT_OF_RANGE, from within them resumes", async () => {
    const store = await openStore({ maxChangesPerConversation: 5, watchPollMs: 100 });
    const id = "retention";
    for (let version = 0n; version < 12n; version++) await store.commit(id, version, [appendHistory(textMessage(`m${version}`, Role.USER, "x"))], "");
    const { rows } = await raw.query<{ version: string }>("SELECT version FROM contextd_changes WHERE conversation_id = $1 ORDER BY version", [idOf(id)]);
    expect(rows.map((row) => Number(row.version))).toEqual([8, 9, 10, 11, 12]);
    const trimmed = await rejection((async () => {
      for await (const _ of store.watch(id, 3n, new AbortController().signal)) break;
    })());
    expect(trimmed.code).toBe(Code.OutOfRange);
    expect(trimmed.rawMessage).toContain("oldest retained change is version 8");
    const controller = new AbortController();
    const seen: bigint[] = [];
    for await (const change of store.watch(id, 7n, controller.signal)) {
      seen.push(change.version);
      if (seen.length === 5) controller.abort();
    }
    expect(seen).toEqual([8n, 9n, 10n, 11n, 12n]);
  });

  it("delivers a change committed by another process through NOTIFY, also after its listener connection was cut and from concurrent commits (notified after them)", async () => {
    // A poll interval far longer than the test: only a notification can wake the watch in time.
    const watcher = await openStore({ watchPollMs: 600_000 });
    const writer = await openStore();
    const id = "notify";
    await writer.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "1"))], "");
    const controller = new AbortController();
    const seen: Change[] = [];
    const done = (async () => {
      for await (const change of watcher.watch(id, 0n, controller.signal)) {
        seen.push(change);
        if (seen.length === 4) controller.abort();
      }
    })();
    await expect.poll(() => seen.length).toBe(1);
    await writer.commit(id, 1n, [appendHistory(textMessage("u2", Role.USER, "2"))], "");
    await expect.poll(() => seen.length, { timeout: 10_000 }).toBe(2);
    await raw.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = 'LISTEN contextd_changes' AND datname = 'specifics'");
    await writer.commit(id, 2n, [appendHistory(textMessage("u3", Role.USER, "3"))], "");
    await expect.poll(() => seen.length, { timeout: 10_000 }).toBe(3);
    // Issued while four other commits (from cached states, so they need no read first) are in
    // flight: notified after its transaction, with theirs.
    for (let index = 0; index < 4; index++) await writer.commit(`notify-other-${index}`, 0n, [appendHistory(textMessage("o", Role.USER, "o"))], "");
    await Promise.all([
      ...Array.from({ length: 4 }, (_, index) => writer.commit(`notify-other-${index}`, 1n, [appendHistory(textMessage("p", Role.USER, "p"))], "")),
      writer.commit(id, 3n, [appendHistory(textMessage("u4", Role.USER, "4"))], ""),
    ]);
    await done;
    expect(seen.map((change) => change.version)).toEqual([1n, 2n, 3n, 4n]);
  });
});

describe("migration 12: notifications only while some sidecar listens", () => {
  const payloadOf = (conversationId: string) => createHash("md5").update(idOf(conversationId)).digest("hex");
  /** A watch that records what it sees; a poll interval far longer than the test, so only a notification or the catch-up read can bring a change. */
  function watching(store: PostgresConversationStore, conversationId: string) {
    const controller = new AbortController();
    const seen: bigint[] = [];
    const done = (async () => {
      for await (const change of store.watch(conversationId, 0n, controller.signal)) seen.push(change.version);
    })();
    return { seen, stop: () => (controller.abort(), done) };
  }
  /** A LISTEN connection that does not hold the listeners' lock (as a sidecar of the previous release listens): it hears only what is sent. */
  async function plainListener(at: string) {
    const client = new pg.Client({ connectionString: at });
    await client.connect();
    const heard: string[] = [];
    client.on("notification", (notification) => heard.push(notification.payload ?? ""));
    await client.query("LISTEN contextd_changes");
    return { heard, end: () => client.end() };
  }

  it("sends no notification while no sidecar listens, and a watch that starts later reads those changes and is notified of the next", async () => {
    // A database of its own: the stores of the other tests keep their listeners open.
    const at = await postgres.createDatabase("listened");
    const writer = await openStore({}, at);
    const watcher = await openStore({ watchPollMs: 600_000 }, at);
    const plain = await plainListener(at);
    const oldRelease = new pg.Client({ connectionString: at });
    await oldRelease.connect();
    let watch: ReturnType<typeof watching> | undefined;
    try {
      for (let version = 0n; version < 3n; version++) await writer.commit("before", version, [appendHistory(textMessage(`b${version}`, Role.USER, "x"))], "");
      watch = watching(watcher, "before");
      await expect.poll(() => watch!.seen, { timeout: 10_000 }).toEqual([1n, 2n, 3n]);
      // Now a sidecar listens. Notifications arrive in commit order, so by the time this one's has
      // come, any of the three commits before would have come first: none was sent.
      await writer.commit("after", 0n, [appendHistory(textMessage("a0", Role.USER, "x"))], "");
      await expect.poll(() => plain.heard, { timeout: 10_000 }).toContain(payloadOf("after"));
      expect(plain.heard).not.toContain(payloadOf("before"));
      await writer.commit("before", 3n, [appendHistory(textMessage("b3", Role.USER, "x"))], "");
      await expect.poll(() => watch!.seen, { timeout: 10_000 }).toEqual([1n, 2n, 3n, 4n]);
      // A sidecar of an earlier release commits through a function that notifies on every commit
      // (migration 8's contextd_commit_expiring; 11's contextd_commit_indexed wrote the id index
      // tables migration 16 drops): this release's listener hears it.
      const message = Buffer.from(toBinary(MessageSchema, textMessage("old-1", Role.USER, "from the old release")));
      const change = Buffer.from(toBinary(ChangeSchema, create(ChangeSchema, { conversationId: "before", version: 5n })));
      const { rows } = await oldRelease.query<{ outcome: string }>(
        `SELECT * FROM contextd_commit_expiring(0, $1, 4, $2, ''::bytea, '', $3, 86400000, 10000, 'contextd_changes', '', NULL, '{0,4,0,0}', '{=,p,=,=}', '{0,4,0,0}', '{0,1,0,0}', $4, '{1}', $5, $3, NULL, NULL)`,
        [idOf("before"), change, Date.now(), message, [message.length]],
      );
      expect(rows[0]!.outcome).toBe("ok");
      await expect.poll(() => watch!.seen, { timeout: 10_000 }).toEqual([1n, 2n, 3n, 4n, 5n]);
    } finally {
      await watch?.stop();
      await plain.end();
      await oldRelease.end();
    }
  });

  it("misses none of the changes another process commits while the watch starts and its listener joins", async () => {
    const at = await postgres.createDatabase("joining");
    const writer = await openStore({}, at);
    const watcher = await openStore({ watchPollMs: 600_000 }, at);
    const commits = 40;
    let watch: ReturnType<typeof watching> | undefined;
    for (let version = 0; version < commits; version++) {
      await writer.commit("joining", BigInt(version), [appendHistory(textMessage(`j${version}`, Role.USER, "x"))], "");
      // The watch (and with it the listener's connection and lock) starts while the commits go on.
      if (version === 4) watch = watching(watcher, "joining");
    }
    try {
      await expect.poll(() => watch!.seen.length, { timeout: 10_000 }).toBe(commits);
      expect(watch!.seen).toEqual(Array.from({ length: commits }, (_, index) => BigInt(index + 1)));
    } finally {
      await watch!.stop();
    }
  });
});

describe("DATA_LOSS and UNAVAILABLE", () => {
  it.each([
    ["rest does not decode", "UPDATE contextd_conversations SET rest = '\\xff' WHERE id = $1", /the header row's rest does not decode/],
    ["a message row is missing", "DELETE FROM contextd_messages WHERE conversation_id = $1 AND position = 0", /the history segment has 1 message rows but the header row says 2/],
    ["a message row does not decode", "UPDATE contextd_messages SET message = '\\xffff' WHERE conversation_id = $1 AND position = 1", /message 1 of the history segment does not decode/],
  ])("answers DATA_LOSS naming the conversation when %s, to a reader without a cached copy", async (_case, sql, detail) => {
    const writer = await openStore();
    const id = `corrupt-${_case.replaceAll(" ", "-")}`;
    await writer.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "a"), textMessage("u2", Role.USER, "b"))], "");
    await raw.query(sql, [idOf(id)]);
    const reader = await openStore();
    const error = await rejection(reader.load(id));
    expect(error.code).toBe(Code.DataLoss);
    expect(error.rawMessage).toMatch(new RegExp(`^conversation "${id}" is corrupt in the store: ${detail.source}`));
    expect((await rejection(reader.commit(id, 1n, [appendHistory(textMessage("u3", Role.USER, "c"))], ""))).code).toBe(Code.DataLoss);
    expect(await reader.currentVersion(id)).toBe(1n);
  });

  it("ends a Watch with DATA_LOSS at a change row that does not decode", async () => {
    const store = await openStore({ watchPollMs: 100 });
    const id = "corrupt-change";
    await store.commit(id, 0n, [appendHistory(textMessage("u1", Role.USER, "a"))], "");
    await store.commit(id, 1n, [appendHistory(textMessage("u2", Role.USER, "b"))], "");
    await raw.query("UPDATE contextd_changes SET change = '\\xff' WHERE conversation_id = $1 AND version = 2", [idOf(id)]);
    const seen: bigint[] = [];
    const error = await rejection((async () => {
      for await (const change of store.watch(id, 0n, new AbortController().signal)) seen.push(change.version);
    })());
    expect(seen).toEqual([1n]);
    expect(error.code).toBe(Code.DataLoss);
    expect(error.rawMessage).toMatch(/^conversation "corrupt-change" is corrupt in the store: change 2 does not decode/);
  });

  it("answers UNAVAILABLE at once when Postgres cannot be reached, and its ping fails", async () => {
    const store = new PostgresConversationStore("postgres://postgres@127.0.0.1:1/none");
    try {
      const error = await rejection(store.load("x"));
      expect(error.code).toBe(Code.Unavailable);
      expect(error.rawMessage).toContain("postgres store unavailable while loading a conversation at postgres://postgres@127.0.0.1:1/none");
      expect((await rejection(store.ping())).code).toBe(Code.Unavailable);
    } finally {
      await store.close();
    }
  });

  it("fails its ping while the database takes no writes (read-only), and serves again after", async () => {
    const fresh = await postgres.createDatabase("read-only");
    const store = await openStore({ poolSize: 1 }, fresh);
    await store.ping();
    await raw.query(`ALTER DATABASE "read-only" SET default_transaction_read_only = on`);
    await raw.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'read-only' AND pid <> pg_backend_pid()");
    await expect.poll(async () => (await store.ping().then(() => "serving", (error: ConnectError) => error.rawMessage)), { timeout: 10_000 }).toContain("takes no writes");
    await raw.query(`ALTER DATABASE "read-only" SET default_transaction_read_only = off`);
    await raw.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'read-only' AND pid <> pg_backend_pid()");
    await expect.poll(async () => (await store.ping().then(() => "serving", (error: ConnectError) => error.rawMessage)), { timeout: 10_000 }).toBe("serving");
  });
});
