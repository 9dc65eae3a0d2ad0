// One redis-server for a test file, a raw client on it for what the file asserts about keys and
// INFO, and the Redis stores the file opens, all closed after the file: the setup the Redis
// store's layout tests share.
import { Redis } from "ioredis";
import { afterAll, beforeAll, expect } from "vitest";
import { RedisConversationStore, type RedisStoreOptions } from "../../src/store/redis-conversation-store.js";
import { startRedis, type RedisProcess } from "./redis.js";

export interface RedisForFile {
  /** The server's URL (set once the file's `beforeAll` ran). */
  readonly url: string;
  /** A plain client on the server. */
  readonly raw: Redis;
  /** A store on the server (default options unless given), connected, closed after the file. */
  openStore(options?: RedisStoreOptions): Promise<RedisConversationStore>;
}

/** Registers the file's `beforeAll` / `afterAll` hooks; call it at the top level of a test file. */
export function redisForFile(): RedisForFile {
  let redis: RedisProcess | undefined;
  let raw: Redis | undefined;
  const stores: RedisConversationStore[] = [];
  beforeAll(async () => {
    redis = await startRedis();
    raw = new Redis(redis.url);
  });
  afterAll(async () => {
    for (const store of stores) await store.close();
    raw?.disconnect();
    await redis?.stop();
  });
  return {
    get url() {
      return redis!.url;
    },
    get raw() {
      return raw!;
    },
    async openStore(options?: RedisStoreOptions) {
      const store = new RedisConversationStore(redis!.url, options);
      stores.push(store);
      expect(await store.connected()).toBe(true);
      return store;
    },
  };
}
