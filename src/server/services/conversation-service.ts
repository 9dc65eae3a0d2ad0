import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  ConversationService,
  WatchResponseSchema,
  type WatchResponse,
} from "../../../gen/ts/contextd/v1/conversation_service_pb.js";
import type { Change } from "../../../gen/ts/contextd/v1/conversation_service_pb.js";
import type { ConversationStore } from "../../store/conversation-store.js";

export interface ConversationServiceDependencies {
  store: ConversationStore;
  /** Aborted when the server shuts down: open Watch streams end with UNAVAILABLE. */
  shutdown: AbortSignal;
  /** A Watch idle this long sends a heartbeat with the current version. */
  watchHeartbeatMs: number;
}

/** ListConversations page size when the request leaves it 0, and the largest honoured. */
const defaultPageSize = 100;
const maxPageSize = 1000;

/** ConversationService: stored state, versioned commits and the change stream. */
export function conversationService(dependencies: ConversationServiceDependencies): ServiceImpl<typeof ConversationService> {
  const { store } = dependencies;
  return {
    async getState(request) {
      requireConversationId(request.conversationId);
      const state = await store.load(request.conversationId);
      return { state };
    },

    async commit(request) {
      requireConversationId(request.conversationId);
      if (request.deltas.length === 0) throw new ConnectError("deltas: a commit needs at least one delta", Code.InvalidArgument);
      const outcome = await store.commit(request.conversationId, request.expectedVersion, request.deltas, request.idempotencyKey);
      if (!request.includeState) return { version: outcome.version, replayed: outcome.replayed };
      return { version: outcome.version, replayed: outcome.replayed, state: outcome.state };
    },

    async clear(request) {
      requireConversationId(request.conversationId);
      return { version: await store.clear(request.conversationId, request.expectedVersion) };
    },

    async listConversations(request) {
      if (request.pageSize < 0) throw new ConnectError(`page_size: must not be negative, got ${request.pageSize}`, Code.InvalidArgument);
      const pageSize = request.pageSize === 0 ? defaultPageSize : Math.min(request.pageSize, maxPageSize);
      const page = await store.list(request.prefix, pageSize, request.pageToken);
      return { conversations: page.conversations, nextPageToken: page.nextPageToken };
    },

    async *watch(request, context) {
      requireConversationId(request.conversationId);
      if (request.fromVersion < 0n) throw new ConnectError(`from_version: must not be negative, got ${request.fromVersion}`, Code.InvalidArgument);
      yield* watchWithHeartbeats(dependencies, request.conversationId, request.fromVersion, context);
    },
  };
}

/**
 * Relays the store's changes, inserting a heartbeat whenever nothing was sent for
 * `watchHeartbeatMs`, until the client goes away or the server shuts down.
 */
async function* watchWithHeartbeats(
  { store, shutdown, watchHeartbeatMs }: ConversationServiceDependencies,
  conversationId: string,
  fromVersion: bigint,
  context: HandlerContext,
): AsyncGenerator<WatchResponse> {
  const finished = new AbortController();
  const signal = AbortSignal.any([context.signal, shutdown, finished.signal]);
  const shuttingDown = () => new ConnectError("server is shutting down; resume the watch from the last version received", Code.Unavailable);
  if (shutdown.aborted) throw shuttingDown();
  const stopped = new Promise<"stopped">((resolve) => signal.addEventListener("abort", () => resolve("stopped"), { once: true }));
  const changes = store.watch(conversationId, fromVersion, signal)[Symbol.asyncIterator]();
  let next = changes.next();
  try {
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const idle = new Promise<"idle">((resolve) => (timer = setTimeout(() => resolve("idle"), watchHeartbeatMs)));
      const winner = await Promise.race([next, idle, stopped]).finally(() => clearTimeout(timer));
      if (shutdown.aborted) throw shuttingDown();
      if (signal.aborted) return;
      if (winner === "idle") {
        const version = await store.currentVersion(conversationId);
        yield create(WatchResponseSchema, { kind: { case: "heartbeat", value: { version } } });
        continue;
      }
      if (winner === "stopped") return;
      if (winner.done) throw new ConnectError(`watch of conversation "${conversationId}" ended: the store closed`, Code.Unavailable);
      const change: Change = winner.value;
      yield create(WatchResponseSchema, { kind: { case: "change", value: change } });
      next = changes.next();
    }
  } finally {
    finished.abort();
    // The store's iterator ends once the signal is aborted; a pending read may still reject then.
    next.catch(() => undefined);
    void changes.return?.(undefined)?.catch(() => undefined);
  }
}

function requireConversationId(conversationId: string): void {
  if (conversationId === "") throw new ConnectError("conversation_id is required", Code.InvalidArgument);
}
