// bench:fleet, Postgres commit: the Commit RPC through a real sidecar on a real PostgreSQL
// (synchronous_commit on; fsync off as in the tests, so the figures are what the commit costs beside
// the WAL flush, which on this shared disk is 5-8 ms and hides everything else: CONTEXTD_FLEET_PG_FSYNC=on
// measures with it), at concurrency 1, appending one ~250-byte message with an expected
// version, beside, in the same run and in alternating rounds:
// - the bare transaction the same append needs, from node `pg` (the sidecar's driver): BEGIN;
//   INSERT the message row; UPDATE the version WHERE version = $1; COMMIT;
// - the RPC floor: a GetState of a conversation never written through the same sidecar and client
//   (the gRPC round trip, the server's path and one store read);
// - PostgresConversationStore.commit in process (no RPC).
// Target (issue 30): Commit p50 - floor p50 <= 1.5x the bare transaction's p50. Rounds:
// CONTEXTD_FLEET_ROUNDS (default 9), commits per round: CONTEXTD_FLEET_COMMITS (default 300).
// Two ways, in the same run, because they read differently: interleaved, within a round the four
// are one call each in turn (the order rotating per call), so a burst of load on the shared
// machine falls on all four alike; sequential, within a round each runs its 300 calls back to back
// (the order of the four rotating per round), as a caller making only that call sees it. A round
// trip right after other work costs about three times one right after the last, and the bare
// transaction is four round trips, so its interleaved p50 reads about twice its sequential one.
// Each figure is the median of the rounds' p50s.
import { create, toBinary } from "@bufbuild/protobuf";
import pg from "pg";
import { GetStateRequestSchema } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Role } from "#gen/contextd/v1/message_pb";
import { PostgresConversationStore } from "../../src/store/postgres-conversation-store.js";
import { startPostgres } from "../../test/support/postgres.js";
import { startBuiltSidecar } from "../bench-processes.js";
import { MinimalGrpcClient } from "../minimal-grpc-client.js";
import { appendHistory, commitPath, commitRequest, getStatePath, loadAverage, ms, percentile, prose, textMessage, verdict } from "./agent-turns.js";

/** Commits per conversation before the next one starts (the bench:store figure's shape). */
const commitsPerConversation = 50;

export async function run(): Promise<void> {
  const rounds = Number(process.env.CONTEXTD_FLEET_ROUNDS ?? 9);
  const perRound = Number(process.env.CONTEXTD_FLEET_COMMITS ?? 300);
  const fsync = process.env.CONTEXTD_FLEET_PG_FSYNC === "on" ? "on" : "off";
  const postgres = await startPostgres({ settings: { fsync, full_page_writes: fsync } });
  const sidecar = await startBuiltSidecar(["--postgres-url", postgres.url]);
  const client = new MinimalGrpcClient(new URL(sidecar.url).host);
  const bare = new pg.Client({ connectionString: postgres.url });
  const store = new PostgresConversationStore(postgres.url);
  const run = Date.now();
  const text = prose(7, 250);
  const message = Buffer.from(toBinary(MessageSchema, textMessage("m", Role.USER, text)));
  try {
    await bare.connect();
    await store.connected();
    await bare.query("CREATE TABLE bench_conversations (id bytea PRIMARY KEY, version bigint NOT NULL)");
    await bare.query("CREATE TABLE bench_messages (conversation_id bytea, position bigint, message bytea, PRIMARY KEY (conversation_id, position))");
    const bareCommit = async (label: string, iteration: number) => {
      const version = iteration % commitsPerConversation;
      const id = Buffer.from(`${run}-${label}-${Math.floor(iteration / commitsPerConversation)}`);
      await bare.query("BEGIN");
      await bare.query({ name: "bare-insert", text: "INSERT INTO bench_messages VALUES ($1, $2, $3)", values: [id, version, message] });
      if (version === 0) await bare.query({ name: "bare-first", text: "INSERT INTO bench_conversations VALUES ($1, 1)", values: [id] });
      else {
        const updated = await bare.query({ name: "bare-update", text: "UPDATE bench_conversations SET version = version + 1 WHERE id = $1 AND version = $2", values: [id, version] });
        if (updated.rowCount !== 1) throw new Error("bare transaction: version moved");
      }
      await bare.query("COMMIT");
    };
    const rpcCommit = (label: string, iteration: number) =>
      client.call(
        commitPath,
        commitRequest({
          conversationId: `${run}-rpc-${label}-${Math.floor(iteration / commitsPerConversation)}`,
          expectedVersion: BigInt(iteration % commitsPerConversation),
          deltas: [appendHistory([textMessage(`m${iteration}`, Role.USER, text)])],
        }),
      );
    const storeCommit = (label: string, iteration: number) =>
      store.commit(`${run}-store-${label}-${Math.floor(iteration / commitsPerConversation)}`, BigInt(iteration % commitsPerConversation), [appendHistory([textMessage(`m${iteration}`, Role.USER, text)])], "");
    const floorRequest = Buffer.from(toBinary(GetStateRequestSchema, create(GetStateRequestSchema, { conversationId: `${run}-never-written` })));
    const timed = async (operation: (iteration: number) => Promise<unknown>) => {
      const times: number[] = [];
      for (let iteration = 0; iteration < perRound; iteration++) {
        const started = process.hrtime.bigint();
        await operation(iteration);
        times.push(Number(process.hrtime.bigint() - started) / 1e6);
      }
      return percentile(times, 50);
    };
    console.log(`Postgres commit at concurrency 1 (PostgreSQL ${(await bare.query<{ server_version: string }>("SHOW server_version")).rows[0]!.server_version}, fsync ${fsync}), ${rounds} rounds of ${perRound}; load average ${loadAverage()}`);
    // Warm-up: the JIT, the prepared statements, the pool's connections.
    await timed((iteration) => rpcCommit("warm", iteration));
    await timed((iteration) => storeCommit("warm", iteration));
    const report = (way: string, results: { bare: number; floor: number; rpc: number; store: number }[]) => {
      const column = (name: keyof (typeof results)[number]) => results.map((result) => result[name]);
      const median = (values: number[]) => percentile(values, 50);
      console.log(`  ${way}:`);
      for (const [label, name] of [["bare INSERT + UPDATE WHERE version (node pg)", "bare"], ["RPC floor (GetState, never written)", "floor"], ["Commit RPC", "rpc"], ["store.commit in process", "store"]] as const) {
        console.log(`    ${label.padEnd(46)} p50 per round ${column(name).map((value) => value.toFixed(3)).join(" / ")} ms, median ${ms(median(column(name)))}`);
      }
      const [bareP50, floorP50, rpcP50, storeP50] = [median(column("bare")), median(column("floor")), median(column("rpc")), median(column("store"))];
      const overFloor = rpcP50 - floorP50;
      console.log(`    Commit RPC - floor ${ms(overFloor)} = ${(overFloor / bareP50).toFixed(2)}x the bare transaction (store.commit alone ${(storeP50 / bareP50).toFixed(2)}x; Commit RPC ${(rpcP50 / bareP50).toFixed(2)}x)`);
      console.log(`    target: Commit RPC after the RPC floor <= 1.5x the bare transaction: ${verdict(overFloor <= 1.5 * bareP50)}`);
    };
    const operationsOf = (label: string) => ({
      bare: (iteration: number) => bareCommit(label, iteration),
      floor: () => client.call(getStatePath, floorRequest),
      rpc: (iteration: number) => rpcCommit(label, iteration),
      store: (iteration: number) => storeCommit(label, iteration),
    });
    type Operations = ReturnType<typeof operationsOf>;
    const names = Object.keys(operationsOf("")) as (keyof Operations)[];
    const interleaved: { bare: number; floor: number; rpc: number; store: number }[] = [];
    for (let round = 0; round < rounds; round++) {
      const operations = operationsOf(`i${round}`);
      const times = { bare: [] as number[], floor: [] as number[], rpc: [] as number[], store: [] as number[] };
      for (let iteration = 0; iteration < perRound; iteration++) {
        for (let turn = 0; turn < names.length; turn++) {
          const name = names[(iteration + turn) % names.length]!;
          const started = process.hrtime.bigint();
          await operations[name](iteration);
          times[name].push(Number(process.hrtime.bigint() - started) / 1e6);
        }
      }
      interleaved.push({ bare: percentile(times.bare, 50), floor: percentile(times.floor, 50), rpc: percentile(times.rpc, 50), store: percentile(times.store, 50) });
    }
    report("interleaved (one call of each in turn)", interleaved);
    const sequential: { bare: number; floor: number; rpc: number; store: number }[] = [];
    for (let round = 0; round < rounds; round++) {
      const operations = operationsOf(`s${round}`);
      const result = { bare: 0, floor: 0, rpc: 0, store: 0 };
      for (let turn = 0; turn < names.length; turn++) {
        const name = names[(round + turn) % names.length]!;
        result[name] = await timed((iteration) => operations[name](iteration));
      }
      sequential.push(result);
    }
    report("sequential (each one's calls back to back)", sequential);
  } finally {
    client.close();
    await bare.end();
    await store.close();
    await sidecar.stop();
    await postgres.destroy();
  }
}
