import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import type { Message, ToolResultPart } from "#gen/contextd/v1/message_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import { watchWithHeartbeats, type WatchDependencies } from "../../application/conversation-watch.js";
import { MessageWindows } from "../../application/message-windows.js";
import { assertStateFits } from "../../application/state-size.js";
import { defaultToolResultTextBytes, ToolResultTexts } from "../../application/tool-result-texts.js";
import { Codec } from "../../codec/codec.js";
import { utf8SliceOf } from "../../core/model/utf8-slice.js";
import { tenantKey } from "../policy/call-context.js";

/** The store, what Watch needs besides (see `WatchDependencies`), and what reads are sized with. */
export interface ConversationServiceDependencies extends WatchDependencies {
  /** The server's codec: message sizes come from its kept encodings (a private one when absent). */
  codec?: Codec;
  /** The message limit (`--max-request-bytes`), which bounds GetState answers and ReadMessages pages; 16 MiB when absent. */
  maxResponseBytes?: number;
}

const defaultMaxResponseBytes = 16 * 1024 * 1024;

/** ReadToolResult slice size when the request leaves it 0, and the largest allowed. */
const defaultReadBytes = 65_536;
const maxReadBytes = 1_048_576;

/** ListConversations page size when the request leaves it 0, and the largest honoured. */
const defaultPageSize = 100;
const maxPageSize = 1000;

/** ConversationService: stored state, versioned commits and the change stream. */
export function conversationService(dependencies: ConversationServiceDependencies): ServiceImpl<typeof ConversationService> {
  const { store } = dependencies;
  const toolResultTexts = new ToolResultTexts(defaultToolResultTextBytes);
  const codec = dependencies.codec ?? new Codec();
  const maxResponseBytes = dependencies.maxResponseBytes ?? defaultMaxResponseBytes;
  const messageBytes = (message: Message) => codec.encodeStoredMessage(message).byteLength;
  const sizing = { messageBytes, restBytes: (state: ConversationState) => codec.encodeStateRest(state).byteLength };
  const windows = new MessageWindows(store, { messageBytes, messageLimitBytes: maxResponseBytes });
  // Stored states already sized under the limit (states are immutable): a GetState of a state read
  // before sizes nothing again.
  const fitting = new WeakSet<ConversationState>();
  return {
    async getState(request) {
      requireConversationId(request.conversationId);
      const loaded = await store.load(request.conversationId);
      if (request.withoutMessages) {
        const rest = { ...loaded, system: [], history: [], memory: [], tools: [] };
        assertStateFits(rest, maxResponseBytes, sizing);
        return { state: rest };
      }
      if (!fitting.has(loaded)) {
        assertStateFits(loaded, maxResponseBytes, sizing);
        fitting.add(loaded);
      }
      return { state: loaded };
    },

    async readMessages(request) {
      return windows.read(request);
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

    async listConversations(request, context) {
      if (request.pageSize < 0) throw new ConnectError(`page_size: must not be negative, got ${request.pageSize}`, Code.InvalidArgument);
      const pageSize = request.pageSize === 0 ? defaultPageSize : Math.min(request.pageSize, maxPageSize);
      // A tenant's token sees only "<tenant>/" ids (auth.ts), so no prefix means all of those: the
      // listing a tenant's caller (the inspector among them) asks for first works without one.
      const tenant = context.values.get(tenantKey);
      const prefix = request.prefix === "" && tenant !== "" ? `${tenant}/` : request.prefix;
      const page = await store.list(prefix, pageSize, request.pageToken);
      return { conversations: page.conversations, nextPageToken: page.nextPageToken };
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
