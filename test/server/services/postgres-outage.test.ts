import * as grpc from "@grpc/grpc-js";
import { postgresMigrations } from "../../../src/store/postgres-schema.js";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Role } from "#gen/contextd/v1/message_pb";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "#gen/grpc/health/v1/health_pb";
import { commitThroughOutage } from "../../support/commits-through-outage.js";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startPostgres, type PostgresProcess } from "../../support/postgres.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";

// The Redis outage tests (conversation-service.test.ts, health.test.ts) against a real sidecar on a
// real PostgreSQL that is stopped, or shut down immediately (no checkpoint: crash recovery at the
// next start), and started again while the sidecar keeps running.

async function grpcError(promise: Promise<unknown>): Promise<grpc.ServiceError> {
  const error = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error, "expected the RPC to fail").toBeDefined();
  return error as grpc.ServiceError;
}

describe("Postgres outage (real sidecar, real PostgreSQL)", () => {
  let postgres: PostgresProcess;
  let sidecar: Sidecar;
  beforeAll(async () => {
    postgres = await startPostgres();
    // 500 ms, not 100 as for Redis: a ping is a query on a pool connection, and on these shared
    // cores one may take longer than 100 ms, which health reports as NOT_SERVING.
    sidecar = await startSidecar(["--postgres-url", postgres.url, "--health-interval-ms", "500"]);
  });
  afterAll(async () => {
    await sidecar?.stop();
    await postgres?.destroy();
  });

  it("creates its schema at start, versioned, and says in its start line which store it uses", async () => {
    const started = sidecar.logs.map((line) => JSON.parse(line) as { msg?: string; store?: unknown }).find((entry) => entry.msg === "contextd listening");
    expect(started?.store).toEqual({ kind: "postgres", reachable: true });
    const client = new pg.Client({ connectionString: postgres.url });
    await client.connect();
    try {
      const { rows } = await client.query<{ version: number }>("SELECT version FROM contextd_schema_migrations ORDER BY version");
      expect(rows.map((row) => row.version)).toEqual(postgresMigrations.map((migration) => migration.version));
    } finally {
      await client.end();
    }
  });

  it("is NOT_SERVING and answers UNAVAILABLE while Postgres is down, SERVING again when it returns, without a sidecar restart", async () => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    const conversationId = "pg-outage";
    const seen: ServingStatus[] = [];
    const watch = client.serverStream(Health.method.watch, { service: "contextd.v1.ConversationService" });
    watch.on("data", (response: { status: ServingStatus }) => seen.push(response.status));
    watch.on("error", () => undefined);
    try {
      for (let turn = 0; turn < 5; turn++) {
        await client.unary(ConversationService.method.commit, { conversationId, expectedVersion: BigInt(turn), deltas: [appendHistory(textMessage(`before-${turn}`, Role.USER, "x"))] });
      }
      await expect.poll(() => seen[0]).toBe(ServingStatus.SERVING);
      await postgres.stop();
      const down = await grpcError(client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage("during", Role.USER, "x"))] }));
      expect(down.code).toBe(grpc.status.UNAVAILABLE);
      expect(down.details).toContain("postgres store unavailable");
      expect((await grpcError(client.unary(ConversationService.method.getState, { conversationId }))).code).toBe(grpc.status.UNAVAILABLE);
      await expect.poll(async () => (await client.unary(Health.method.check, { service: "" })).status, { timeout: 15_000 }).toBe(ServingStatus.NOT_SERVING);
      await expect.poll(() => seen.at(-1), { timeout: 15_000 }).toBe(ServingStatus.NOT_SERVING);
      expect(await (await fetch(`${sidecar.url}/metrics`)).text()).toContain("contextd_serving 0\n");

      await postgres.restart();
      await expect.poll(async () => (await client.unary(Health.method.check, { service: "" })).status, { timeout: 15_000 }).toBe(ServingStatus.SERVING);
      // Exactly SERVING, NOT_SERVING, SERVING on a quiet machine; a ping slower than the interval
      // under heavy load may add a flap, so only the order is asserted.
      await expect.poll(() => seen.at(-1), { timeout: 15_000 }).toBe(ServingStatus.SERVING);
      expect(seen.indexOf(ServingStatus.NOT_SERVING)).toBeGreaterThan(0);
      expect(sidecar.logs.some((line) => line.includes("store unreachable: NOT_SERVING"))).toBe(true);
      let state;
      for (let attempt = 0; attempt < 100 && !state; attempt++) {
        state = await client.unary(ConversationService.method.getState, { conversationId }).then(
          (response) => response.state,
          () => new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 50)),
        );
      }
      expect(state, "the sidecar reconnected to Postgres by itself").toBeDefined();
      expect(state!.history.map((message) => message.id)).toEqual(["before-0", "before-1", "before-2", "before-3", "before-4"]);
      const after = await client.unary(ConversationService.method.commit, { conversationId, expectedVersion: 5n, deltas: [appendHistory(textMessage("after", Role.USER, "x"))] });
      expect(after.version).toBe(6n);
    } finally {
      watch.cancel();
      client.close();
    }
  });

  it.each([
    ["stops", "stop"],
    ["shuts down immediately", "kill"],
  ] as const)("keeps every acknowledged commit, once, when Postgres %s and returns while writers are committing", async (_how, end) => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    const conversationId = `pg-outage-under-load-${end}`;
    try {
      const { acknowledged, unavailable, state } = await commitThroughOutage(client, conversationId, () => postgres[end](), () => postgres.restart());
      expect(unavailable, "the outage hit commits in flight").toBeGreaterThan(0);
      expect(state.version).toBe(90n);
      expect(state.history.map((message) => message.id).sort()).toEqual([...acknowledged].sort());
    } finally {
      client.close();
    }
  });

  it("answers DATA_LOSS naming the conversation when a stored message does not decode", async () => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    const raw = new pg.Client({ connectionString: postgres.url });
    await raw.connect();
    const conversationId = "pg-corrupt";
    try {
      await client.unary(ConversationService.method.commit, { conversationId, deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] });
      await raw.query("UPDATE contextd_messages SET message = '\\xffffffff'::bytea WHERE conversation_id = $1", [Buffer.from(conversationId)]);
      // Another sidecar (no cached copy) reads the rows.
      const reader = await startSidecar(["--postgres-url", postgres.url]);
      const readerClient = grpcJsClient(`127.0.0.1:${reader.port}`);
      try {
        const error = await grpcError(readerClient.unary(ConversationService.method.getState, { conversationId }));
        expect(error.code).toBe(grpc.status.DATA_LOSS);
        expect(error.details).toMatch(/^conversation "pg-corrupt" is corrupt in the store: message 0 of the history segment does not decode/);
      } finally {
        readerClient.close();
        await reader.stop();
      }
    } finally {
      await raw.end();
      client.close();
    }
  });
});
