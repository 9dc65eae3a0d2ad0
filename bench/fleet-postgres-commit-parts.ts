// `node dist/bench/fleet-postgres-commit-parts.js`: where the server side of one Postgres commit
// goes (issue 30: the commit against a bare transaction), migration 11's commit function beside
// migration 12's, called straight from one node `pg` client (no sidecar) with the arguments the
// store sends for an append of one ~250-byte message, on a cluster with pg_stat_statements
// (track = all, so the statements inside the functions are counted too; track_planning on). In
// each phase the calls are interleaved one each in turn (the order rotating), so load on the
// shared machine falls on all alike; printed per call: the round trip's p50 from node, the server's
// execution time (pg_stat_statements' mean of the top-level statement: not the parse, bind or
// transaction commit), and the statements inside with their planning counts. Phase 1 has no
// sidecar listening (migration 12 notifies no one); phase 2 has one connection holding the
// listeners' lock as a listening sidecar does. Env: CONTEXTD_PARTS_CALLS (default 1500 per kind).
import pg from "pg";
import { migratePostgres, listenersLockKey, postgresMigrations } from "../src/store/postgres-schema.js";
import { startPostgres } from "../test/support/postgres.js";
import { loadAverage, percentile } from "./fleet/agent-turns.js";

const calls = Number(process.env.CONTEXTD_PARTS_CALLS ?? 1500);
const commitsPerConversation = 50;
const message = Buffer.alloc(265, 7);
const change = Buffer.alloc(288, 9);
const run = Date.now();

/** The store's arguments for appending one message at `iteration % 50` (a first commit every 50th), in its parameter order ($22 first). */
function appendArguments(label: string, iteration: number, notify: boolean): unknown[] {
  const version = iteration % commitsPerConversation;
  const id = Buffer.from(`${run}-${label}-${Math.floor(iteration / commitsPerConversation)}`);
  const now = Date.now();
  const first = version === 0;
  return [
    id, BigInt(version), change, Buffer.alloc(0), "", now, 86_400_000, 10_000, notify ? "contextd_changes" : "", `created-${id.toString()}`, first ? Buffer.from([10, 1, 99]) : null,
    [0, version, 0, 0], ["=", "p", "=", "="], [0, version, 0, 0], [0, 1, 0, 0], message, [1], [message.length], BigInt(now), first ? "" : null, first ? "{}" : null, 0n,
    "a", [Buffer.from(`m${iteration}`)], [], [], [], [],
  ];
}
const argumentList = "$22, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $23, $24, $25, $26, $27, $28";

/**
 * An alternative measured and not taken (docs/stores.md, "Where a commit's time goes"): an append
 * to a conversation that exists, with no idempotency key, as one statement of writable CTEs sent by
 * the sidecar, which would need the function for every other case (a second copy of its checks).
 * Writes what migration 12's function writes for such an append, except the notification.
 */
const appendStatement = `WITH h AS (
  UPDATE contextd_conversations c SET version = c.version + 1,
    segment_length = ARRAY[c.segment_length[1] + ($4::integer[])[1], c.segment_length[2] + ($4::integer[])[2], c.segment_length[3] + ($4::integer[])[3], c.segment_length[4] + ($4::integer[])[4]],
    updated_at_ms = $9, expires_at_ms = $10, ids_at = CASE WHEN c.ids_at = c.version THEN c.version + 1 ELSE c.ids_at END
  WHERE c.id = $1 AND c.version = $2 AND c.segment_length = $3::integer[] AND (c.expires_at_ms = 0 OR c.expires_at_ms > $11)
  RETURNING c.version, c.segment_first, c.ids_at = c.version AS indexed
), m AS (
  INSERT INTO contextd_messages (conversation_id, segment, position, message)
  SELECT $1, 1, h.segment_first[2] + ($3::integer[])[2] + u.n - 1, substring($5::bytea FROM u.start FOR u.length)
  FROM h, unnest($6::integer[], $7::integer[]) WITH ORDINALITY AS u(start, length, n)
), x AS (
  INSERT INTO contextd_message_ids (conversation_id, message_id) SELECT $1, a FROM h, unnest($8::bytea[]) AS a WHERE h.indexed ON CONFLICT DO NOTHING
), ch AS (
  INSERT INTO contextd_changes (conversation_id, version, change) SELECT $1, h.version, $12 FROM h
), trimmed AS (
  DELETE FROM contextd_changes d USING h WHERE d.conversation_id = $1 AND d.version <= h.version - $13
)
SELECT h.version, h.indexed FROM h`;

const postgres = await startPostgres({ settings: { shared_preload_libraries: "pg_stat_statements", "pg_stat_statements.track": "all", "pg_stat_statements.track_planning": "on" } });
const client = new pg.Client({ connectionString: postgres.url });
const listener = new pg.Client({ connectionString: postgres.url });
try {
  await client.connect();
  await listener.connect();
  // The schema these functions ran on: migration 16 drops migration 11's index tables, which
  // contextd_commit_indexed and the statement below write (a comparison of 11 and 12's commits).
  await migratePostgres(client, postgresMigrations.filter((migration) => migration.version <= 15));
  await client.query("CREATE EXTENSION pg_stat_statements");
  await client.query("CREATE TABLE bench_conversations (id bytea PRIMARY KEY, version bigint NOT NULL)");
  await client.query("CREATE TABLE bench_messages (conversation_id bytea, position bigint, message bytea, PRIMARY KEY (conversation_id, position))");
  const commit = (fn: string) => async (label: string, iteration: number) => {
    const { rows } = await client.query<{ outcome: string }>({ name: fn, text: `SELECT * FROM ${fn}(${argumentList})`, values: appendArguments(`${label}-${fn}`, iteration, true) });
    if (rows[0]?.outcome !== "ok") throw new Error(`${fn}: ${JSON.stringify(rows[0])}`);
  };
  const kinds: Record<string, { call: (label: string, iteration: number) => Promise<unknown>; statement: (query: string) => boolean }> = {
    "migration 11 contextd_commit_indexed": { call: commit("contextd_commit_indexed"), statement: (query) => query.includes("contextd_commit_indexed(") },
    "migration 12 contextd_commit_listened": { call: commit("contextd_commit_listened"), statement: (query) => query.includes("contextd_commit_listened(") },
    "the append as one statement (not taken)": {
      statement: (query) => query.startsWith("WITH h AS"),
      call: async (label, iteration) => {
        const values = appendArguments(`${label}-statement`, iteration, false);
        // A first commit is not an append to a stored conversation: the function's.
        if (iteration % commitsPerConversation === 0) return client.query({ name: "contextd_commit_listened", text: `SELECT * FROM contextd_commit_listened(${argumentList})`, values });
        const { rows } = await client.query({
          name: "append-statement",
          text: appendStatement,
          values: [values[0], values[1], values[11], values[14], values[15], values[16], values[17], values[23], values[18], values[21], values[5], values[2], values[7]],
        });
        if (rows.length !== 1) throw new Error("the append statement wrote nothing");
      },
    },
    "bare BEGIN; INSERT; UPDATE WHERE version; COMMIT": {
      statement: (query) => query.includes("bench_"),
      call: async (label, iteration) => {
        const version = iteration % commitsPerConversation;
        const id = Buffer.from(`${run}-${label}-${Math.floor(iteration / commitsPerConversation)}`);
        await client.query("BEGIN");
        await client.query({ name: "bare-insert", text: "INSERT INTO bench_messages VALUES ($1, $2, $3)", values: [id, version, message] });
        if (version === 0) await client.query({ name: "bare-first", text: "INSERT INTO bench_conversations VALUES ($1, 1)", values: [id] });
        else await client.query({ name: "bare-update", text: "UPDATE bench_conversations SET version = version + 1 WHERE id = $1 AND version = $2", values: [id, version] });
        await client.query("COMMIT");
      },
    },
    "SELECT 1 (a round trip)": { call: () => client.query({ name: "one", text: "SELECT 1" }), statement: (query) => query === "SELECT $1" },
  };
  console.log(`Postgres commit parts (one node pg client, no sidecar, ${calls} calls of each per phase, interleaved); load average ${loadAverage()}`);
  for (const [phase, listening] of [["phase 1, no sidecar listening", false], ["phase 2, a sidecar listening (its connection holds the listeners' lock shared)", true]] as const) {
    if (listening) await listener.query(`SELECT pg_advisory_lock_shared(${listenersLockKey})`);
    const names = Object.keys(kinds);
    const label = listening ? "p2" : "p1";
    // Warm-up: the functions compiled, the plans cached, the first 5 custom plans behind.
    for (let iteration = 0; iteration < 200; iteration++) for (const name of names) await kinds[name]!.call(`${label}-warm`, iteration);
    await client.query("SELECT pg_stat_statements_reset()");
    const times: Record<string, number[]> = Object.fromEntries(names.map((name) => [name, []]));
    for (let iteration = 0; iteration < calls; iteration++) {
      for (let turn = 0; turn < names.length; turn++) {
        const name = names[(iteration + turn) % names.length]!;
        const started = process.hrtime.bigint();
        await kinds[name]!.call(label, iteration);
        times[name]!.push(Number(process.hrtime.bigint() - started) / 1e6);
      }
    }
    const { rows } = await client.query<{ query: string; calls: string; plans: string; exec_us: number; plan_us: number; toplevel: boolean }>(
      "SELECT query, calls, plans, total_exec_time / greatest(calls, 1) * 1000 AS exec_us, total_plan_time / greatest(plans, 1) * 1000 AS plan_us, toplevel FROM pg_stat_statements WHERE calls > 0 ORDER BY total_exec_time DESC",
    );
    console.log(`  ${phase}:`);
    for (const name of names) {
      const top = rows.filter((row) => row.toplevel && kinds[name]!.statement(row.query));
      const exec = top.reduce((sum, row) => sum + row.exec_us * Number(row.calls), 0) / Math.max(1, top.reduce((sum, row) => sum + Number(row.calls), 0));
      console.log(`    ${name.padEnd(50)} round trip p50 ${percentile(times[name]!, 50).toFixed(3)} ms, server execution mean ${exec.toFixed(1)} us${top.length > 1 ? ` (${top.length} statements)` : ""}`);
    }
    console.log("    inside the functions (statements with the same text in both are counted together):");
    for (const row of rows.filter((row) => !row.toplevel && Number(row.calls) >= calls / 2)) {
      const text = row.query.replace(/\s+/g, " ");
      const planned = Number(row.plans) > 0 ? `planned ${row.plans} times, ${row.plan_us.toFixed(1)} us each` : "plan kept";
      console.log(`      ${Number(row.calls).toString().padStart(6)} calls ${row.exec_us.toFixed(1).padStart(6)} us, ${planned.padEnd(32)} ${text.length > 110 ? `${text.slice(0, 60)} … ${text.slice(-45)}` : text}`);
    }
  }
} finally {
  await listener.end();
  await client.end();
  await postgres.destroy();
}
