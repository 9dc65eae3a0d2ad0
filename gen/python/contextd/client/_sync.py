"""The blocking client."""

from __future__ import annotations

import queue
import time
from types import TracebackType
from typing import Callable, Iterator, Optional, Sequence, Type, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from contextd.client._common import DEFAULT_ADDRESS, Deadline, Summarize, keyed_commit, keyed_compile, session_answer
from contextd.client.errors import ContextdError, DeadlineExceeded, Unavailable, VersionConflict, from_rpc_error
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
    ) -> None:
        """Connects lazily to `address` ("host:port") over gRPC on HTTP/2 cleartext, or uses
        `channel` (for TLS or interceptors). `conflict_attempts` bounds commit_with_retry."""
        self._channel = channel if channel is not None else grpc.insecure_channel(address)
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
        while True:
            try:
                response = self._health.Check(health_pb2.HealthCheckRequest(), timeout=deadline.remaining())
                if response.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = f"health is {health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)}"
            except grpc.RpcError as error:
                last = str(from_rpc_error(error))
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
        """Applies a batch of deltas atomically. A request without an idempotency key is sent with
        a random one, so a retry after UNAVAILABLE never applies it twice. A stale expected
        version raises VersionConflict."""
        return self._unary(self._conversations.Commit, keyed_commit(request), True, timeout)

    def commit_with_retry(
        self,
        conversation_id: str,
        apply: Callable[[state_pb2.ConversationState], Sequence[state_pb2.Delta]],
        *,
        timeout: Optional[float] = None,
    ) -> conversation_pb2.CommitResponse:
        """Reads the conversation, asks `apply` for the deltas to commit on top of that state, and
        commits them expecting the state's version. When another writer got there first it
        reloads and calls `apply` again, up to the client's conflict attempts, then raises the
        last VersionConflict. `apply` must be safe to call more than once and return at least
        one delta."""
        conflict: Optional[VersionConflict] = None
        for attempt in range(1, self._conflict_attempts + 1):
            if conflict is not None:
                time.sleep(self._retry.backoff(attempt - 1))
            state = self.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id), timeout=timeout).state
            request = conversation_pb2.CommitRequest(
                conversation_id=conversation_id, expected_version=state.version, deltas=apply(state)
            )
            try:
                return self.commit(request, timeout=timeout)
            except VersionConflict as error:
                conflict = error
        assert conflict is not None
        raise conflict

    def clear(
        self, request: conversation_pb2.ClearRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.ClearResponse:
        """Empties a conversation. Not retried: clearing twice would advance the version twice."""
        return self._unary(self._conversations.Clear, request, False, timeout)

    def list_conversations(
        self, request: conversation_pb2.ListConversationsRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.ListConversationsResponse:
        """Lists conversations, paged, ordered by id."""
        return self._unary(self._conversations.ListConversations, request, True, timeout)

    def compile(
        self, request: compile_pb2.CompileRequest, *, timeout: Optional[float] = None
    ) -> context_service_pb2.CompileResponse:
        """Compiles a prompt. A compile that commits and has no idempotency key gets a random
        one, as in commit, so it too is safe to retry."""
        return self._unary(self._contexts.Compile, keyed_compile(request), True, timeout)

    def count_tokens(
        self, request: context_service_pb2.CountTokensRequest, *, timeout: Optional[float] = None
    ) -> context_service_pb2.CountTokensResponse:
        """Counts the tokens of messages with an estimator."""
        return self._unary(self._contexts.CountTokens, request, True, timeout)

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
                    answers.put(session_answer(asked, summarize(list(asked.messages), asked.target_tokens)))
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
                return method(request, timeout=deadline.remaining())
            except grpc.RpcError as error:
                failure = from_rpc_error(error)
                pause = self._retry.backoff(attempt)
                if not isinstance(failure, Unavailable) or attempt == attempts or not deadline.allows(pause):
                    raise failure from error
            time.sleep(pause)
        raise AssertionError("unreachable: the last attempt returns or raises")
