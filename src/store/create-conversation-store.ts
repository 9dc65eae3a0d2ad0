import type { Codec } from "../codec/codec.js";
import type { ConversationStore } from "./conversation-store.js";
import { MemoryConversationStore } from "./memory-conversation-store.js";
import { PostgresConversationStore } from "./postgres-conversation-store.js";
import { RedisConversationStore } from "./redis-conversation-store.js";

/**
 * The store for a configured Redis URL: empty = the embedded in-memory store, otherwise Redis.
 * Waits up to `connectTimeoutMs` for the first connection; if Redis is not reachable yet the store
 * is returned anyway, answers UNAVAILABLE (and `ping` fails, so health says NOT_SERVING) and keeps
 * reconnecting in the background.
 */
export async function createConversationStore(redisUrl: string, codec: Codec, connectTimeoutMs = 5_000, postgresUrl = ""): Promise<ConversationStore> {
  // Postgres: the same, and the schema is created or migrated on the first connection.
  if (postgresUrl !== "") {
    const store = new PostgresConversationStore(postgresUrl, { codec });
    await store.connected(connectTimeoutMs);
    return store;
  }
  if (redisUrl === "") return new MemoryConversationStore({ codec });
  const store = new RedisConversationStore(redisUrl, { codec });
  await store.connected(connectTimeoutMs);
  return store;
}
