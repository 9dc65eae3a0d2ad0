"""The blocking client."""

from __future__ import annotations

import queue
import time
from types import TracebackType
from typing import Callable, Iterator, Optional, Sequence, Type, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from contextd.client._common import (
    DEFAULT_ADDRESS,
    DEFAULT_MAX_MESSAGE_BYTES,
    Deadline,
    Summarize,
    SummarizeWithEvidence,
    channel_credentials,
    channel_options,
    has_prompt,
    health_status_text,
    keyed_commit,
    keyed_rewind,
    keyed_compile,
    lean_commit,
    lean_compile,
    next_page_request,
    replay_with_prompt,
    session_answer,
    tail_request,
    turn_request,
    without_commit,
)
from contextd.client.errors import (
    ContextdError,
    DeadlineExceeded,
    OutcomeUnknown,
    Unavailable,
    VersionConflict,
    from_rpc_error,
    outcome_unknown,
    response_too_large,
)
from contextd.client.retry import DEFAULT_RETRY_POLICY, RetryPolicy
from contextd.v1 import (
    compile_pb2,
    context_service_pb2,
    context_service_pb2_grpc,
    conversation_service_pb2 as conversation_pb2,
    conversation_service_pb2_grpc,
    state_pb2,
    telemetry_pb2,
    telemetry_service_pb2,
    telemetry_service_pb2_grpc,
    usage_ledger_pb2,
)

Request = TypeVar("Request")
Response = TypeVar("Response")


class Client:
    """A blocking client of one contextd sidecar, safe to share between threads.

    Unary methods mirror the generated RPCs (same request and response messages) and add a
    deadline (`timeout` seconds, retries included; per call or the client's default), retries on
    UNAVAILABLE for calls that are safe to repeat, and exceptions per status code
    (`contextd.client.errors`). Use it as a context manager, or call `close()`.
    """

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        timeout: Optional[float] = 30.0,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        conflict_attempts: int = 10,
        channel: Optional[grpc.Channel] = None,
        max_receive_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_send_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        token: Optional[str] = None,
        tls: bool = False,
        ca_file: Optional[str] = None,
        cert_file: Optional[str] = None,
        key_file: Optional[str] = None,
    ) -> None:
        """Connects lazily to `address` ("host:port") over gRPC on HTTP/2, or uses `channel` (for
        interceptors). `token` is a bearer token for a sidecar started with
        --auth-tokens-file; `tls=True` speaks TLS verified against grpcio's default roots, `ca_file`
        (a PEM file) TLS verified against that CA; `cert_file` and `key_file` (PEM) present a client
        certificate to a sidecar started with --tls-client-ca (mutual TLS); without TLS a token is
        only sent to a loopback address. `conflict_attempts` bounds commit_with_retry.
        `max_receive_bytes` and `max_send_bytes` (default: the sidecar's 16 MiB plus the frame
        header) bound the messages of a channel the client creates; create a channel you pass with
        `options=contextd.client.channel_options(max_receive_bytes, max_send_bytes)`."""
        if channel is None:
            options = channel_options(max_receive_bytes, max_send_bytes)
            credentials = channel_credentials(token, tls, ca_file, cert_file, key_file)
            channel = (
                grpc.insecure_channel(address, options=options)
                if credentials is None
                else grpc.secure_channel(address, credentials, options=options)
            )
        elif token is not None or tls or ca_file is not None or cert_file is not None or key_file is not None:
            raise ValueError("token, tls, ca_file, cert_file and key_file configure a channel the client creates; give them to your channel instead")
        self._channel = channel
        self._timeout = timeout
        self._retry = retry
        self._conflict_attempts = max(conflict_attempts, 1)
        self._conversations = conversation_service_pb2_grpc.ConversationServiceStub(self._channel)
        self._contexts = context_service_pb2_grpc.ContextServiceStub(self._channel)
        self._telemetry = telemetry_service_pb2_grpc.TelemetryServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def close(self) -> None:
        """Closes the channel; streams still open end with CANCELLED."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.close()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Blocks until the sidecar reports SERVING (its store is usable), polling with the retry
        policy's backoff; raises DeadlineExceeded after `timeout` seconds. Agents call it once at
        start, since the sidecar may start after them."""
        deadline = Deadline(timeout)
        retry = 0
        last = ""
        while True:
            try:
                response, call = self._health.Check.with_call(health_pb2.HealthCheckRequest(), timeout=deadline.grpc_timeout())
                if response.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = health_status_text(response.status, call.initial_metadata())
            except grpc.RpcError as error:
                failure = from_rpc_error(error)
                # An attempt the overall deadline cut short says nothing new: keep what the sidecar
                # last answered (say, why it is NOT_SERVING).
                if not (isinstance(failure, DeadlineExceeded) and last):
                    last = str(failure)
            retry += 1
            pause = self._retry.backoff(retry)
            if not deadline.allows(pause):
                raise DeadlineExceeded(f"sidecar not ready after {timeout}s (last: {last})")
            time.sleep(pause)

    def get_state(
        self, request: conversation_pb2.GetStateRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.GetStateResponse:
        """Reads a conversation; an unknown one is an empty state at version 0."""
        return self._unary(self._conversations.GetState, request, True, timeout)

    def commit(
        self, request: conversation_pb2.CommitRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.CommitResponse:
        """Applies a batch of deltas atomically and returns the new version (the state too only
        with `include_state`). A stale expected version raises VersionConflict.

        A commit is never reported as failed when it may have applied. A request without an
        idempotency key is sent with a random one (the caller's message is not modified), and a
        commit whose outcome is unknown (UNAVAILABLE, DEADLINE_EXCEEDED, an answer over the receive
        limit) is sent again with the same key, so it applies at most once; the sidecar answers a
        repeat from the key's record (`replayed`). A retry after an answer over the receive limit
        asks for the version only. When the retries run out, OutcomeUnknown names the key to
        retry with."""
        keyed = keyed_commit(request)
        return self._keyed_write(self._conversations.Commit, keyed, keyed.idempotency_key, lean_commit, timeout)

    def commit_with_retry(
        self,
        conversation_id: str,
        apply: Callable[[state_pb2.ConversationState], Sequence[state_pb2.Delta]],
        *,
        timeout: Optional[float] = None,
        history_tail: Optional[int] = None,
    ) -> conversation_pb2.CommitResponse:
        """Reads the conversation, asks `apply` for the deltas to commit on top of that state, and
        commits them expecting the state's version. When another writer got there first it
        reloads and calls `apply` again, up to the client's conflict attempts, then raises the
        last VersionConflict. `apply` must be safe to call more than once and return at least
        one delta.

        With `history_tail=N` only what a writer of the tail needs is read, at any size of the
        conversation (where `get_state` refuses one over the message limit): `apply` gets the
        version, artifacts, experiences and tool definitions (`get_state` with
        `without_messages`) and, as its `history`, the last N history messages read at that
        version (`read_messages`); the other segments are left empty. 0 reads no messages."""
        conflict: Optional[VersionConflict] = None
        for attempt in range(1, self._conflict_attempts + 1):
            if conflict is not None:
                time.sleep(self._retry.backoff(attempt - 1))
            try:
                state = self._state_for_commit(conversation_id, history_tail, timeout)
                request = conversation_pb2.CommitRequest(
                    conversation_id=conversation_id, expected_version=state.version, deltas=apply(state)
                )
                return self.commit(request, timeout=timeout)
            except VersionConflict as error:
                conflict = error
        assert conflict is not None
        raise conflict

    def _state_for_commit(self, conversation_id: str, history_tail: Optional[int], timeout: Optional[float]) -> state_pb2.ConversationState:
        """The whole state, or (`history_tail`) the rest of it with the history's last messages at its version."""
        if history_tail is None:
            return self.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id), timeout=timeout).state
        state = self.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id, without_messages=True), timeout=timeout).state
        if history_tail > 0:
            # At the version just read: a commit in between is a VersionConflict, retried as a stale commit is.
            request = tail_request(conversation_id, history_tail, state.version)
            state.history.extend(message for page in self.message_pages(request, timeout=timeout) for message in page.messages)
        return state

    def clear(
        self, request: conversation_pb2.ClearRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.ClearResponse:
        """Empties a conversation. Not retried: clearing twice would advance the version twice."""
        return self._unary(self._conversations.Clear, request, False, timeout)

    def fork(
        self, request: conversation_pb2.ForkRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.ForkResponse:
        """Copies `conversation_id` at `at_version` (unset = its latest) into the new conversation
        `new_conversation_id`, as its version 1 with `forked_from` set; the source is not written.
        Not retried: a repeat of a fork that applied would raise for the id already in use."""
        return self._unary(self._conversations.Fork, request, False, timeout)

    def rewind(
        self, request: conversation_pb2.RewindRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.RewindResponse:
        """Commits a new version whose state is the state at `to_version` (`get_state` with
        `at_version` reads it), `expected_version` checked as a commit's (VersionConflict). Keyed
        and retried as `commit` is."""
        keyed = keyed_rewind(request)
        return self._keyed_write(self._conversations.Rewind, keyed, keyed.idempotency_key, lambda same: same, timeout)

    def list_conversations(
        self, request: conversation_pb2.ListConversationsRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.ListConversationsResponse:
        """Lists conversations, paged, by id or newest update first (`order`), optionally only those
        with `labels` or updated since `updated_since_unix_ms`; a page may be short with a token."""
        return self._unary(self._conversations.ListConversations, request, True, timeout)

    def delete_conversation(
        self, request: conversation_pb2.DeleteConversationRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.DeleteConversationResponse:
        """Deletes a conversation whole (with `expected_version`, only at that version:
        `VersionConflict` otherwise); it then reads as never written. Not retried."""
        return self._unary(self._conversations.DeleteConversation, request, False, timeout)

    def delete_conversations(
        self, request: conversation_pb2.DeleteConversationsRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.DeleteConversationsResponse:
        """Deletes one bounded page of the conversations under `prefix` (a tenant's:
        "<tenant>/"); call again with `next_page_token` until it is empty."""
        return self._unary(self._conversations.DeleteConversations, request, True, timeout)

    def export_conversations(
        self, request: conversation_pb2.ExportConversationsRequest
    ) -> Iterator[conversation_pb2.ExportConversationsResponse]:
        """Yields the states of the conversations under `prefix` in id order; after an error, a
        new call with the last `resume_token` received goes on from there."""
        call = self._conversations.ExportConversations(request)
        try:
            yield from call
        except grpc.RpcError as error:
            raise from_rpc_error(error) from error
        finally:
            call.cancel()

    def read_tool_result(
        self, request: conversation_pb2.ReadToolResultRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.ReadToolResultResponse:
        """Reads a slice of a stored tool result: what a model's `read_tool_result` call asks for
        after a compile sent the result as a preview (`CompileRequest.large_tool_results`)."""
        return self._unary(self._conversations.ReadToolResult, request, True, timeout)

    def read_whole_tool_result(self, conversation_id: str, tool_call_id: str, *, timeout: Optional[float] = None) -> str:
        """A stored tool result's whole text, read slice by slice (at most 1 MiB each; no slice
        splits a character)."""
        pieces: list[str] = []
        offset = 0
        while True:
            slice_ = self.read_tool_result(
                conversation_pb2.ReadToolResultRequest(conversation_id=conversation_id, tool_call_id=tool_call_id, offset=offset, max_bytes=1 << 20),
                timeout=timeout,
            )
            pieces.append(slice_.text)
            if slice_.next_offset >= slice_.total_bytes:
                return "".join(pieces)
            offset = slice_.next_offset

    def recall(self, request: conversation_pb2.RecallRequest, *, timeout: Optional[float] = None) -> conversation_pb2.RecallResponse:
        """Finds stored history messages by id or by a ranked text search, answered as a tool result
        text (`RecallResponse.text`) with the hits beside it. Retried on UNAVAILABLE like every read."""
        return self._unary(self._conversations.Recall, request, True, timeout)

    def answer_recall_tool_call(self, conversation_id: str, name: str, arguments_json: str, *, timeout: Optional[float] = None) -> str:
        """Answers a model's call of one of contextd's recall tools (`is_recall_tool(name)`; a compile
        with `recall_tools` adds them): the text to send back as that call's tool result, from one
        Recall call. Give the call's name and its arguments as the JSON text the provider returned;
        arguments the tool does not take raise `InvalidArgument` naming them."""
        request = conversation_pb2.RecallRequest(conversation_id=conversation_id, tool_call=conversation_pb2.RecallToolCall(name=name, arguments=arguments_json))
        return self.recall(request, timeout=timeout).text

    def read_messages(
        self, request: conversation_pb2.ReadMessagesRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.ReadMessagesResponse:
        """Reads one page of a window of a segment's messages: the last `request.last`, or the
        positions `start` to `end` (the whole segment when neither is set), at most `max_bytes`
        of messages a page (0 = 4 MiB; a larger message comes alone). Every page of a window is
        read at the first page's version; a version the sidecar no longer keeps is
        `VersionConflict`. Retried on UNAVAILABLE like every read; `message_pages` reads every
        page."""
        return self._unary(self._conversations.ReadMessages, request, True, timeout)

    def message_pages(
        self, request: conversation_pb2.ReadMessagesRequest, *, timeout: Optional[float] = None
    ) -> Iterator[conversation_pb2.ReadMessagesResponse]:
        """Every page of the window `request` names, in order, each at the first page's version
        (`request.page_token`, when set, starts there). `timeout` applies to each page. What
        reads a conversation larger than `get_state` can answer (over the message limit)."""
        page = self.read_messages(request, timeout=timeout)
        yield page
        while page.next_page_token:
            page = self.read_messages(next_page_request(request, page), timeout=timeout)
            yield page

    def compile(
        self, request: compile_pb2.CompileRequest, *, timeout: Optional[float] = None
    ) -> context_service_pb2.CompileResponse:
        """Compiles a prompt. A compile that commits (`commit`) is a write and is treated as
        `commit` is: a random idempotency key when it has none, and an unknown outcome retried with
        the same key (after an answer over the receive limit, without `include`). A compile that
        commits nothing is a read and is retried on UNAVAILABLE."""
        if not request.HasField("commit"):
            return self._unary(self._contexts.Compile, request, True, timeout)
        keyed = keyed_compile(request)
        return self._keyed_write(self._contexts.Compile, keyed, keyed.commit.idempotency_key, lean_compile, timeout)

    def turn(
        self,
        request: compile_pb2.CompileRequest,
        expected_version: int,
        deltas: Sequence[state_pb2.Delta],
        *,
        timeout: Optional[float] = None,
    ) -> compile_pb2.CompileResult:
        """One step of an agent loop in one RPC: commits `deltas` (what the agent produced since
        its last model call: the assistant's answer, tool results, the next user message) on top
        of `expected_version` and returns the compile of the state they produce, the context for
        the next model call. Deltas and compile are atomic: when the compile fails nothing is
        committed, and when the commit fails (VersionConflict for a stale version,
        InvalidArgument for an invalid delta) there is no result. The next turn's
        `expected_version` is the result's `committed_version`.

        `request` holds the compile options (budget, render, ...) and the conversation id; its
        `commit` is set here and the caller's message is not modified. The user's message goes in
        `deltas` (append_user), not in `current_turn`, which a retry would compile twice: ValueError.

        Like `compile` with `commit`, a turn is keyed and retried while its outcome is unknown; a
        retry whose first attempt committed returns the compile of that version (warning
        "idempotent_replay"). If the conversation moved on meanwhile, the conversation as it is
        now is compiled (without committing) so the result always has the prompt (`rendered`
        when `request.render` names a provider, `payload` beside it only with
        COMPILE_RESULT_PART_PAYLOAD in `include`; else `payload`); `committed_version` still says
        which version the deltas produced."""
        turn = turn_request(request, expected_version, deltas)
        result = self.compile(turn, timeout=timeout).result
        if has_prompt(result):
            return result
        current = self.compile(without_commit(turn), timeout=timeout).result
        return replay_with_prompt(result, current)

    def count_tokens(
        self, request: context_service_pb2.CountTokensRequest, *, timeout: Optional[float] = None
    ) -> context_service_pb2.CountTokensResponse:
        """Counts the tokens of messages with an estimator."""
        return self._unary(self._contexts.CountTokens, request, True, timeout)

    def report_usage(
        self, request: context_service_pb2.ReportUsageRequest, *, timeout: Optional[float] = None
    ) -> context_service_pb2.ReportUsageResponse:
        """Reports the provider's input token count for a compile, so later compiles with the same
        provider, model and estimator are budgeted with a corrected estimate: copy ``provider``,
        ``model``, ``estimator`` and ``estimated_tokens`` from ``result.calibration`` and set
        ``actual_input_tokens`` from the provider's usage (every input token, cached or not). With
        ``conversation_id`` the report is also recorded in the conversation's usage ledger
        (`get_usage`), which requires ``report_id`` (say, the provider's response id): such a report
        is retried, since the sidecar counts a report id once. Without them it is not retried: a
        repeated report would count twice."""
        identified = bool(request.conversation_id and request.report_id)
        return self._unary(self._contexts.ReportUsage, request, identified, timeout)

    def get_usage(self, conversation_id: str, *, timeout: Optional[float] = None) -> usage_ledger_pb2.GetUsageResponse:
        """Reads a conversation's usage ledger: the totals of every report recorded for it and its
        newest reports (the rest counted in the totals only, ``entries_rolled_up``)."""
        request = usage_ledger_pb2.GetUsageRequest(conversation_id=conversation_id)
        return self._unary(self._conversations.GetUsage, request, True, timeout)

    def list_tenant_usage(
        self, request: usage_ledger_pb2.ListTenantUsageRequest, *, timeout: Optional[float] = None
    ) -> usage_ledger_pb2.ListTenantUsageResponse:
        """Reads a tenant's usage totals and a page of its conversations' totals, by id
        (``next_page_token`` for the next page)."""
        return self._unary(self._conversations.ListTenantUsage, request, True, timeout)

    def render(
        self, request: context_service_pb2.RenderRequest, *, timeout: Optional[float] = None
    ) -> context_service_pb2.RenderResponse:
        """Renders a view of a stored or inline snapshot."""
        return self._unary(self._contexts.Render, request, True, timeout)

    def compile_stream(
        self,
        request: context_service_pb2.CompileStreamRequest,
        on_event: Optional[Callable[[telemetry_pb2.ObserverEvent], None]] = None,
        *,
        timeout: Optional[float] = None,
    ) -> compile_pb2.CompileResult:
        """Compiles like `compile`, calling `on_event` with each observer event as the engine
        emits it, and returns the result, which the server sends last. Not retried, since
        `on_event` may already have seen events."""
        call = self._contexts.CompileStream(request, timeout=self._timeout if timeout is None else timeout)
        try:
            for response in call:
                if response.HasField("result"):
                    return response.result
                if on_event is not None:
                    on_event(response.event)
        except grpc.RpcError as error:
            raise from_rpc_error(error) from error
        finally:
            call.cancel()
        raise ContextdError("compile stream ended without a result")

    def compile_session(
        self,
        request: compile_pb2.CompileRequest,
        summarize: Summarize,
        *,
        timeout: Optional[float] = None,
    ) -> compile_pb2.CompileResult:
        """Compiles over ContextService.CompileSession: whenever the budget asks for a summary
        (strategy SUMMARIZE, or `budget.auto_compact` when the conversation exceeds the window) it
        calls `summarize(messages, target_tokens)` and sends its answer (a summary message, or a
        `(summary, facts_to_remember)` tuple) back, then returns the result. With `commit` the
        summary is stored as a compact delta, and the facts as experiences, in the same atomic
        commit as the writeback (a random idempotency key is added when there is none).

        Not retried; `timeout` (seconds) bounds the whole session, and the client's default timeout
        does not apply, since summaries take as long as the model takes. The sidecar stops waiting
        for an answer after its --summarize-timeout-ms (DeadlineExceeded, nothing committed). An
        exception from `summarize` cancels the session and propagates."""
        return self.compile_session_with_evidence(
            request, lambda asked: summarize(list(asked.messages), asked.target_tokens), timeout=timeout
        )

    def compile_session_with_evidence(
        self,
        request: compile_pb2.CompileRequest,
        summarize: SummarizeWithEvidence,
        *,
        timeout: Optional[float] = None,
    ) -> compile_pb2.CompileResult:
        """As `compile_session`, for a summarizer that wants the template and the facts: it is
        called as `summarize(asked)` with the whole `SummarizeRequest` (`asked.messages`,
        `asked.target_tokens`, `asked.template`, `asked.facts`, `asked.facts_truncated`)."""
        answers: "queue.Queue[Optional[context_service_pb2.CompileSessionRequest]]" = queue.Queue()

        def requests() -> Iterator[context_service_pb2.CompileSessionRequest]:
            yield context_service_pb2.CompileSessionRequest(compile=keyed_compile(request))
            while True:
                answer = answers.get()
                if answer is None:
                    return
                yield answer

        call = self._contexts.CompileSession(requests(), timeout=timeout)
        try:
            for response in call:
                if response.HasField("summarize_request"):
                    asked = response.summarize_request
                    answers.put(session_answer(asked, summarize(asked)))
                elif response.HasField("result"):
                    return response.result
        except grpc.RpcError as error:
            raise from_rpc_error(error) from error
        finally:
            answers.put(None)
            call.cancel()
        raise ContextdError("compile session ended without a result")

    def watch(self, request: conversation_pb2.WatchRequest) -> Iterator[conversation_pb2.Change]:
        """Yields the committed changes of a conversation after `request.from_version`, in version
        order, then live changes until the iterator is closed. Heartbeats are consumed.

        When the stream breaks with UNAVAILABLE (a sidecar restart, a store failover) it is
        reopened after the last change yielded, so nothing is lost or repeated; the retry policy
        bounds consecutive failures. Other errors are raised."""
        from_version = request.from_version
        failures = 0
        while True:
            call = self._conversations.Watch(
                conversation_pb2.WatchRequest(conversation_id=request.conversation_id, from_version=from_version)
            )
            try:
                for response in call:
                    if response.HasField("change"):
                        failures = 0
                        from_version = response.change.version
                        yield response.change
                return
            except grpc.RpcError as error:
                failure = from_rpc_error(error)
                failures += 1
                if not isinstance(failure, Unavailable) or failures >= self._retry.max_attempts:
                    raise failure from error
            finally:
                call.cancel()
            time.sleep(self._retry.backoff(failures))

    def watch_events(
        self, request: telemetry_service_pb2.WatchEventsRequest
    ) -> Iterator[telemetry_service_pb2.WatchEventsResponse]:
        """Yields the observer events of every compile (of one conversation when
        `request.conversation_id` is set) until the iterator is closed. Each response's `dropped`
        counts events this subscriber lost before it by falling behind. Telemetry is not durable,
        so a broken stream is raised, not resumed."""
        call = self._telemetry.WatchEvents(request)
        try:
            yield from call
        except grpc.RpcError as error:
            raise from_rpc_error(error) from error
        finally:
            call.cancel()

    def _unary(
        self, method: Callable[..., Response], request: Request, retryable: bool, timeout: Optional[float]
    ) -> Response:
        deadline = Deadline(self._timeout if timeout is None else timeout)
        attempts = max(self._retry.max_attempts, 1) if retryable else 1
        for attempt in range(1, attempts + 1):
            try:
                return method(request, timeout=deadline.grpc_timeout())
            except grpc.RpcError as error:
                failure = from_rpc_error(error)
                pause = self._retry.backoff(attempt)
                if not isinstance(failure, Unavailable) or attempt == attempts or not deadline.allows(pause):
                    raise failure from error
            time.sleep(pause)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _keyed_write(
        self,
        method: Callable[..., Response],
        request: Request,
        key: str,
        lean: Callable[[Request], Request],
        timeout: Optional[float],
    ) -> Response:
        """Runs a write that carries idempotency key `key`, sending it again while its outcome is
        unknown and the retry policy and deadline allow; after an answer over the receive limit
        the retry is `lean(request)`, which asks for less."""
        deadline = Deadline(self._timeout if timeout is None else timeout)
        attempts = max(self._retry.max_attempts, 1)
        for attempt in range(1, attempts + 1):
            try:
                return method(request, timeout=deadline.grpc_timeout())
            except grpc.RpcError as error:
                failure = from_rpc_error(error)
                if not outcome_unknown(failure):
                    raise failure from error
                if attempt == attempts or deadline.remaining() == 0:
                    raise OutcomeUnknown(key, failure) from error
                if response_too_large(failure):
                    # Asking for less is what helps here, not waiting.
                    request = lean(request)
                    continue
                pause = self._retry.backoff(attempt)
                if not deadline.allows(pause):
                    raise OutcomeUnknown(key, failure) from error
            time.sleep(pause)
        raise AssertionError("unreachable: the last attempt returns or raises")
