import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { ConversationOrder, ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import type { ToolResultPart } from "#gen/contextd/v1/message_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import { watchWithHeartbeats, type WatchDependencies } from "../../application/conversation-watch.js";
import type { MessageWindows } from "../../application/message-windows.js";
import type { StateSizeLimit } from "../../application/state-size.js";
import type { ToolResultTexts } from "../../application/tool-result-texts.js";
import type { UsageLedger } from "../../application/usage-ledger.js";
import type { HistoryRecall } from "../../application/history-recall.js";
import { utf8SliceOf } from "../../core/model/utf8-slice.js";
import { assertLabelFilter } from "../../core/deltas/conversation-metadata.js";
import type { ListOrder } from "../../store/conversation-listing.js";
import { tenantKey } from "../policy/call-context.js";
import { deletePage, exportStates } from "../../application/conversation-retention.js";

/** What GetState, ReadMessages, ReadToolResult and Recall read through; the composition root builds them. */
export interface ConversationReads {
  /** GetState's answers under the message limit (`--max-request-bytes`). */
  stateLimit: StateSizeLimit;
  /** ReadMessages' pages, and the states it pins for their tokens. */
  windows: MessageWindows;
  /** The encoded tool-result texts ReadToolResult slices. */
  toolResultTexts: ToolResultTexts;
  /** Recall's searches and recalls by id; without it Recall answers UNIMPLEMENTED. */
  recall?: HistoryRecall;
}

/** The store, what Watch needs besides (see `WatchDependencies`), and what reads go through. */
export interface ConversationServiceDependencies extends WatchDependencies {
  /**
   * Without them the service serves commits, listings and Watch only, and GetState, ReadMessages
   * and ReadToolResult answer UNIMPLEMENTED, as every method a service leaves out does.
   */
  reads?: ConversationReads;
  /**
   * GetUsage and ListTenantUsage read it; without it (`--usage-entries-per-conversation 0`) they
   * answer FAILED_PRECONDITION naming the flag, as ReportUsage with a conversation does: the
   * methods exist, this sidecar was started without what they read.
   */
  usageLedger?: UsageLedger;
}

/** ReadToolResult slice size when the request leaves it 0, and the largest allowed. */
const defaultReadBytes = 65_536;
const maxReadBytes = 1_048_576;

/** ListConversations page size when the request leaves it 0, and the largest honoured. */
const defaultPageSize = 100;
const maxPageSize = 1000;

/** ConversationService: stored state, versioned commits and the change stream. */
export function conversationService(dependencies: ConversationServiceDependencies): Partial<ServiceImpl<typeof ConversationService>> {
  const { store, reads } = dependencies;
  return {
    ...(reads ? conversationReads(dependencies, reads) : {}),
    ...usageReads(dependencies.usageLedger),

    async commit(request) {
      requireConversationId(request.conversationId);
      if (request.deltas.length === 0) throw new ConnectError("deltas: a commit needs at least one delta", Code.InvalidArgument);
      // Without include_state a store may commit without the state (a cold append planned on the stored tail).
      const outcome = await store.commit(request.conversationId, request.expectedVersion, request.deltas, request.idempotencyKey, undefined, undefined, { withState: request.includeState });
      if (!request.includeState) return { version: outcome.version, replayed: outcome.replayed };
      return { version: outcome.version, replayed: outcome.replayed, state: outcome.state };
    },

    async fork(request) {
      requireConversationId(request.conversationId);
      if (request.newConversationId === "") throw new ConnectError("new_conversation_id is required", Code.InvalidArgument);
      const outcome = await store.fork(request.conversationId, request.atVersion, request.newConversationId);
      return { version: outcome.version, forkedFrom: outcome.forkedFrom };
    },

    async rewind(request) {
      requireConversationId(request.conversationId);
      if (request.toVersion < 0n) throw new ConnectError(`to_version: must not be negative, got ${request.toVersion}`, Code.InvalidArgument);
      const outcome = await store.rewind(request.conversationId, request.expectedVersion, request.toVersion, request.idempotencyKey);
      return { version: outcome.version, replayed: outcome.replayed };
    },

    async clear(request) {
      requireConversationId(request.conversationId);
      return { version: await store.clear(request.conversationId, request.expectedVersion) };
    },

    async listConversations(request, context) {
      if (request.pageSize < 0) throw new ConnectError(`page_size: must not be negative, got ${request.pageSize}`, Code.InvalidArgument);
      const pageSize = request.pageSize === 0 ? defaultPageSize : Math.min(request.pageSize, maxPageSize);
      // A tenant's token sees only "<tenant>/" ids (auth.ts), so no prefix means all of those: the
      // listing a tenant's caller (the inspector among them) asks for first works without one.
      const prefix = tenantPrefix(request.prefix, context.values.get(tenantKey));
      assertLabelFilter("labels", request.labels);
      if (request.updatedSinceUnixMs < 0n) throw new ConnectError(`updated_since_unix_ms: must not be negative, got ${request.updatedSinceUnixMs}`, Code.InvalidArgument);
      const order = listOrderOf(request.order);
      const page = await store.list({ prefix, pageSize, pageToken: request.pageToken, labels: request.labels, updatedSinceUnixMs: request.updatedSinceUnixMs, order });
      return { conversations: page.conversations, nextPageToken: page.nextPageToken };
    },

    async deleteConversation(request) {
      requireConversationId(request.conversationId);
      return { deletedVersion: await store.delete(request.conversationId, request.expectedVersion) };
    },

    async deleteConversations(request, context) {
      const prefix = tenantPrefix(request.prefix, context.values.get(tenantKey));
      if (prefix === "") throw new ConnectError("prefix is required: DeleteConversations never deletes every conversation of the store at once", Code.InvalidArgument);
      return deletePage(store, prefix, request.pageToken, request.pageSize);
    },

    async *watch(request, context) {
      requireConversationId(request.conversationId);
      if (request.fromVersion < 0n) throw new ConnectError(`from_version: must not be negative, got ${request.fromVersion}`, Code.InvalidArgument);
      yield* watchWithHeartbeats(dependencies, request.conversationId, request.fromVersion, context.signal);
    },
  };
}

/** GetUsage and ListTenantUsage; without a ledger, both refused naming the flag that turned it off. */
function usageReads(ledger: UsageLedger | undefined): Partial<ServiceImpl<typeof ConversationService>> {
  const kept = (method: string): UsageLedger => {
    if (ledger) return ledger;
    throw new ConnectError(`${method}: this sidecar keeps no usage ledger (--usage-entries-per-conversation 0)`, Code.FailedPrecondition);
  };
  return {
    getUsage: (request) => kept("get_usage").read(request.conversationId),
    listTenantUsage: (request, context) => kept("list_tenant_usage").listTenant(context.values.get(tenantKey) ?? "", request),
  };
}

/** GetState, ReadMessages, ReadToolResult and Recall. */
function conversationReads({ store }: ConversationServiceDependencies, { stateLimit, windows, toolResultTexts, recall }: ConversationReads): Partial<ServiceImpl<typeof ConversationService>> {
  return {
    ...(recall
      ? {
          async recall(request, context) {
            const left = context.timeoutMs();
            return recall.recall(request, left === undefined ? undefined : Math.max(0, left), context.signal);
          },
        }
      : {}),
    async getState(request) {
      requireConversationId(request.conversationId);
      const loaded = request.atVersion === undefined ? await store.load(request.conversationId) : await store.loadAt(request.conversationId, request.atVersion);
      if (request.withoutMessages) {
        const rest = { ...loaded, system: [], history: [], memory: [], tools: [] };
        stateLimit.assertFits(rest);
        return { state: rest };
      }
      stateLimit.assertStoredFits(loaded);
      return { state: loaded };
    },

    async readMessages(request) {
      return windows.read(request);
    },

    async *exportConversations(request, context) {
      const prefix = tenantPrefix(request.prefix, context.values.get(tenantKey));
      for await (const exported of exportStates(store, stateLimit, prefix, request.resumeToken, context.signal)) yield exported;
    },

    async readToolResult(request) {
      requireConversationId(request.conversationId);
      if (request.toolCallId === "") throw new ConnectError("tool_call_id is required", Code.InvalidArgument);
      if (request.maxBytes > maxReadBytes) throw new ConnectError(`max_bytes: at most ${maxReadBytes}, got ${request.maxBytes}`, Code.InvalidArgument);
      const state = await store.load(request.conversationId);
      const found = findToolResult(state, request.toolCallId);
      if (!found) throw new ConnectError(`conversation "${request.conversationId}" (version ${state.version}) has no result for tool call "${request.toolCallId}"`, Code.NotFound);
      const offset = request.offset > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(request.offset);
      const slice = utf8SliceOf(toolResultTexts.of(found.payload), offset, request.maxBytes === 0 ? defaultReadBytes : request.maxBytes);
      return { text: slice.text, offset: BigInt(slice.start), nextOffset: BigInt(slice.end), totalBytes: BigInt(slice.totalBytes), name: found.name, version: state.version };
    },
  };
}

/** A request's prefix; under a tenant's token an empty one is the tenant's ("<tenant>/", auth.ts lets no other through). */
function tenantPrefix(prefix: string, tenant: string): string {
  return prefix === "" && tenant !== "" ? `${tenant}/` : prefix;
}

function requireConversationId(conversationId: string): void {
  if (conversationId === "") throw new ConnectError("conversation_id is required", Code.InvalidArgument);
}

/** The stored result of one tool call, in whichever segment holds it; the newest when repeated. */
function findToolResult(state: ConversationState, toolCallId: string): ToolResultPart | undefined {
  for (const messages of [state.history, state.tools, state.memory, state.system]) {
    for (let index = messages.length - 1; index >= 0; index--) {
      for (const part of messages[index]!.parts) {
        if (part.kind.case === "toolResult" && part.kind.value.toolCallId === toolCallId) return part.kind.value;
      }
    }
  }
  return undefined;
}

/** The store's order for the request's; INVALID_ARGUMENT naming an order this sidecar does not know. */
function listOrderOf(order: ConversationOrder): ListOrder {
  switch (order) {
    case ConversationOrder.UNSPECIFIED:
    case ConversationOrder.ID:
      return "id";
    case ConversationOrder.UPDATED_DESC:
      return "updated";
    default:
      throw new ConnectError(`order: ${order} is not a ConversationOrder this sidecar knows`, Code.InvalidArgument);
  }
}
