// The client an agent holds: the generated contextd.v1 services plus what every agent needs
// around them, with the semantics of the Go and Python clients — per-call deadlines spanning
// retries, UNAVAILABLE retried with jittered backoff, every write keyed and retried until its
// outcome is known, typed errors, compare-and-retry commits, one-RPC turns, stream iterators and
// the summarizing session. Exists because the generated code alone leaves each of these to every
// agent, and a naive retry of an unkeyed commit appends twice.
import { randomUUID } from "node:crypto";
import * as http from "node:http";
import * as https from "node:https";
import { clone, create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, createClient, type Client as ServiceClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { HealthCheckResponse_ServingStatus, Health } from "../generated/grpc/health/v1/health_pb.js";
import { CommitOptionsSchema, CompileRequestSchema, type CompileResult } from "../generated/contextd/v1/compile_pb.js";
import {
  ContextService,
  CompileSessionRequestSchema,
  type CompileResponse,
  type CompileSessionRequest,
  type CompileStreamRequestSchema,
  type CountTokensRequestSchema,
  type CountTokensResponse,
  type RenderRequestSchema,
  type RenderResponse,
  type ReportUsageRequestSchema,
  type ReportUsageResponse,
  type SummarizeRequest,
} from "../generated/contextd/v1/context_service_pb.js";
import {
  ConversationService,
  CommitRequestSchema,
  type Change,
  type ClearRequestSchema,
  type ClearResponse,
  type CommitResponse,
  type ForkRequestSchema,
  type ForkResponse,
  type GetStateRequestSchema,
  type GetStateResponse,
  type ListConversationsRequestSchema,
  type ListConversationsResponse,
  type DeleteConversationRequestSchema,
  type DeleteConversationResponse,
  type DeleteConversationsRequestSchema,
  type DeleteConversationsResponse,
  type ExportConversationsRequestSchema,
  type ExportConversationsResponse,
  type ReadMessagesRequestSchema,
  type ReadMessagesResponse,
  RewindRequestSchema,
  type RewindResponse,
  type RecallRequestSchema,
  type RecallResponse,
  type WatchRequestSchema,
} from "../generated/contextd/v1/conversation_service_pb.js";
import type { Message, MessageSchema } from "../generated/contextd/v1/message_pb.js";
import type { GetUsageResponse, ListTenantUsageRequestSchema, ListTenantUsageResponse } from "../generated/contextd/v1/usage_ledger_pb.js";
import { Segment, type ConversationState, type Delta } from "../generated/contextd/v1/state_pb.js";
import type { ObserverEvent } from "../generated/contextd/v1/telemetry_pb.js";
import { TelemetryService, type WatchEventsRequestSchema, type WatchEventsResponse } from "../generated/contextd/v1/telemetry_service_pb.js";
import { ContextdError, OutcomeUnknownError, VersionConflictError, isOutcomeUnknown, isResponseTooLarge, toContextdError } from "./errors.js";
import { DEFAULT_RETRY_POLICY, Deadline, backoff, sleep, type RetryPolicy } from "./retry.js";

/** Where a sidecar listens unless configured otherwise. */
export const DEFAULT_ADDRESS = "127.0.0.1:7420";

/**
 * The largest message the client sends or receives unless configured otherwise: the sidecar's
 * default --max-request-bytes (16 MiB) plus the 5-byte frame header of gRPC and Connect. A commit
 * whose answer is refused for its size has still been applied, so the receive limit must not be
 * smaller than what a sidecar answers for a long conversation.
 */
export const DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024 + 5;

/** TLS settings for `tls`: the node:tls options a client needs against a sidecar's certificate. */
export interface TlsOptions {
  /** CA certificate(s) to trust, PEM; the system's CAs when unset. */
  ca?: string | Buffer | (string | Buffer)[];
  /** Client certificate and key, PEM, for mutual TLS. */
  cert?: string | Buffer;
  key?: string | Buffer;
  /** The name the certificate must be for, when it differs from the address's host. */
  servername?: string;
}

export interface ClientOptions {
  /** "host:port" of the sidecar; DEFAULT_ADDRESS when unset or empty. */
  address?: string;
  /**
   * "grpc" (default): gRPC over HTTP/2, every RPC including the CompileSession stream. "connect":
   * the Connect protocol (binary protobuf) over HTTP/1.1, for networks where only HTTP/1.1 gets
   * through; CompileSession, a bidirectional stream, is not available over it.
   */
  protocol?: "grpc" | "connect";
  /** TLS: `true` (the system's CAs) or its options; the URL becomes https. Plain text when unset. */
  tls?: boolean | TlsOptions;
  /** A bearer token sent as `authorization: Bearer <token>` on every call (sidecar --auth-tokens-file). */
  token?: string;
  /** Bounds every unary call, retries included; 0 = no bound. Default 30 000. Streams are never bounded by it. */
  timeoutMs?: number;
  /** Replaces DEFAULT_RETRY_POLICY. */
  retry?: RetryPolicy;
  /** How many times commitWithRetry tries before throwing the version conflict. Default 10. */
  conflictAttempts?: number;
  /**
   * The largest response message accepted; DEFAULT_MAX_MESSAGE_BYTES by default. A write whose
   * answer is over it is retried with its idempotency key, asking for less (see commit).
   */
  maxReceiveBytes?: number;
  /** The largest request message sent; DEFAULT_MAX_MESSAGE_BYTES by default. */
  maxSendBytes?: number;
  /** More connect interceptors, after the bearer token's. */
  interceptors?: Interceptor[];
}

/** Per-call options. */
export interface CallOptions {
  /** Replaces the client's timeoutMs for this call (retries included). */
  timeoutMs?: number;
  /** Cancels the call (CANCELLED). */
  signal?: AbortSignal;
  /** Extra request headers. */
  headers?: ConstructorParameters<typeof Headers>[0];
}

type Init<Schema> = Schema extends Parameters<typeof create>[0] ? MessageInitShape<Schema> : never;
type CompileRequestInit = MessageInitShape<typeof CompileRequestSchema>;
type CommitRequestInit = MessageInitShape<typeof CommitRequestSchema>;
type MessageInit = MessageInitShape<typeof MessageSchema>;

/**
 * What a summarize function returns: the summary message, or the summary and facts to remember.
 * The summary's role defaults to ASSISTANT, its id and provenance are filled in by contextd, and it
 * may not carry tool calls or results.
 */
export type SummaryAnswer = MessageInit | { summary: MessageInit; remember?: string[] };

/**
 * Writes a summary of `messages` (whole units of the oldest history; never a split tool round,
 * the open round, pending messages or the current turn; a previous summary, when history starts
 * with one, is `messages[0]`) in about `targetTokens` tokens. `asked` is the whole request: its
 * `template` (the sections a summary should have, and `template.text` to put in a prompt), the
 * `facts` found in `messages` (file paths, URLs, commands, error messages, tool names, ids, each
 * with the message it first appears in) for the summary to keep word for word, and
 * `factsTruncated` when a bound left some out.
 */
export type Summarize = (messages: Message[], targetTokens: bigint, asked: SummarizeRequest) => SummaryAnswer | Promise<SummaryAnswer>;

/** Talks to one contextd sidecar. Safe for concurrent use; close it when done. */
/** The names of the tools a compile with `recallTools: true` adds; `Client.answerRecallToolCall` answers their calls. */
export const RECALL_TOOL_NAMES: readonly string[] = ["contextd_recall_message", "contextd_search_history"];

/** Whether a model's tool call is one of contextd's recall tools. */
export function isRecallTool(name: string): boolean {
  return RECALL_TOOL_NAMES.includes(name);
}

export class Client {
  /** The generated service clients, for anything the methods below do not cover. */
  readonly conversations: ServiceClient<typeof ConversationService>;
  readonly contexts: ServiceClient<typeof ContextService>;
  readonly telemetry: ServiceClient<typeof TelemetryService>;
  readonly health: ServiceClient<typeof Health>;
  private readonly timeoutMs: number;
  private readonly retry: RetryPolicy;
  private readonly conflictAttempts: number;
  private readonly protocol: "grpc" | "connect";
  private readonly release: () => void;

  /** Connects lazily (the first call connects; use waitReady to wait for the sidecar). */
  constructor(options: ClientOptions = {}) {
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.retry = options.retry ?? DEFAULT_RETRY_POLICY;
    this.conflictAttempts = Math.max(options.conflictAttempts ?? 10, 1);
    this.protocol = options.protocol ?? "grpc";
    const tls = options.tls === true ? {} : options.tls || undefined;
    const baseUrl = `${tls ? "https" : "http"}://${options.address || DEFAULT_ADDRESS}`;
    const interceptors: Interceptor[] = [];
    if (options.token !== undefined) {
      const authorization = `Bearer ${options.token}`;
      interceptors.push((next) => (request) => {
        request.header.set("authorization", authorization);
        return next(request);
      });
    }
    interceptors.push(...(options.interceptors ?? []));
    const limits = { readMaxBytes: options.maxReceiveBytes ?? DEFAULT_MAX_MESSAGE_BYTES, writeMaxBytes: options.maxSendBytes ?? DEFAULT_MAX_MESSAGE_BYTES };
    let transport: Transport;
    if (this.protocol === "connect") {
      const agent = tls ? new https.Agent({ keepAlive: true, ...tls }) : new http.Agent({ keepAlive: true });
      transport = createConnectTransport({ baseUrl, httpVersion: "1.1", nodeOptions: { agent }, useBinaryFormat: true, interceptors, ...limits });
      this.release = () => agent.destroy();
    } else {
      // Our own session manager, so that close() can end the HTTP/2 connection.
      const sessionManager = new Http2SessionManager(baseUrl, {}, tls);
      transport = createGrpcTransport({ baseUrl, sessionManager, interceptors, ...limits });
      this.release = () => sessionManager.abort();
    }
    this.conversations = createClient(ConversationService, transport);
    this.contexts = createClient(ContextService, transport);
    this.telemetry = createClient(TelemetryService, transport);
    this.health = createClient(Health, transport);
  }

  /** Closes the connection; streams still open end with CANCELLED. */
  close(): void {
    this.release();
  }

  [Symbol.dispose](): void {
    this.close();
  }

  /**
   * Resolves when the sidecar reports SERVING (its store is usable), polling with the retry
   * policy's backoff; rejects with DEADLINE_EXCEEDED after `timeoutMs`. Agents call it once at
   * start, since the sidecar may start after them.
   */
  async waitReady(timeoutMs = 30_000, signal?: AbortSignal): Promise<void> {
    const deadline = new Deadline(timeoutMs);
    let last = "";
    for (let retry = 1; ; retry++) {
      try {
        // The sidecar says why it is not SERVING in a response header (say, the store's connection error).
        let reason: string | null = null;
        const response = await this.health.check({}, { timeoutMs: deadline.remaining(), signal, onHeader: (header) => (reason = header.get("contextd-health-reason")) });
        if (response.status === HealthCheckResponse_ServingStatus.SERVING) return;
        last = `health is ${HealthCheckResponse_ServingStatus[response.status]}${reason ? `: ${reason}` : ""}`;
      } catch (thrown) {
        const failure = toContextdError(thrown);
        if (failure.code === Code.Canceled) throw failure;
        // An attempt the overall deadline cut short says nothing new: keep what the sidecar last
        // answered (say, why it is NOT_SERVING).
        if (!(failure.code === Code.DeadlineExceeded && last !== "")) last = failure.message;
      }
      const pause = backoff(this.retry, retry);
      if (!deadline.allows(pause)) throw new ContextdError(`sidecar not ready after ${timeoutMs} ms (last: ${last})`, Code.DeadlineExceeded);
      await sleep(pause, signal);
    }
  }

  /** Reads a conversation; an unknown one is an empty state at version 0. */
  getState(request: Init<typeof GetStateRequestSchema>, options?: CallOptions): Promise<GetStateResponse> {
    return this.unary((o) => this.conversations.getState(request, o), true, options);
  }

  /**
   * Reads one page of a window of a segment's messages: the last `last`, or the positions `start`
   * to `end` (the whole segment when neither is set), at most `maxBytes` of messages a page (0 =
   * 4 MiB; a larger message comes alone). Every page of a window is read at the first page's
   * version; a version the sidecar no longer keeps throws VersionConflictError. Retried on
   * UNAVAILABLE like every read; `messagePages` reads every page.
   */
  readMessages(request: Init<typeof ReadMessagesRequestSchema>, options?: CallOptions): Promise<ReadMessagesResponse> {
    return this.unary((o) => this.conversations.readMessages(request, o), true, options);
  }

  /**
   * Yields every page of the window `request` names, in order, each at the first page's version
   * (`pageToken`, when set, starts there). What reads a conversation larger than getState can
   * answer (over the message limit): `for await (const page of client.messagePages({ conversationId }))`.
   */
  async *messagePages(request: Init<typeof ReadMessagesRequestSchema>, options?: CallOptions): AsyncGenerator<ReadMessagesResponse, void, undefined> {
    let page = await this.readMessages(request, options);
    yield page;
    while (page.nextPageToken !== "") {
      page = await this.readMessages({ conversationId: request.conversationId, maxBytes: request.maxBytes, pageToken: page.nextPageToken }, options);
      yield page;
    }
  }

  /**
   * Finds stored history messages by id or by a ranked text search, answered as a tool result text
   * (`RecallResponse.text`) with the hits beside it. Retried on UNAVAILABLE like every read.
   */
  recall(request: Init<typeof RecallRequestSchema>, options?: CallOptions): Promise<RecallResponse> {
    return this.unary((o) => this.conversations.recall(request, o), true, options);
  }

  /**
   * Answers a model's call of one of contextd's recall tools (a compile with `recallTools: true`
   * adds them; `isRecallTool(name)` says whether a call is one): the text to send back as that
   * call's tool result, from one Recall call. Give the call's name and its arguments as the JSON
   * text the provider returned. Arguments the tool does not take throw ContextdError
   * INVALID_ARGUMENT naming them.
   */
  async answerRecallToolCall(conversationId: string, name: string, argumentsJson: string, options?: CallOptions): Promise<string> {
    const response = await this.recall({ conversationId, toolCall: { name, arguments: argumentsJson } }, options);
    return response.text;
  }

  /**
   * Applies a batch of deltas atomically. The response carries the new version; the state too only
   * with `includeState`. A stale `expectedVersion` throws VersionConflictError.
   *
   * A commit is never reported as failed when it may have applied. A request without an
   * idempotency key is sent with a random one (the caller's object is not modified), and a commit
   * whose outcome is unknown — UNAVAILABLE, DEADLINE_EXCEEDED, or an answer over the receive limit
   * — is sent again with the same key, so it applies at most once; the sidecar answers a repeat
   * from the key's record (`replayed`). A retry after an answer over the receive limit asks for the
   * version only. When the retries run out it throws OutcomeUnknownError naming the key.
   */
  commit(request: CommitRequestInit, options?: CallOptions): Promise<CommitResponse> {
    const keyed = clone(CommitRequestSchema, create(CommitRequestSchema, request));
    if (keyed.idempotencyKey === "") keyed.idempotencyKey = newIdempotencyKey();
    return this.keyedWrite(
      keyed,
      keyed.idempotencyKey,
      (r) => ({ ...r, includeState: false }),
      (r, o) => this.conversations.commit(r, o),
      options,
    );
  }

  /**
   * Reads the conversation, asks `apply` for the deltas to commit on top of that state, and commits
   * them with the state's version as the expected version; on a version conflict it reloads and
   * calls `apply` again, up to the client's conflictAttempts. `apply` must be safe to call more
   * than once.
   *
   * With `historyTail: N` only what a writer of the tail needs is read, at any size of the
   * conversation (where getState refuses one over the message limit): `apply` gets the version,
   * artifacts, experiences and tool definitions (getState with `withoutMessages`) and, as its
   * `history`, the last N history messages read at that version (readMessages); the other
   * segments are left empty. 0 reads no messages. A commit landing between the two reads is a
   * version conflict, retried as a stale commit is.
   */
  async commitWithRetry(
    conversationId: string,
    apply: (state: ConversationState) => Delta[] | Promise<Delta[]>,
    options?: CallOptions & { historyTail?: number },
  ): Promise<CommitResponse> {
    let conflict: VersionConflictError | undefined;
    for (let attempt = 1; attempt <= this.conflictAttempts; attempt++) {
      if (conflict) await sleep(backoff(this.retry, attempt - 1), options?.signal);
      try {
        const state = await this.stateForCommit(conversationId, options?.historyTail, options);
        return await this.commit({ conversationId, expectedVersion: state.version, deltas: await apply(state) }, options);
      } catch (error) {
        if (!(error instanceof VersionConflictError)) throw error;
        conflict = error;
      }
    }
    throw conflict!;
  }

  /** The whole state, or (`historyTail`) the rest of it with the history's last messages at its version. */
  private async stateForCommit(conversationId: string, historyTail: number | undefined, options: CallOptions | undefined): Promise<ConversationState> {
    if (historyTail === undefined) return (await this.getState({ conversationId }, options)).state!;
    const state = (await this.getState({ conversationId, withoutMessages: true }, options)).state!;
    if (historyTail > 0) {
      const request = { conversationId, segment: Segment.HISTORY, last: Math.min(historyTail, 2 ** 32 - 1), version: state.version };
      for await (const page of this.messagePages(request, options)) state.history.push(...page.messages);
    }
    return state;
  }

  /** Empties a conversation. Not retried: it has no idempotency key, and clearing twice advances the version twice. */
  clear(request: Init<typeof ClearRequestSchema>, options?: CallOptions): Promise<ClearResponse> {
    return this.unary((o) => this.conversations.clear(request, o), false, options);
  }

  /**
   * Copies `conversationId` at `atVersion` (absent = its latest version) into the new conversation
   * `newConversationId`, as its version 1 with `forkedFrom` set; the source is not written. Not
   * retried: a repeat of a fork that applied would find the new id taken (ALREADY_EXISTS).
   */
  fork(request: Init<typeof ForkRequestSchema>, options?: CallOptions): Promise<ForkResponse> {
    return this.unary((o) => this.conversations.fork(request, o), false, options);
  }

  /**
   * Commits a new version whose state is the state at `toVersion` (getState with `atVersion`
   * reads it), `expectedVersion` checked as a commit's (VersionConflictError). Keyed and retried
   * as commit is: a request without an idempotency key is sent with a random one.
   */
  rewind(request: Init<typeof RewindRequestSchema>, options?: CallOptions): Promise<RewindResponse> {
    const keyed = clone(RewindRequestSchema, create(RewindRequestSchema, request));
    if (keyed.idempotencyKey === "") keyed.idempotencyKey = newIdempotencyKey();
    return this.keyedWrite(keyed, keyed.idempotencyKey, (r) => r, (r, o) => this.conversations.rewind(r, o), options);
  }

  /**
   * Lists conversations, paged, by id or newest update first (`order`), optionally only those with
   * `labels` or updated since `updatedSinceUnixMs`; a page may be short with a `nextPageToken`.
   */
  listConversations(request: Init<typeof ListConversationsRequestSchema>, options?: CallOptions): Promise<ListConversationsResponse> {
    return this.unary((o) => this.conversations.listConversations(request, o), true, options);
  }

  /**
   * A conversation's usage ledger: the totals of every report recorded for it (`reportUsage` with
   * its `conversationId` and a `reportId`) and its newest reports, the rest counted in the totals only.
   */
  getUsage(conversationId: string, options?: CallOptions): Promise<GetUsageResponse> {
    return this.unary((o) => this.conversations.getUsage({ conversationId }, o), true, options);
  }

  /** A tenant's usage totals and a page of its conversations' totals, by id (`nextPageToken` for the next page). */
  listTenantUsage(request: Init<typeof ListTenantUsageRequestSchema>, options?: CallOptions): Promise<ListTenantUsageResponse> {
    return this.unary((o) => this.conversations.listTenantUsage(request, o), true, options);
  }

  /**
   * Deletes a conversation whole (with `expectedVersion`, only at that version: `VersionConflictError`
   * otherwise); it then reads as never written. Not retried.
   */
  deleteConversation(request: Init<typeof DeleteConversationRequestSchema>, options?: CallOptions): Promise<DeleteConversationResponse> {
    return this.unary((o) => this.conversations.deleteConversation(request, o), false, options);
  }

  /** Deletes one bounded page of the conversations under `prefix` (a tenant's: "<tenant>/"); call again with `nextPageToken` until it is empty. */
  deleteConversations(request: Init<typeof DeleteConversationsRequestSchema>, options?: CallOptions): Promise<DeleteConversationsResponse> {
    return this.unary((o) => this.conversations.deleteConversations(request, o), true, options);
  }

  /** The states of the conversations under `prefix` in id order; after an error, a new call with the last `resumeToken` received goes on from there. */
  async *exportConversations(request: Init<typeof ExportConversationsRequestSchema>, options: { signal?: AbortSignal } = {}): AsyncGenerator<ExportConversationsResponse, void, undefined> {
    try {
      yield* this.conversations.exportConversations(request, { signal: options.signal });
    } catch (thrown) {
      throw toContextdError(thrown);
    }
  }

  /**
   * Compiles a prompt. A compile that commits (`commit`) is a write and is treated as commit is:
   * it gets a random idempotency key when it has none, and an unknown outcome is retried with the
   * same key (after an answer over the receive limit, without `include`). A compile that commits
   * nothing is a read and is retried on UNAVAILABLE.
   */
  compile(request: CompileRequestInit, options?: CallOptions): Promise<CompileResponse> {
    if (request.commit === undefined) return this.unary((o) => this.contexts.compile(request, o), true, options);
    const keyed = keyedCompile(request);
    return this.keyedWrite(
      keyed,
      keyed.commit!.idempotencyKey,
      (r) => ({ ...r, include: [] }),
      (r, o) => this.contexts.compile(r, o),
      options,
    );
  }

  /**
   * One step of an agent loop in one RPC: commits `deltas` — what the agent produced since its
   * last model call (the assistant's answer, tool results, the next user message) — on top of
   * `expectedVersion` and returns the compile of the state they produce, the context for the next
   * model call. Deltas and compile are atomic: when the compile fails nothing is committed, and
   * when the commit fails (VersionConflictError for a stale version, INVALID_ARGUMENT for an
   * invalid delta) there is no result. The next turn's expectedVersion is the result's
   * `committedVersion`.
   *
   * `request` holds the compile options (budget, render, ...) and the conversationId; its `commit`
   * is set here, and the caller's object is not modified. Put the user's message in `deltas`
   * (appendUser), not in `currentTurn`, which a retry would compile twice.
   *
   * Like compile with `commit`, a turn is keyed and retried while its outcome is unknown; a retry
   * whose first attempt committed returns the compile of that version (warning
   * "idempotent_replay"). If the conversation moved on meanwhile, turn compiles it as it is now
   * (without committing) so the result always has the prompt (`rendered` when `request.render`
   * names a provider, `payload` beside it only with `CompileResultPart.PAYLOAD` in `include`; else
   * `payload`); `committedVersion` still says which version the deltas produced.
   */
  async turn(request: CompileRequestInit, expectedVersion: bigint | number, deltas: Delta[], options?: CallOptions): Promise<CompileResult> {
    if (!request.conversationId) throw new Error("contextd: turn needs request.conversationId (a turn commits to a stored conversation)");
    if (request.currentTurn !== undefined) throw new Error("contextd: turn takes the user's message as a delta (appendUser), not as request.currentTurn");
    const turn = clone(CompileRequestSchema, create(CompileRequestSchema, request));
    turn.commit = create(CommitOptionsSchema, { expectedVersion: BigInt(expectedVersion), deltas, idempotencyKey: turn.commit?.idempotencyKey ?? "" });
    const result = (await this.compile(turn, options)).result!;
    if (result.payload !== undefined || result.rendered !== undefined) return result;
    // A replay after the conversation moved on carries versions only, no prompt.
    turn.commit = undefined;
    const current = (await this.compile(turn, options)).result!;
    current.committedVersion = result.committedVersion;
    current.warnings = [...result.warnings, ...current.warnings];
    return current;
  }

  /** Counts the tokens of messages with an estimator. */
  countTokens(request: Init<typeof CountTokensRequestSchema>, options?: CallOptions): Promise<CountTokensResponse> {
    return this.unary((o) => this.contexts.countTokens(request, o), true, options);
  }

  /**
   * Reports the provider's input token count for a compile, so later compiles with the same
   * provider, model and estimator are budgeted with a corrected estimate: copy `provider`, `model`,
   * `estimator` and `estimatedTokens` from `result.calibration` and set `actualInputTokens` from the
   * provider's usage (every input token, cached or not). With `conversationId` and `reportId` it is also recorded in that conversation's usage ledger (`getUsage`) and retried, since the sidecar counts a report id once; without them it is not retried: a repeated report would count twice.
   */
  reportUsage(request: Init<typeof ReportUsageRequestSchema>, options?: CallOptions): Promise<ReportUsageResponse> {
    // A report identified in a conversation's ledger counts once, so it may be sent again.
    const identified = (request.conversationId ?? "") !== "" && (request.reportId ?? "") !== "";
    return this.unary((o) => this.contexts.reportUsage(request, o), identified, options);
  }

  /** Renders a view of a stored or inline snapshot. */
  render(request: Init<typeof RenderRequestSchema>, options?: CallOptions): Promise<RenderResponse> {
    return this.unary((o) => this.contexts.render(request, o), true, options);
  }

  /**
   * Compiles like compile, calling `onEvent` with each observer event as the engine emits it, and
   * returns the result, which the server sends last. Runs under the client's call timeout and is
   * not retried, since onEvent may already have seen events.
   */
  async compileStream(request: Init<typeof CompileStreamRequestSchema>, onEvent?: (event: ObserverEvent) => void, options: CallOptions = {}): Promise<CompileResult> {
    const deadline = new Deadline(options.timeoutMs ?? this.timeoutMs);
    try {
      for await (const response of this.contexts.compileStream(request, callOptions(options, deadline))) {
        if (response.kind.case === "result") return response.kind.value;
        if (response.kind.case === "event") onEvent?.(response.kind.value);
      }
    } catch (thrown) {
      throw toContextdError(thrown);
    }
    throw new ContextdError("compile stream ended without a result", Code.Internal);
  }

  /**
   * Compiles over ContextService.CompileSession: whenever the budget asks for a summary (strategy
   * SUMMARIZE, or budget.autoCompact when the conversation exceeds the window) it calls
   * `summarize` and sends its answer back, then returns the result. With `commit` the summary is
   * stored as a compact delta, and the facts as experiences, in the same atomic commit as the
   * writeback; a commit without an idempotency key gets a random one.
   *
   * Not retried, and not bounded by the client's timeout (summaries take as long as the model
   * takes): bound it with options.timeoutMs or options.signal. The sidecar stops waiting for an
   * answer after its --summarize-timeout-ms (DEADLINE_EXCEEDED, nothing committed). An error from
   * summarize cancels the session and is thrown with it as `cause`. Needs protocol "grpc".
   */
  async compileSession(request: CompileRequestInit, summarize: Summarize, options: CallOptions = {}): Promise<CompileResult> {
    if (this.protocol !== "grpc") throw new Error('contextd: compileSession is a bidirectional stream and needs protocol "grpc" (HTTP/2)');
    const keyed = request.commit === undefined ? create(CompileRequestSchema, request) : keyedCompile(request);
    const cancel = new AbortController();
    const signals = options.signal ? [options.signal, cancel.signal] : [cancel.signal];
    const timeoutMs = options.timeoutMs === undefined || options.timeoutMs <= 0 ? undefined : options.timeoutMs;
    const outbox = new Outbox<CompileSessionRequest>();
    outbox.push(create(CompileSessionRequestSchema, { kind: { case: "compile", value: keyed } }));
    let summarizeFailure: Error | undefined;
    try {
      for await (const response of this.contexts.compileSession(outbox, { signal: AbortSignal.any(signals), timeoutMs, headers: options.headers })) {
        if (response.kind.case === "summarizeRequest") {
          const asked = response.kind.value;
          let answer: SummaryAnswer;
          try {
            answer = await summarize(asked.messages, asked.targetTokens, asked);
          } catch (error) {
            const why = error instanceof Error ? error.message : String(error);
            summarizeFailure = new Error(`contextd: summarize ${asked.messages.length} messages (${asked.reason}): ${why}`, { cause: error });
            cancel.abort(summarizeFailure);
            throw summarizeFailure;
          }
          const [summary, facts] = "summary" in answer ? [answer.summary, answer.remember ?? []] : [answer, []];
          outbox.push(create(CompileSessionRequestSchema, { kind: { case: "summarizeResponse", value: { requestId: asked.requestId, summary, remember: facts } } }));
        } else if (response.kind.case === "result") {
          return response.kind.value;
        }
      }
    } catch (thrown) {
      throw thrown === summarizeFailure ? thrown : toContextdError(thrown);
    } finally {
      outbox.close();
    }
    throw new ContextdError("compile session ended without a result", Code.Internal);
  }

  /**
   * Yields the committed changes of a conversation with a version above `fromVersion`, in version
   * order, then live changes until the loop stops or `signal` aborts. Heartbeats are consumed, not
   * yielded. When the stream breaks with UNAVAILABLE (a sidecar restart, a store failover) it is
   * reopened after the last change yielded, so no change is lost or repeated; the retry policy
   * bounds the consecutive failures, and a received change starts the count over.
   */
  async *watch(request: Init<typeof WatchRequestSchema>, options: { signal?: AbortSignal } = {}): AsyncGenerator<Change, void, undefined> {
    const conversationId = request.conversationId ?? "";
    let fromVersion = BigInt(request.fromVersion ?? 0);
    for (let failures = 0; ; ) {
      try {
        for await (const response of this.conversations.watch({ conversationId, fromVersion }, { signal: options.signal })) {
          if (response.kind.case !== "change") continue;
          failures = 0;
          fromVersion = response.kind.value.version;
          yield response.kind.value;
        }
        return;
      } catch (thrown) {
        const failure = toContextdError(thrown);
        failures++;
        if (failure.code !== Code.Unavailable || failures >= this.retry.maxAttempts) throw failure;
      }
      await sleep(backoff(this.retry, failures), options.signal);
    }
  }

  /**
   * Yields the observer events of every compile (of one conversation when `conversationId` is
   * set) until the loop stops or `signal` aborts; each response's `dropped` says how many events
   * this subscriber lost before it. Telemetry is not durable, so a broken stream is not resumed.
   */
  async *watchEvents(request: Init<typeof WatchEventsRequestSchema>, options: { signal?: AbortSignal } = {}): AsyncGenerator<WatchEventsResponse, void, undefined> {
    try {
      yield* this.telemetry.watchEvents(request, { signal: options.signal });
    } catch (thrown) {
      throw toContextdError(thrown);
    }
  }

  private async unary<T>(call: (options: ConnectCallOptions) => Promise<T>, retryable: boolean, options: CallOptions = {}): Promise<T> {
    const deadline = new Deadline(options.timeoutMs ?? this.timeoutMs);
    const attempts = retryable ? Math.max(this.retry.maxAttempts, 1) : 1;
    for (let attempt = 1; ; attempt++) {
      try {
        return await call(callOptions(options, deadline));
      } catch (thrown) {
        const failure = toContextdError(thrown);
        const pause = backoff(this.retry, attempt);
        if (failure.code !== Code.Unavailable || attempt >= attempts || !deadline.allows(pause)) throw failure;
        await sleep(pause, options.signal);
      }
    }
  }

  /** Sends a write carrying idempotency key `key` again while its outcome is unknown and the policy and deadline allow. */
  private async keyedWrite<Request, T>(request: Request, key: string, lean: (request: Request) => Request, send: (request: Request, options: ConnectCallOptions) => Promise<T>, options: CallOptions = {}): Promise<T> {
    const deadline = new Deadline(options.timeoutMs ?? this.timeoutMs);
    const attempts = Math.max(this.retry.maxAttempts, 1);
    for (let attempt = 1; ; attempt++) {
      try {
        return await send(request, callOptions(options, deadline));
      } catch (thrown) {
        const failure = toContextdError(thrown);
        if (!isOutcomeUnknown(failure)) throw failure;
        if (attempt >= attempts || deadline.remaining() === 0 || options.signal?.aborted) throw new OutcomeUnknownError(key, failure);
        if (isResponseTooLarge(failure)) {
          // Asking for less is what helps here, not waiting.
          request = lean(request);
          continue;
        }
        const pause = backoff(this.retry, attempt);
        if (!deadline.allows(pause)) throw new OutcomeUnknownError(key, failure);
        try {
          await sleep(pause, options.signal);
        } catch {
          throw new OutcomeUnknownError(key, failure);
        }
      }
    }
  }
}

interface ConnectCallOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
  headers?: ConstructorParameters<typeof Headers>[0];
}

function callOptions(options: CallOptions, deadline: Deadline): ConnectCallOptions {
  return { timeoutMs: deadline.remaining(), signal: options.signal, headers: options.headers };
}

function newIdempotencyKey(): string {
  return "contextd-ts-" + randomUUID().replaceAll("-", "");
}

/** The compile (a copy) with a random idempotency key on its commit when it has none. */
function keyedCompile(request: CompileRequestInit) {
  const keyed = clone(CompileRequestSchema, create(CompileRequestSchema, request));
  if (keyed.commit && keyed.commit.idempotencyKey === "") keyed.commit.idempotencyKey = newIdempotencyKey();
  return keyed;
}

/** The request side of a bidirectional stream: messages pushed while the responses are read. */
class Outbox<T> implements AsyncIterable<T> {
  private readonly queue: T[] = [];
  private closed = false;
  private wake: (() => void) | undefined;

  push(message: T): void {
    this.queue.push(message);
    this.wake?.();
  }

  close(): void {
    this.closed = true;
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T, void, undefined> {
    for (;;) {
      const next = this.queue.shift();
      if (next !== undefined) {
        yield next;
      } else if (this.closed) {
        return;
      } else {
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = undefined;
      }
    }
  }
}

/**
 * The rendered provider request body of a compile, parsed: what to send to the provider's API
 * (for OpenAI Chat, the `messages`, `tools`, ... of a chat completion request). Throws when the
 * compile rendered nothing (no `render` in the request).
 */
export function renderedBody<T = unknown>(result: CompileResult): T {
  if (result.rendered === undefined) throw new Error("contextd: the compile has no rendered body (set request.render)");
  return JSON.parse(new TextDecoder().decode(result.rendered.json)) as T;
}
