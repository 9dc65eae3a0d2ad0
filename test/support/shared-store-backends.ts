import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, beforeAll, expect } from "vitest";
import { PostgresConversationStore } from "../../src/store/postgres-conversation-store.js";
import { RedisConversationStore } from "../../src/store/redis-conversation-store.js";
import { startPostgres } from "./postgres.js";
import { startRedis } from "./redis.js";

/**
 * One real Redis or Postgres that several store instances open at once: what the tests of
 * sidecars sharing a store (taking turns behind a balancer, one keeping a tail another wrote
 * after) run on. `wipe` empties it, as a store lost and started again would be.
 */
export type SharedStore = RedisConversationStore | PostgresConversationStore;

export interface SharedStoreBackend {
  open(): Promise<SharedStore>;
  wipe(): Promise<void>;
  stop(): Promise<void>;
}

/** Redis and Postgres, each as `[name, start]` for `describe.each`; `database` names the Postgres database. */
export function sharedStoreBackends(database: string): [string, () => Promise<SharedStoreBackend>][] {
  return [
    ["Redis", async () => {
      const redis = await startRedis();
      const raw = new Redis(redis.url);
      return {
        open: async () => {
          const store = new RedisConversationStore(redis.url);
          expect(await store.connected()).toBe(true);
          return store;
        },
        wipe: async () => void (await raw.flushall()),
        stop: async () => {
          raw.disconnect();
          await redis.stop();
        },
      };
    }],
    ["Postgres", async () => {
      const postgres = await startPostgres();
      const url = await postgres.createDatabase(database);
      return {
        open: async () => {
          const store = new PostgresConversationStore(url);
          expect(await store.connected()).toBe(true);
          return store;
        },
        wipe: async () => {
          const client = new pg.Client({ connectionString: url });
          await client.connect();
          try {
            await client.query("TRUNCATE contextd_conversations, contextd_messages, contextd_changes, contextd_idempotency, contextd_stored_ids, contextd_stored_calls, contextd_storage_references");
          } finally {
            await client.end();
          }
        },
        stop: () => postgres.destroy(),
      };
    }],
  ];
}

/**
 * Starts `start`'s backend before the enclosing describe block's tests and stops it after them,
 * closing every store they opened; returns the backend and a way to open one more store on it.
 */
export function storesOnSharedBackend(start: () => Promise<SharedStoreBackend>): { backend: () => SharedStoreBackend; newStore: () => Promise<SharedStore> } {
  let backend: SharedStoreBackend | undefined;
  const stores: SharedStore[] = [];
  beforeAll(async () => {
    backend = await start();
  }, 30_000);
  afterAll(async () => {
    for (const store of stores) await store.close();
    await backend?.stop();
  });
  return {
    backend: () => backend!,
    newStore: async () => {
      const store = await backend!.open();
      stores.push(store);
      return store;
    },
  };
}
