// The Postgres store's forks share their source's message rows (migration 14,
// postgres-shared-rows-schema.ts): the rows a fork writes do not grow with the messages, and
// source and fork then read as two conversations written apart would, whatever either does next
// (commits, rewinds, edits, prunes, clears, forks of forks, deletes, expiry), with every row
// counted back out when the last reader goes. Against a real PostgreSQL.
import { create, toBinary } from "@bufbuild/protobuf";
import pg from "pg";
import { Code, type ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, Segment, type ConversationState } from "#gen/contextd/v1/state_pb";
import { listById } from "../../src/store/conversation-listing.js";
import { AtRestCipher } from "../../src/store/at-rest-encryption.js";
import type { ConversationStore } from "../../src/store/conversation-store.js";
import { MemoryConversationStore } from "../../src/store/memory-conversation-store.js";
import { PostgresConversationStore, type PostgresStoreOptions } from "../../src/store/postgres-conversation-store.js";
import { migratePostgres, postgresMigrations } from "../../src/store/postgres-schema.js";
import { startPostgres, type PostgresProcess } from "../support/postgres.js";
import { randomSource } from "../support/random-messages.js";
import { expectForkCopyWeighedOnce } from "./fork-copy-weight.js";
import { appendHistory, delta, everyFieldToolRound, longConversation, randomEdits, textMessage } from "./fixtures.js";

let postgres: PostgresProcess;
const opened: PostgresConversationStore[] = [];
const clients: pg.Client[] = [];
beforeAll(async () => {
  postgres = await startPostgres();
}, 60_000);
afterAll(async () => {
  await Promise.all(opened.map((store) => store.close()));
  await Promise.all(clients.map((client) => client.end()));
  await postgres?.destroy();
});

let databases = 0;
/** A database of its own (its row counts are the test's alone), a store on it and a raw client. */
async function database(options: PostgresStoreOptions = {}): Promise<{ url: string; store: PostgresConversationStore; raw: pg.Client; open: (more?: PostgresStoreOptions) => Promise<PostgresConversationStore> }> {
  const url = await postgres.createDatabase(`shared_${++databases}`);
  const open = async (more: PostgresStoreOptions = {}) => {
    const store = new PostgresConversationStore(url, { expirySweepMs: 0, ...options, ...more });
    opened.push(store);
    expect(await store.connected()).toBe(true);
    return store;
  };
  const store = await open();
  const raw = new pg.Client({ connectionString: url });
  await raw.connect();
  clients.push(raw);
  return { url, store, raw, open };
}

async function count(raw: pg.Client, table: string): Promise<number> {
  const { rows } = await raw.query<{ count: string }>(`SELECT count(*) FROM ${table}`);
  return Number(rows[0]!.count);
}

const bytesOf = (state: ConversationState) => Buffer.from(toBinary(ConversationStateSchema, state));
/** A state as its source holds it: the fork's id, version and origin put back. */
const asSource = (state: ConversationState, source: ConversationState) => ({ ...state, conversationId: source.conversationId, version: source.version, forkedFrom: source.forkedFrom });

async function grow(store: ConversationStore, id: string, messages: number): Promise<void> {
  for (let from = 0; from < messages; from += 1_000) {
    const batch = Array.from({ length: Math.min(1_000, messages - from) }, (_, index) => textMessage(`${id}-m${from + index}`, Role.USER, `message ${from + index}`));
    await store.commit(id, undefined, [appendHistory(...batch)], "");
  }
}

describe("a fork at the latest version shares its source's rows", () => {
  it("writes no message row at 1,000 and at 10,000 messages: one header, one reference, one change; both read back whole", async () => {
    const { store, raw, open } = await database();
    const written: Record<string, number>[] = [];
    for (const size of [1_000, 10_000]) {
      const source = `source-${size}`;
      await grow(store, source, size);
      const before = { messages: await count(raw, "contextd_messages"), headers: await count(raw, "contextd_conversations"), references: await count(raw, "contextd_storage_references"), changes: await count(raw, "contextd_changes") };
      await store.fork(source, undefined, `fork-${size}`);
      written.push({
        messages: (await count(raw, "contextd_messages")) - before.messages,
        headers: (await count(raw, "contextd_conversations")) - before.headers,
        references: (await count(raw, "contextd_storage_references")) - before.references,
        changes: (await count(raw, "contextd_changes")) - before.changes,
      });
      // Read by a store with nothing cached: from the rows, not from this process's copy.
      const cold = await open({ cacheSize: 0 });
      const sourceState = await cold.load(source);
      const forkState = await cold.load(`fork-${size}`);
      expect(forkState.history.length).toBe(size);
      expect(bytesOf(asSource(forkState, sourceState))).toEqual(bytesOf(sourceState));
      const window = await cold.readWindow(`fork-${size}`, { segment: "history", count: 3, withRest: true });
      expect(window.state.history.map((message) => message.id)).toEqual(sourceState.history.slice(-3).map((message) => message.id));
    }
    expect(written).toEqual([
      { messages: 0, headers: 1, references: 1, changes: 1 },
      { messages: 0, headers: 1, references: 1, changes: 1 },
    ]);
  }, 120_000);

  it("a fork of a fork of a fork links each storage once, and a cut moves the writer off rows others read without copying them", async () => {
    const { store, raw } = await database();
    await grow(store, "a", 2_000);
    await store.fork("a", undefined, "b");
    await store.commit("b", undefined, [appendHistory(textMessage("b1", Role.USER, "on b"))], "");
    await store.fork("b", undefined, "c");
    await store.fork("c", undefined, "d");
    expect(await count(raw, "contextd_messages")).toBe(2_001);
    // "a" reads its own rows; "b" links a's; "c" and "d" link a's and b's.
    const { rows } = await raw.query<{ reader: string; storages: string }>(
      "SELECT convert_from(reader, 'UTF8') AS reader, count(*) AS storages FROM contextd_storage_references GROUP BY reader ORDER BY reader",
    );
    expect(rows.map((row) => [row.reader, Number(row.storages)])).toEqual([["b", 1], ["c", 2], ["d", 2]]);
    // A rewind of "a" (deleting rows b, c and d read) moves "a" to a fresh storage that links its
    // old one: rows written are what the rewind adds, not the 2,000 kept.
    const before = await count(raw, "contextd_messages");
    await store.rewind("a", undefined, 1n, "");
    expect(await count(raw, "contextd_messages")).toBe(before);
    expect((await store.load("a")).history.length).toBe(1_000);
    for (const id of ["b", "c", "d"]) expect((await store.load(id)).history.length).toBe(2_001);
  }, 120_000);
});

describe("a fork shares its source's id index as it shares the rows (migration 16)", () => {
  const indexRows = async (raw: pg.Client) => (await count(raw, "contextd_stored_ids")) + (await count(raw, "contextd_stored_calls"));
  const idsOf = async (raw: pg.Client, id: string) =>
    (await raw.query<{ id: string }>("SELECT convert_from(message_id, 'UTF8') AS id FROM contextd_indexed_ids(convert_to($1, 'UTF8')) ORDER BY 1", [id])).rows.map((row) => row.id);
  const header = async (raw: pg.Client, id: string) =>
    (await raw.query<{ ids_at: string; version: string }>("SELECT ids_at, version FROM contextd_conversations WHERE id = convert_to($1, 'UTF8')", [id])).rows[0]!;
  const append = (id: string) => [appendHistory(textMessage(id, Role.USER, "fork"))];
  const tailOnly = { withState: false } as const;

  it("writes 0 index rows at 1,000 and at 10,000 messages; the fork's first two commits without the state back make no whole read; an id the source held before the fork is refused", async () => {
    const { store, raw, open } = await database();
    for (const size of [1_000, 10_000]) {
      const source = `indexed-source-${size}`;
      const fork = `indexed-fork-${size}`;
      await grow(store, source, size);
      const before = await indexRows(raw);
      await store.fork(source, undefined, fork);
      expect((await indexRows(raw)) - before, `index rows a fork of ${size} writes`).toBe(0);
      expect(await header(raw, fork)).toEqual({ ids_at: "1", version: "1" });
      expect(await idsOf(raw, fork)).toEqual(await idsOf(raw, source));
      // The source appends after the fork: its new id is not the fork's (its row is past the fork's link).
      await store.commit(source, undefined, append(`${source}-later`), "");
      // A sidecar with nothing cached, as the server commits without the state back.
      const other = await open();
      for (let turn = 0; turn < 2; turn++) await other.commit(fork, undefined, append(`f${turn}`), "", undefined, undefined, tailOnly);
      // The first reads the tail, the second commits on the tail the first kept (kept-tails.ts).
      expect(other.commitTraffic).toMatchObject({ tailReads: 1, wholeReads: 0, keptTailCommits: 1 });
      expect(other.staleIdIndexIds.count).toBe(0);
      const held = `${source}-m42`;
      await expect(other.commit(fork, undefined, append(held), "", undefined, undefined, tailOnly)).rejects.toThrow(new RegExp(held));
      // Refused by the index (a tail plan), then named by the whole state.
      expect(other.commitTraffic.wholeReads).toBe(1);
      const cold = await open({ cacheSize: 0 });
      expect((await cold.commit(fork, undefined, append(`${source}-later`), "", undefined, undefined, tailOnly)).version).toBe(4n);
      expect(cold.commitTraffic).toMatchObject({ tailReads: 1, wholeReads: 0 });
      const forked = await cold.load(fork);
      expect(await header(raw, fork)).toEqual({ ids_at: "4", version: "4" });
      expect(await idsOf(raw, fork)).toEqual(forked.history.map((message) => message.id).sort());
      expect(await idsOf(raw, source)).toHaveLength(size + 1);
    }
  }, 180_000);

  it("a fork at a past version shares the index too; a cut moves the fork off and keeps both indexes the states' ids; tool calls are named from the storage holding them", async () => {
    const { store, raw, open } = await database();
    const call = (id: string, callId: string, name: string) => create(MessageSchema, { id, role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: callId, name, arguments: { data: "{}" } } } }] });
    const result = (id: string, callId: string) => create(MessageSchema, { id, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: callId, payload: { text: "ok" } } } }] });
    await grow(store, "s", 300);
    await store.commit("s", undefined, [appendHistory(call("a1", "c1", "first"), result("r1", "c1"))], "");
    const at = await store.currentVersion("s");
    await store.commit("s", undefined, [appendHistory(call("a2", "c1", "second"), result("r2", "c1"))], "");
    const before = await indexRows(raw);
    await store.fork("s", at, "past");
    expect((await indexRows(raw)) - before).toBe(0);
    expect((await header(raw, "past")).ids_at).toBe("1");
    const calls = async (id: string) => (await raw.query<{ call: string; name: string }>("SELECT convert_from(call_id, 'UTF8') AS call, convert_from(name, 'UTF8') AS name FROM contextd_indexed_calls(convert_to($1, 'UTF8'))", [id])).rows;
    expect(await calls("past")).toEqual([{ call: "c1", name: "first" }]);
    expect(await calls("s")).toEqual([{ call: "c1", name: "second" }]);
    // a2 is the source's, past the fork's range: free in the fork.
    const other = await open();
    await other.commit("past", undefined, append("a2"), "", undefined, undefined, tailOnly);
    // The name a tail read gives for c1: the latest call the fork reads (in the source's storage).
    const named = async (id: string) => (await raw.query<{ names: Buffer[] }>("SELECT names FROM contextd_commit_tail(convert_to($1, 'UTF8'), ''::bytea, 0, 1, ARRAY[convert_to('c1', 'UTF8')])", [id])).rows[0]!.names.map((name) => name.toString("utf8"));
    expect([await named("past"), await named("s")]).toEqual([["first"], ["second"]]);
    expect(other.commitTraffic).toMatchObject({ wholeReads: 0 });
    // A prune of the fork (deleting nothing it owns of the source's) and of the source (which moves
    // it to a fresh storage, the fork reading its rows).
    await store.commit("past", undefined, [delta({ case: "pruneHistory", value: { maxMessages: 50 } })], "");
    await store.commit("s", undefined, [delta({ case: "pruneHistory", value: { maxMessages: 10 } })], "");
    for (const id of ["past", "s"]) {
      const state = await (await open({ cacheSize: 0 })).load(id);
      expect(await idsOf(raw, id), id).toEqual(state.history.map((message) => message.id).sort());
      expect((await header(raw, id)).ids_at, id).toBe(String(state.version));
    }
    for (const id of ["past", "s"]) await store.delete(id, undefined);
    expect([await count(raw, "contextd_stored_ids"), await count(raw, "contextd_stored_calls"), await count(raw, "contextd_messages")]).toEqual([0, 0, 0]);
  }, 120_000);
});

describe("a fork holds its source's copy", () => {
  it("its first commits with the state back read nothing, answer as a fresh reader reads and refuse a source's id; a copy weighs what it does not share", async () => {
    const { store, open } = await database();
    await grow(store, "seeded-source", 5_000);
    const held = store.heldCopies.decodedStates.count;
    await store.fork("seeded-source", undefined, "seeded-fork");
    expect(store.heldCopies.decodedStates.count).toBe(held + 1);
    const fresh = await open({ cacheBytes: 0 });
    const traffic = store.commitTraffic;
    for (let turn = 0; turn < 2; turn++) {
      const { state } = await store.commit("seeded-fork", undefined, [appendHistory(textMessage(`f${turn}`, Role.USER, "fork"))], "");
      expect(bytesOf(state!)).toEqual(bytesOf(await fresh.load("seeded-fork")));
    }
    // Both commits wrote from the held copy: no read before either (before, the first read the fork's 5,000 rows whole).
    expect(store.commitTraffic).toEqual({ ...traffic, writes: traffic.writes + 2 });
    await expect(store.commit("seeded-fork", undefined, [appendHistory(textMessage("seeded-source-m42", Role.USER, "again"))], "")).rejects.toThrow(/seeded-source-m42/);
    const { state: source } = await store.commit("seeded-source", undefined, [appendHistory(textMessage("f0", Role.USER, "the fork's id is free here"))], "");
    expect(bytesOf(source!)).toEqual(bytesOf(await fresh.load("seeded-source")));

    // The fork's copy weighs only what it does not share with its source's (DecodedStateCache).
    const small = await open({ cacheBytes: 5 * 1024 * 1024 });
    await expectForkCopyWeighedOnce(small, 5 * 1024 * 1024, (id) => grow(small, id, 5_000), async (id, state) => expect(bytesOf(state)).toEqual(bytesOf(await fresh.load(id))));
  });
});

describe("migration 16 on existing data, and a sidecar of the previous release", () => {
  it("sets every ids_at to 0 and drops migration 11's tables; the first cold commit rebuilds the index whole once; a previous release's commit naming a call (no position) leaves it stale, and a fork of it starts stale", async () => {
    const url = await postgres.createDatabase(`shared_${++databases}`);
    const raw = new pg.Client({ connectionString: url });
    await raw.connect();
    clients.push(raw);
    await migratePostgres(raw, postgresMigrations.filter((migration) => migration.version <= 15));
    const id = "old";
    const key = Buffer.from(id, "utf8");
    const encode = (...messages: ReturnType<typeof textMessage>[]) => {
      const bytes = messages.map((message) => Buffer.from(toBinary(MessageSchema, message)));
      const starts: number[] = [];
      let at = 1;
      for (const each of bytes) starts.push(at), (at += each.length);
      return { blob: Buffer.concat(bytes), starts, lengths: bytes.map((each) => each.length) };
    };
    // What release 15's sidecar sends (contextd_commit_listened's 28 arguments): an append to history.
    const previousRelease = (version: number, length: number, messages: ReturnType<typeof textMessage>[], calls: [string, string][]) => {
      const { blob, starts, lengths } = encode(...messages);
      return raw.query<{ outcome: string; indexed: boolean }>(
        "SELECT * FROM contextd_commit_listened(0, $1, $2, $3, ''::bytea, '', $4, 86400000, 10000, '', 'created-old', $5, $6, '{=,p,=,=}', $6, $7, $8, $9, $10, $4, NULL, NULL, 'a', $11, '{}', $12, $13, '{}')",
        [key, version, Buffer.from("a change"), Date.now(), version === 0 ? Buffer.from(toBinary(ConversationStateSchema, create(ConversationStateSchema, { conversationId: id }))) : null,
          [0, length, 0, 0], [0, messages.length, 0, 0], blob, starts, lengths, messages.map((message) => Buffer.from(message.id, "utf8")),
          calls.map(([call]) => Buffer.from(call, "utf8")), calls.map(([, name]) => Buffer.from(name, "utf8"))],
      );
    };
    const written = Array.from({ length: 300 }, (_, index) => textMessage(`old-${index}`, Role.USER, `old ${index}`));
    expect((await previousRelease(0, 0, written, [])).rows[0]).toMatchObject({ outcome: "ok", indexed: true });
    expect((await raw.query<{ ids: string }>("SELECT count(*) AS ids FROM contextd_message_ids")).rows[0]!.ids).toBe("300");
    await migratePostgres(raw);
    const header = async () => (await raw.query<{ ids_at: string; version: string }>("SELECT ids_at, version FROM contextd_conversations WHERE id = $1", [key])).rows[0]!;
    expect(await header()).toEqual({ ids_at: "0", version: "1" });
    expect((await raw.query<{ old: string | null }>("SELECT to_regclass('contextd_message_ids')::text AS old")).rows[0]!.old).toBeNull();
    const open = async () => {
      const store = new PostgresConversationStore(url, { expirySweepMs: 0 });
      opened.push(store);
      return store;
    };
    const tailOnly = { withState: false } as const;
    const first = await open();
    await first.commit(id, undefined, [appendHistory(textMessage("new-1", Role.USER, "new"))], "", undefined, undefined, tailOnly);
    expect(first.commitTraffic).toMatchObject({ tailReads: 1, wholeReads: 1 });
    expect(await header()).toEqual({ ids_at: "2", version: "2" });
    const indexed = async (of: string) => (await raw.query<{ id: Buffer }>("SELECT message_id AS id FROM contextd_indexed_ids($1)", [Buffer.from(of, "utf8")])).rows.map((row) => row.id.toString("utf8")).sort();
    expect(await indexed(id)).toEqual([...written.map((message) => message.id), "new-1"].sort());
    const second = await open();
    await expect(second.commit(id, undefined, [appendHistory(textMessage("old-7", Role.USER, "again"))], "", undefined, undefined, tailOnly)).rejects.toThrow(/old-7/);
    expect(second.commitTraffic).toMatchObject({ tailReads: 1, wholeReads: 1 });
    // The previous release appends an assistant message making a call: kept rows, but no position for the call.
    const assistant = create(MessageSchema, { id: "old-a", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "c9", name: "lookup", arguments: { data: "{}" } } } }] });
    expect((await previousRelease(2, 301, [assistant as ReturnType<typeof textMessage>], [["c9", "lookup"]])).rows[0]).toMatchObject({ outcome: "ok", indexed: false });
    expect(await header()).toEqual({ ids_at: "2", version: "3" });
    expect(await indexed(id)).toContain("old-a");
    // A fork of the stale conversation is stale too; this release's next cold commit rebuilds the source's.
    await (await open()).fork(id, undefined, "old-fork");
    expect((await raw.query<{ ids_at: string }>("SELECT ids_at FROM contextd_conversations WHERE id = 'old-fork'::bytea")).rows[0]!.ids_at).toBe("0");
    const third = await open();
    await third.commit(id, undefined, [appendHistory(textMessage("new-2", Role.USER, "new"))], "", undefined, undefined, tailOnly);
    expect(third.commitTraffic).toMatchObject({ tailReads: 1, wholeReads: 1 });
    expect(await header()).toEqual({ ids_at: "4", version: "4" });
    const { rows: calls } = await raw.query<{ call: string; name: string }>("SELECT convert_from(call_id, 'UTF8') AS call, convert_from(name, 'UTF8') AS name FROM contextd_indexed_calls($1)", [key]);
    expect(calls).toEqual([{ call: "c9", name: "lookup" }]);
  }, 120_000);
});

/** The keys the encrypted runs seal with (one key for every conversation). */
const cipher = new AtRestCipher([{ id: "k1", key: Buffer.alloc(32, 7), tenant: "" }]);
/** Each test below runs without and with encryption at rest: a fork shares the rows alike (migration 17). */
const configurations = [
  ["plain", undefined],
  ["encrypted", cipher],
] as const;

describe.each(configurations)("links are bounded (%s)", (_name, values) => {
  it("a chain of 66 forks, each appending: past 64 links the fork copies the rows (under encryption the engine writes them, sealed for the fork); a move past the bound copies the writer's own rows", async () => {
    const { store, raw, open } = await database({ values });
    await grow(store, "a0", 10);
    const rowsWritten: number[] = [];
    for (let level = 1; level <= 66; level++) {
      const before = await count(raw, "contextd_messages");
      await store.fork(`a${level - 1}`, undefined, `a${level}`);
      rowsWritten.push((await count(raw, "contextd_messages")) - before);
      await store.commit(`a${level}`, undefined, [appendHistory(textMessage(`at${level}`, Role.USER, "level"))], "");
    }
    // a(k) links a0 and each level's own storage: k links; a65 would need 65 and copies its 74 rows.
    expect(rowsWritten.slice(0, 64).every((rows) => rows === 0)).toBe(true);
    expect(rowsWritten.slice(64)).toEqual([74, 0]);
    const { rows } = await raw.query<{ most: number }>("SELECT max(cardinality(links)) AS most FROM contextd_conversations");
    expect(rows[0]!.most).toBe(64);
    const cold = await open({ cacheSize: 0, values });
    for (const level of [1, 33, 64, 65, 66]) expect((await cold.load(`a${level}`)).history.length).toBe(10 + level);
    // a63 (63 links) is forked, then cut: linking its own storage would make 64 + 1, so it copies its own row.
    await store.fork("a63", undefined, "b");
    const before = await count(raw, "contextd_messages");
    await store.commit("a63", undefined, [delta({ case: "pruneHistory", value: { maxMessages: 5 } })], "");
    expect((await count(raw, "contextd_messages")) - before).toBe(2);
    expect((await cold.load("b")).history.length).toBe(73);
    expect((await cold.load("a63")).history.map((message) => message.id).slice(-5)).toEqual(["at59", "at60", "at61", "at62", "at63"]);
  }, 300_000);
});

describe("a fork at a past version whose changes since only appended shares the rows too", () => {
  it("writes no message row at 10,000 messages ten appends back; one before a prune shares no history row and writes the past history as its own", async () => {
    const { store, raw, open } = await database();
    await grow(store, "s", 10_000);
    const grown = await store.currentVersion("s");
    for (let extra = 0; extra < 10; extra++) await store.commit("s", undefined, [appendHistory(textMessage(`extra${extra}`, Role.USER, "more")), delta({ case: "setMetadata", value: { title: `t${extra}`, labels: {}, removeLabels: [] } })], "");
    const before = await count(raw, "contextd_messages");
    await store.fork("s", grown, "ten-back");
    expect((await count(raw, "contextd_messages")) - before).toBe(0);
    const cold = await open({ cacheSize: 0 });
    const past = await cold.loadAt("s", grown);
    const fork = await cold.load("ten-back");
    expect(fork.forkedFrom).toMatchObject({ conversationId: "s", version: grown });
    expect(bytesOf(asSource(fork, past))).toEqual(bytesOf(past));
    expect((await cold.list(listById("ten-back", 10, ""))).conversations.map((summary) => summary.title)).toEqual([""]);
    // A prune since cut the history's head: the fork shares none of it and writes it all in its statement.
    await store.commit("s", undefined, [delta({ case: "pruneHistory", value: { maxMessages: 100 } })], "");
    const pruned = await store.currentVersion("s");
    await store.commit("s", undefined, [appendHistory(textMessage("after", Role.USER, "after"))], "");
    const beforeWhole = await count(raw, "contextd_messages");
    await store.fork("s", pruned - 1n, "past-prune");
    expect((await count(raw, "contextd_messages")) - beforeWhole).toBe(10_010);
    expect(await sharedHistory(raw, "past-prune")).toBe(0);
    expect(bytesOf(asSource(await cold.load("past-prune"), await cold.loadAt("s", pruned - 1n)))).toEqual(bytesOf(await cold.loadAt("s", pruned - 1n)));
  }, 180_000);
});

/** How many history rows a fork reads through its links (the rows it shares). */
async function sharedHistory(raw: pg.Client, id: string): Promise<number> {
  const { rows } = await raw.query<{ rows: string }>(
    "SELECT COALESCE(sum(l.hi - l.lo), 0) AS rows FROM contextd_conversations c CROSS JOIN LATERAL unnest(c.links) AS l WHERE c.id = convert_to($1, 'UTF8') AND l.segment = 1",
    [id],
  );
  return Number(rows[0]!.rows);
}

/** How many message rows a conversation's own storage holds (what it wrote, not what it shares). */
async function ownRows(raw: pg.Client, id: string): Promise<number> {
  const { rows } = await raw.query<{ rows: string }>(
    "SELECT count(*) AS rows FROM contextd_messages m JOIN contextd_conversations c ON m.conversation_id = COALESCE(c.storage, c.id) WHERE c.id = convert_to($1, 'UTF8')",
    [id],
  );
  return Number(rows[0]!.rows);
}

describe.each(configurations)("a fork at any past version shares the longest prefix the source still holds (migration 18, %s)", (_name, values) => {
  const idsOf = (state: ConversationState) => [...state.system, ...state.history, ...state.memory, ...state.tools].map((message) => message.id).sort();
  const indexedIds = async (raw: pg.Client, id: string) =>
    (await raw.query<{ id: string }>("SELECT convert_from(message_id, 'UTF8') AS id FROM contextd_indexed_ids(convert_to($1, 'UTF8'))", [id])).rows.map((row) => row.id).sort();
  const indexedCalls = async (raw: pg.Client, id: string) =>
    (await raw.query<{ call: string; name: string }>("SELECT convert_from(call_id, 'UTF8') AS call, convert_from(name, 'UTF8') AS name FROM contextd_indexed_calls(convert_to($1, 'UTF8'))", [id])).rows;
  const idsAt = async (raw: pg.Client, id: string) => (await raw.query<{ ids_at: string }>("SELECT ids_at FROM contextd_conversations WHERE id = convert_to($1, 'UTF8')", [id])).rows[0]!.ids_at;

  it("forks a version before a rewind or a removal sharing the longest prefix the source still holds, writing only the rest, indexed, in the fork's statement", async () => {
    const { store, raw, open } = await database({ values });
    const source = "rewound-source";
    const start = await longConversation(store, source, 3_000);
    let version = (await store.commit(source, start, [everyFieldToolRound("t1"), appendHistory(textMessage("after-round", Role.USER, "go on"))], "")).version;
    const beforeRewind = version;
    version = (await store.rewind(source, version, start, "")).version;
    // The version before the rewind: the current history followed by the round and the message it dropped.
    const rows = await count(raw, "contextd_messages");
    const { forkedFrom } = await store.fork(source, beforeRewind, "rewound-fork");
    expect((await count(raw, "contextd_messages")) - rows).toBe(3);
    expect(await ownRows(raw, "rewound-fork")).toBe(3);
    expect(await sharedHistory(raw, "rewound-fork")).toBe(3_000);
    if (values !== undefined) {
      // Under encryption its own rows are sealed for the fork: they open as the fork's.
      const { rows: own } = await raw.query<{ message: Buffer }>(
        "SELECT m.message FROM contextd_messages m JOIN contextd_conversations c ON m.conversation_id = COALESCE(c.storage, c.id) WHERE c.id = convert_to('rewound-fork', 'UTF8')",
      );
      const openAsFork = values.opener("rewound-fork", "message");
      for (const row of own) expect(openAsFork(row.message, () => "a row of the fork's own").length).toBeGreaterThan(0);
      expect(Buffer.concat(own.map((row) => row.message)).includes("go on")).toBe(false);
    }
    const forked = await store.load("rewound-fork");
    expect(bytesOf(forked)).toEqual(bytesOf({ ...(await store.loadAt(source, beforeRewind)), conversationId: "rewound-fork", forkedFrom, version: 1n }));
    expect(forked.history.slice(-3).map((message) => message.id)).toEqual(["t1-a", "t1-r", "after-round"]);
    const cold = await open({ cacheSize: 0 });
    expect(bytesOf(await cold.load("rewound-fork"))).toEqual(bytesOf(forked));
    // Its own rows are indexed with the shared ones: ids and the round's call, current.
    expect(await idsAt(raw, "rewound-fork")).toBe("1");
    expect(await indexedIds(raw, "rewound-fork")).toEqual(idsOf(forked));
    expect(await indexedCalls(raw, "rewound-fork")).toEqual([{ call: "t1-call", name: "lookup" }]);
    // A sidecar that never saw the fork commits on its stored tail and refuses an id of its own part.
    const fresh = await open();
    const tailOnly = { withState: false } as const;
    await expect(fresh.commit("rewound-fork", 1n, [appendHistory(textMessage("t1-r", Role.USER, "again"))], "", undefined, undefined, tailOnly)).rejects.toThrow(/t1-r/);
    expect((await fresh.commit("rewound-fork", 1n, [appendHistory(textMessage("fork-next", Role.USER, "next"))], "", undefined, undefined, tailOnly)).version).toBe(2n);
    expect(fresh.commitTraffic).toMatchObject({ wholeReads: 1 });
    expect(bytesOf(await (await open({ cacheSize: 0 })).load("rewound-fork"))).toEqual(bytesOf(await store.load("rewound-fork")));

    // A removal near the end: the version before it shares the history up to the removed message.
    version = (await store.commit(source, version, [delta({ case: "removeMessages", value: { segment: Segment.HISTORY, ids: ["m2990"] } })], "")).version;
    const { forkedFrom: removedFrom } = await store.fork(source, version - 1n, "removed-fork");
    expect(await sharedHistory(raw, "removed-fork")).toBe(2_990);
    expect(await ownRows(raw, "removed-fork")).toBe(10);
    const removed = await store.load("removed-fork");
    expect(bytesOf(removed)).toEqual(bytesOf({ ...(await store.loadAt(source, version - 1n)), conversationId: "removed-fork", forkedFrom: removedFrom, version: 1n }));
    expect(bytesOf(await (await open({ cacheSize: 0 })).load("removed-fork"))).toEqual(bytesOf(removed));
    expect(await indexedIds(raw, "removed-fork")).toEqual(idsOf(removed));
    // The source's delete leaves both forks whole; theirs then leave no row.
    await store.delete(source, undefined);
    const last = await open({ cacheSize: 0 });
    expect(bytesOf(await last.load("removed-fork"))).toEqual(bytesOf(removed));
    for (const id of ["rewound-fork", "removed-fork"]) await store.delete(id, undefined);
    expect([await count(raw, "contextd_messages"), await count(raw, "contextd_stored_ids"), await count(raw, "contextd_stored_calls")]).toEqual([0, 0, 0]);
  }, 120_000);
});

describe.each(configurations)("source and fork diverge as conversations written apart would (%s)", (name, values) => {
  it("random commits, rewinds, edits, prunes, clears, forks of forks and deletes: every conversation reads as the memory store's, byte for byte, from a store with nothing cached; the last delete leaves no row", async () => {
    let clock = 1_700_000_000_000;
    const now = () => clock;
    // Ids the engine makes (an assistant message without one, a prune's summary) are the step's
    // and a count, so both stores make the same ones.
    let step = 0;
    const counted = () => {
      let made = 0;
      return { reset: () => (made = 0), context: { newMessageId: () => `made-${step}-${++made}` } };
    };
    const [made, madeInMemory] = [counted(), counted()];
    const { store, raw, open } = await database({ now, deltaContext: made.context, values });
    const cold = await open({ cacheSize: 0, values });
    const memory = new MemoryConversationStore({ now, deltaContext: madeInMemory.context });
    const random = randomSource(32);
    const edits = randomEdits(random);
    const live: string[] = ["root"];
    let forks = 0;
    const done = { edits: 0, rewinds: 0, prunes: 0, pastForks: 0, deletes: 0 };
    await grow(store, "root", 300);
    await grow(memory, "root", 300);
    const pick = () => live[Math.floor(random() * live.length)]!;
    // Fewer steps encrypted: every step reads every live conversation cold, each row opened.
    const steps = name === "plain" ? 160 : 100;
    let sharing = 0;
    for (; step < steps; step++) {
      clock += 1_000;
      made.reset();
      madeInMemory.reset();
      const id = pick();
      const current = await memory.load(id);
      const draw = random();
      if (draw < 0.45) {
        const batch = edits(current);
        if (batch === undefined) continue;
        await memory.commit(id, undefined, batch, "");
        await store.commit(id, undefined, batch, "");
        done.edits++;
      } else if (draw < 0.6 && current.version > 1n) {
        const to = 1n + BigInt(Math.floor(random() * Number(current.version - 1n)));
        await memory.rewind(id, undefined, to, "");
        await store.rewind(id, undefined, to, "");
        done.rewinds++;
      } else if (draw < 0.68) {
        const prune = [delta({ case: "pruneHistory", value: { maxMessages: 1 + Math.floor(random() * 40) } })];
        await memory.commit(id, undefined, prune, "");
        await store.commit(id, undefined, prune, "");
        done.prunes++;
      } else if (draw < 0.88 && live.length < 12) {
        const to = `fork-${++forks}`;
        const at = random() < 0.25 && current.version > 1n ? current.version - 1n : undefined;
        await memory.fork(id, at, to);
        const before = await count(raw, "contextd_messages");
        await store.fork(id, at, to);
        if ((await count(raw, "contextd_messages")) === before) sharing++;
        if (at !== undefined) done.pastForks++;
        live.push(to);
      } else if (draw < 0.94 && live.length > 2) {
        await memory.delete(id, undefined);
        await store.delete(id, undefined);
        done.deletes++;
        live.splice(live.indexOf(id), 1);
      } else {
        const batch = [appendHistory(textMessage(`s${step}`, Role.USER, "more"))];
        await memory.commit(id, undefined, batch, "");
        await store.commit(id, undefined, batch, "");
      }
      for (const each of live) {
        const expected = bytesOf(await memory.load(each));
        expect(bytesOf(await cold.load(each)), `${each} after step ${step}`).toEqual(expected);
        expect(bytesOf(await store.load(each)), `${each} after step ${step}`).toEqual(expected);
        const window = await cold.readWindow(each, { segment: "history", count: 5, withRest: false });
        const history = (await memory.load(each)).history;
        // The index the storages keep (migration 16) is the state's ids, whatever shares what.
        const state = await memory.load(each);
        const { rows: indexed } = await raw.query<{ id: Buffer }>("SELECT message_id AS id FROM contextd_indexed_ids($1)", [Buffer.from(each, "utf8")]);
        const ids = (list: string[]) => list.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
        expect(ids(indexed.map((row) => row.id.toString("utf8"))), `${each}'s index after step ${step}`).toEqual(ids([...state.system, ...state.history, ...state.memory, ...state.tools].map((message) => message.id)));
        expect(window.state.history.map((message) => message.id)).toEqual(history.slice(-5).map((message) => message.id));
      }
    }
    expect(forks).toBeGreaterThan(5);
    // Forks shared rows (wrote none) in both configurations.
    expect(sharing).toBeGreaterThan(3);
    for (const [what, times] of Object.entries(done)) expect(times, what).toBeGreaterThan(0);
    // Some writer cut rows a fork read, and moved to a fresh storage.
    expect(await count(raw, "contextd_conversations WHERE storage IS NOT NULL")).toBeGreaterThan(0);
    for (const each of live) await store.delete(each, undefined);
    expect([await count(raw, "contextd_messages"), await count(raw, "contextd_storage_references"), await count(raw, "contextd_conversations"), await count(raw, "contextd_stored_ids")]).toEqual([0, 0, 0, 0]);
  }, 600_000);
});

describe("removal of either side", () => {
  it("deleting the source leaves the fork whole; a new conversation under the source's id writes rows of its own; the fork's delete then removes the old rows", async () => {
    const { store, raw, open } = await database();
    await grow(store, "s", 1_500);
    await store.fork("s", undefined, "f");
    const forkBytes = bytesOf(await store.load("f"));
    await store.delete("s", undefined);
    expect(await count(raw, "contextd_messages")).toBe(1_500);
    const cold = await open({ cacheSize: 0 });
    expect(bytesOf(await cold.load("f"))).toEqual(forkBytes);
    await store.commit("s", 0n, [appendHistory(textMessage("new", Role.USER, "a new s"))], "");
    expect((await cold.load("s")).history.map((message) => message.id)).toEqual(["new"]);
    expect(bytesOf(await cold.load("f"))).toEqual(forkBytes);
    expect(await count(raw, "contextd_messages")).toBe(1_501);
    await store.delete("f", undefined);
    expect(await count(raw, "contextd_messages")).toBe(1);
    expect((await cold.load("s")).history.map((message) => message.id)).toEqual(["new"]);
  }, 120_000);

  it("the source expiring and swept leaves the fork whole; the fork expiring later takes the rows", async () => {
    let clock = 1_700_000_000_000;
    const now = () => clock;
    const { store, raw, open } = await database({ now });
    await grow(store, "s", 1_200);
    await store.fork("s", undefined, "f");
    const forkBytes = bytesOf(await store.load("f"));
    await store.commit("s", undefined, [delta({ case: "setMetadata", value: { idleTtlMs: 1_000n } })], "");
    clock += 5_000;
    expect(await store.sweepExpired()).toBe(1);
    const cold = await open({ cacheSize: 0, now });
    expect(bytesOf(await cold.load("f"))).toEqual(forkBytes);
    expect(await count(raw, "contextd_messages")).toBe(1_200);
    await store.commit("f", undefined, [delta({ case: "setMetadata", value: { idleTtlMs: 1_000n } })], "");
    clock += 5_000;
    expect(await store.sweepExpired()).toBe(1);
    expect(await count(raw, "contextd_messages")).toBe(0);
    expect(await count(raw, "contextd_storage_references")).toBe(0);
  }, 120_000);
});

describe("concurrent writers", () => {
  it("two forks deleted at once by two sidecars after their source went: the last one takes the rows, every time; forks and cuts of the source at once keep every fork whole", async () => {
    const { store, raw, open } = await database();
    const other = await open();
    for (let round = 0; round < 6; round++) {
      await grow(store, `s${round}`, 200);
      await store.fork(`s${round}`, undefined, `f${round}`);
      await store.fork(`s${round}`, undefined, `g${round}`);
      await store.delete(`s${round}`, undefined);
      await Promise.all([store.delete(`f${round}`, undefined), other.delete(`g${round}`, undefined)]);
      expect(await count(raw, "contextd_messages")).toBe(0);
    }
    await grow(store, "busy", 300);
    const forks = Array.from({ length: 8 }, (_, index) => `busy-fork-${index}`);
    const expected = new Map<string, number>();
    await Promise.all([
      ...forks.map(async (fork, index) => {
        const outcome = await (index % 2 === 0 ? store : other).fork("busy", undefined, fork);
        expected.set(fork, (await store.loadAt("busy", outcome.forkedFrom!.version)).history.length);
      }),
      (async () => {
        for (let cut = 0; cut < 4; cut++) await other.commit("busy", undefined, [delta({ case: "pruneHistory", value: { maxMessages: 250 - cut * 50 } })], "");
      })(),
    ]);
    const cold = await open({ cacheSize: 0 });
    for (const fork of forks) expect((await cold.load(fork)).history.length, fork).toBe(expected.get(fork));
    for (const id of ["busy", ...forks]) await store.delete(id, undefined);
    expect(await count(raw, "contextd_messages")).toBe(0);
  }, 180_000);
});

describe("encryption at rest: a fork shares the rows, each sealed for the conversation that wrote it (migration 17)", () => {
  const secret = "the-secret-text";
  const message = (id: string) => textMessage(id, Role.USER, `${secret} ${id}`);
  async function growBoth(stores: ConversationStore[], id: string, messages: number): Promise<void> {
    for (let from = 0; from < messages; from += 1_000) {
      const batch = [appendHistory(...Array.from({ length: Math.min(1_000, messages - from) }, (_, index) => message(`${id}-m${from + index}`)))];
      for (const each of stores) await each.commit(id, undefined, batch, "");
    }
  }
  /** Every value of every table of the database, as the bytes a dump holds: what an attacker reading the store sees. */
  async function dump(raw: pg.Client): Promise<Buffer> {
    const { rows: tables } = await raw.query<{ name: string }>("SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public' ORDER BY 1");
    const parts: Buffer[] = [];
    for (const { name } of tables) {
      const { rows } = await raw.query<Record<string, unknown>>(`SELECT * FROM ${name}`);
      for (const row of rows) for (const value of Object.values(row)) parts.push(Buffer.isBuffer(value) ? value : Buffer.from(typeof value === "string" ? value : JSON.stringify(value) ?? "", "utf8"));
    }
    return Buffer.concat(parts);
  }
  async function changesOf(store: ConversationStore, conversationId: string, count: number): Promise<bigint[]> {
    const controller = new AbortController();
    const versions: bigint[] = [];
    try {
      for await (const change of store.watch(conversationId, 0n, controller.signal)) {
        versions.push(change.version);
        if (versions.length === count) break;
      }
    } finally {
      controller.abort();
    }
    return versions;
  }
  const tailOnly = { withState: false } as const;

  it("writes no message row at 1,000 and 10,000 messages (latest and past versions); after commits, a prune and a rewind on both sides and the source's delete, no table holds message text and every read (whole, window, tail, watch) answers as the memory store's", async () => {
    const clock = 1_700_000_000_000;
    const now = () => clock;
    // The same dump check without keys finds the text: it would see a leak.
    const plain = await database({ now });
    await growBoth([plain.store], "p", 10);
    expect((await dump(plain.raw)).includes(secret)).toBe(true);

    // The ids a prune's summary gets, counted per store: both make the same ones.
    const counted = () => {
      let made = 0;
      return { newMessageId: () => `made-${++made}` };
    };
    const { store, raw, open } = await database({ now, values: cipher, deltaContext: counted() });
    const memory = new MemoryConversationStore({ now, deltaContext: counted() });
    const both = [memory, store];
    const written: number[] = [];
    for (const size of [1_000, 10_000]) {
      const [source, latest, past] = [`s${size}`, `latest${size}`, `past${size}`];
      await growBoth(both, source, size);
      for (const each of both) await each.commit(source, undefined, [appendHistory(message(`${source}-extra`))], "");
      const rows = await count(raw, "contextd_messages");
      for (const each of both) await each.fork(source, undefined, latest);
      for (const each of both) await each.fork(source, 1n, past);
      written.push((await count(raw, "contextd_messages")) - rows);
      // Both sides go on: appends, a prune of the source (moving it off the rows its forks read), a rewind of a fork.
      const steps: [string, Parameters<ConversationStore["commit"]>[2]][] = [
        [source, [appendHistory(message(`${source}-after`))]],
        [latest, [appendHistory(message(`${latest}-own`))]],
        [past, [appendHistory(message(`${past}-own`))]],
        [source, [delta({ case: "pruneHistory", value: { maxMessages: 10 } })]],
        [latest, [appendHistory(message(`${latest}-own2`))]],
      ];
      for (const [id, batch] of steps) for (const each of both) await each.commit(id, undefined, batch, "");
      for (const each of both) await each.rewind(latest, undefined, 2n, "");
      const cold = await open({ cacheSize: 0, values: cipher });
      for (const id of [source, latest, past]) {
        const expected = await memory.load(id);
        expect(bytesOf(await cold.load(id)), id).toEqual(bytesOf(expected));
        const window = await cold.readWindow(id, { segment: "history", count: 3, withRest: true });
        expect(window.state.history.map((each) => each.id), id).toEqual(expected.history.slice(-3).map((each) => each.id));
        expect(bytesOf({ ...window.state, history: expected.history, version: expected.version })).toEqual(bytesOf(expected));
        expect(await changesOf(cold, id, Number(expected.version) > 5 ? 5 : Number(expected.version))).toHaveLength(Math.min(5, Number(expected.version)));
      }
      // The fork's first change (its version 1) is sealed for the fork and Watch serves it.
      expect(await changesOf(cold, past, 1)).toEqual([1n]);
      // A sidecar without a copy commits on the fork's stored tail, the tail's rows the source's.
      const other = await open({ values: cipher });
      for (const each of [memory, other]) await each.commit(past, undefined, [appendHistory(message(`${past}-tail`))], "", undefined, undefined, tailOnly);
      expect(other.commitTraffic).toMatchObject({ tailReads: 1, wholeReads: 0 });
      expect(bytesOf(await cold.load(past))).toEqual(bytesOf(await memory.load(past)));
      // The source deleted: its rows stay for its forks, still opened as the source's.
      for (const each of both) await each.delete(source, undefined);
      for (const id of [latest, past]) expect(bytesOf(await cold.load(id)), id).toEqual(bytesOf(await memory.load(id)));
    }
    // Each fork wrote only the header, reference and change rows: no message row.
    expect(written).toEqual([0, 0]);
    expect(await count(raw, "contextd_storage_references")).toBeGreaterThan(0);
    expect((await dump(raw)).includes(secret)).toBe(false);
  }, 300_000);

  it("a row moved between a source and its fork (either way, shared or not) does not open: DATA_LOSS naming it; a link edited to another tenant's rows is refused", async () => {
    const { store, raw, open } = await database({ values: cipher });
    await grow(store, "acme/s", 20);
    await store.fork("acme/s", undefined, "acme/f");
    for (const id of ["acme/s", "acme/f"]) await store.commit(id, undefined, [appendHistory(textMessage(`${id}-after`, Role.USER, "after"))], "");
    const rowOf = async (storage: string, position: number) =>
      (await raw.query<{ message: Buffer }>("SELECT message FROM contextd_messages WHERE conversation_id = convert_to($1, 'UTF8') AND segment = 1 AND position = $2", [storage, position])).rows[0]!.message;
    const setRow = (storage: string, position: number, bytes: Buffer) =>
      raw.query("UPDATE contextd_messages SET message = $3 WHERE conversation_id = convert_to($1, 'UTF8') AND segment = 1 AND position = $2", [storage, position, bytes]);
    const [sourceOwn, forkOwn, shared] = [await rowOf("acme/s", 20), await rowOf("acme/f", 20), await rowOf("acme/s", 0)];
    // A store of its own for each read: one with nothing cached still keeps the state it read last.
    const cold = async () => open({ cacheSize: 0, values: cipher });
    const dataLoss = async (id: string, pattern: RegExp) => {
      const error = await (await cold()).load(id).then(() => undefined, (reason: unknown) => reason as ConnectError);
      expect(error?.code, id).toBe(Code.DataLoss);
      expect(error?.message).toMatch(pattern);
    };
    // The fork's own row in the source's storage, and the source's in the fork's: neither opens.
    await setRow("acme/s", 20, forkOwn);
    await setRow("acme/f", 20, sourceOwn);
    await dataLoss("acme/s", /message 20 of the history segment does not decrypt/);
    await dataLoss("acme/f", /message 20 of the history segment does not decrypt/);
    await setRow("acme/s", 20, sourceOwn);
    await setRow("acme/f", 20, forkOwn);
    expect((await (await cold()).load("acme/f")).history).toHaveLength(21);
    // A fork-sealed value put in a row the fork reads through its link opens as the source's: refused.
    await setRow("acme/s", 0, forkOwn);
    await dataLoss("acme/f", /message 0 of the history segment does not decrypt with key "k1" as conversation "acme\/s"'s/);
    await setRow("acme/s", 0, shared);
    // The fork's link pointed at another tenant's rows: refused before any decryption.
    await grow(store, "beta/x", 20);
    await raw.query("UPDATE contextd_conversations SET links = ARRAY[ROW(convert_to('beta/x', 'UTF8'), 1, 0, 20)::contextd_link] WHERE id = convert_to('acme/f', 'UTF8')");
    await dataLoss("acme/f", /read through a link to rows of conversation "beta\/x", of another tenant/);
  }, 120_000);

  it("a sidecar of the previous release loads an encrypted fork's shared rows through contextd_load_unexpired, without their writer: opened as the fork's they are DATA_LOSS (docs/encryption-at-rest.md, rolling upgrade)", async () => {
    const { store, raw, open } = await database({ values: cipher });
    await grow(store, "s", 10);
    await store.fork("s", undefined, "f");
    const { rows } = await raw.query<{ message: Buffer | null }>("SELECT message FROM contextd_load_unexpired(convert_to('f', 'UTF8'), ''::bytea, 0, -1, NULL, NULL, '{0,0,0,0}', '{0,0,0,0}')");
    const messages = rows.slice(1).map((row) => row.message!);
    expect(messages).toHaveLength(10);
    const openAsFork = cipher.opener("f", "message");
    let failed = 0;
    for (const message of messages) {
      try {
        openAsFork(message, () => "a shared row");
      } catch (error) {
        expect((error as ConnectError).code).toBe(Code.DataLoss);
        failed++;
      }
    }
    expect(failed).toBe(10);
    // This release reads them as the source's.
    expect((await (await open({ cacheSize: 0, values: cipher })).load("f")).history).toHaveLength(10);
  }, 60_000);

  it("with shareEncryptedForks false (--share-encrypted-forks false) the engine writes the fork's every row sealed for it, which a previous release's load opens as the fork's", async () => {
    const { store, raw, open } = await database({ values: cipher });
    await grow(store, "s", 10);
    const holding = await open({ values: cipher, shareEncryptedForks: false });
    const rows = await count(raw, "contextd_messages");
    await holding.fork("s", undefined, "f");
    expect(await count(raw, "contextd_messages")).toBe(rows + 10);
    const { rows: loaded } = await raw.query<{ message: Buffer | null }>("SELECT message FROM contextd_load_unexpired(convert_to('f', 'UTF8'), ''::bytea, 0, -1, NULL, NULL, '{0,0,0,0}', '{0,0,0,0}')");
    const openAsFork = cipher.opener("f", "message");
    expect(loaded.slice(1).map((row) => openAsFork(row.message!, () => "a row of the fork").length)).toHaveLength(10);
    expect((await (await open({ cacheSize: 0, values: cipher })).load("f")).history).toEqual((await store.load("s")).history);
  }, 60_000);

  it("rotation: rows a fork shares, sealed under the old key, open after it; per-tenant keys: a same-tenant fork shares, a fork into another tenant is written by the engine under that tenant's key", async () => {
    const k1 = Buffer.alloc(32, 1);
    const [acme, beta] = [Buffer.alloc(32, 2), Buffer.alloc(32, 3)];
    const before = new AtRestCipher([
      { id: "k1", key: k1, tenant: "" },
      { id: "acme-1", key: acme, tenant: "acme" },
      { id: "beta-1", key: beta, tenant: "beta" },
    ]);
    const rotated = new AtRestCipher([
      { id: "k2", key: Buffer.alloc(32, 4), tenant: "" },
      { id: "acme-2", key: Buffer.alloc(32, 5), tenant: "acme" },
      { id: "k1", key: k1, tenant: "" },
      { id: "acme-1", key: acme, tenant: "acme" },
      { id: "beta-1", key: beta, tenant: "beta" },
    ]);
    const { store, raw, open } = await database({ values: before });
    await grow(store, "acme/s", 1_000);
    await grow(store, "plain", 1_000);
    const after = await open({ values: rotated });
    const rows = await count(raw, "contextd_messages");
    await after.fork("acme/s", undefined, "acme/f");
    await after.fork("plain", undefined, "plain-f");
    expect(await count(raw, "contextd_messages")).toBe(rows);
    await after.commit("acme/f", undefined, [appendHistory(textMessage("f1", Role.USER, "after the rotation"))], "");
    const keyIds = async (id: string) =>
      (await raw.query<{ key: string; rows: string }>("SELECT convert_from(substring(message FROM 4 FOR get_byte(message, 2)), 'UTF8') AS key, count(*) AS rows FROM contextd_messages WHERE conversation_id = convert_to($1, 'UTF8') GROUP BY 1", [id])).rows.map((row) => [row.key, Number(row.rows)]);
    expect(await keyIds("acme/s")).toEqual([["acme-1", 1_000]]);
    expect(await keyIds("acme/f")).toEqual([["acme-2", 1]]);
    const cold = await open({ cacheSize: 0, values: rotated });
    const forked = await cold.load("acme/f");
    expect(forked.history.slice(0, 1_000)).toEqual((await cold.load("acme/s")).history);
    expect(forked.history.map((each) => each.id).slice(-1)).toEqual(["f1"]);
    expect((await cold.load("plain-f")).history).toHaveLength(1_000);
    // Into another tenant (or none): the engine writes every message, sealed under that tenant's key.
    await after.fork("acme/s", undefined, "beta/f");
    await after.fork("acme/s", undefined, "untenanted");
    expect(await keyIds("beta/f")).toEqual([["beta-1", 1_000]]);
    expect(await keyIds("untenanted")).toEqual([["k2", 1_000]]);
    expect((await cold.load("beta/f")).history).toHaveLength(1_000);
  }, 120_000);
});
