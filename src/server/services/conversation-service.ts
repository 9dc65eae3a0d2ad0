import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { ConversationService } from "../../../gen/ts/contextd/v1/conversation_service_pb.js";
import { watchWithHeartbeats, type WatchDependencies } from "../../application/conversation-watch.js";

/** The store, and what Watch needs besides (see `WatchDependencies`). */
export type ConversationServiceDependencies = WatchDependencies;

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
      yield* watchWithHeartbeats(dependencies, request.conversationId, request.fromVersion, context.signal);
    },
  };
}

function requireConversationId(conversationId: string): void {
  if (conversationId === "") throw new ConnectError("conversation_id is required", Code.InvalidArgument);
}
