"""The asyncio client, over grpc.aio."""

from __future__ import annotations

import asyncio
import inspect
from types import TracebackType
from typing import AsyncIterator, Awaitable, Callable, Optional, Sequence, Type, TypeVar, Union

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from contextd.client._common import (
    DEFAULT_ADDRESS,
    DEFAULT_MAX_MESSAGE_BYTES,
    Deadline,
    SummaryAnswer,
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
    message_pb2,
    state_pb2,
    telemetry_pb2,
    telemetry_service_pb2,
    telemetry_service_pb2_grpc,
    usage_ledger_pb2,
)

#: As `contextd.client.Client.compile_session`'s summarize, and it may be a coroutine function.
AsyncSummarize = Callable[
    [Sequence[message_pb2.Message], int], Union[SummaryAnswer, Awaitable[SummaryAnswer]]
]

#: As `contextd.client.Client.compile_session_with_evidence`'s summarize, and it may be a coroutine
#: function.
AsyncSummarizeWithEvidence = Callable[
    [context_service_pb2.SummarizeRequest], Union[SummaryAnswer, Awaitable[SummaryAnswer]]
]

Request = TypeVar("Request")
Response = TypeVar("Response")


class AsyncClient:
    """The asyncio twin of `contextd.client.Client`: the same methods, awaitable, and async
    iterators for the streams. Use it as an async context manager, or await `close()`."""

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        timeout: Optional[float] = 30.0,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        conflict_attempts: int = 10,
        channel: Optional[grpc.aio.Channel] = None,
        max_receive_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_send_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        token: Optional[str] = None,
        tls: bool = False,
        ca_file: Optional[str] = None,
        cert_file: Optional[str] = None,
        key_file: Optional[str] = None,
    ) -> None:
        """Connects lazily to `address` ("host:port") over gRPC on HTTP/2 cleartext, or uses
        `channel`. Create it inside the event loop that will use it. `token`, `tls`, `ca_file`,
        `cert_file`, `key_file` and the message size limits are as in `Client`."""
        if channel is None:
            options = channel_options(max_receive_bytes, max_send_bytes)
            credentials = channel_credentials(token, tls, ca_file, cert_file, key_file)
            channel = (
                grpc.aio.insecure_channel(address, options=options)
                if credentials is None
                else grpc.aio.secure_channel(address, credentials, options=options)
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

    async def close(self) -> None:
        """Closes the channel; streams still open end with CANCELLED."""
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        await self.close()

    async def wait_ready(self, timeout: float = 30.0) -> None:
        """As `Client.wait_ready`."""
        deadline = Deadline(timeout)
        retry = 0
        last = ""
        while True:
            try:
                call = self._health.Check(health_pb2.HealthCheckRequest(), timeout=deadline.grpc_timeout())
                response = await call
                if response.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = health_status_text(response.status, await call.initial_metadata())
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
            await asyncio.sleep(pause)

    async def get_state(
        self, request: conversation_pb2.GetStateRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.GetStateResponse:
        """As `Client.get_state`."""
        return await self._unary(self._conversations.GetState, request, True, timeout)

    async def commit(
        self, request: conversation_pb2.CommitRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.CommitResponse:
        """As `Client.commit`."""
        keyed = keyed_commit(request)
        return await self._keyed_write(self._conversations.Commit, keyed, keyed.idempotency_key, lean_commit, timeout)

    async def commit_with_retry(
        self,
        conversation_id: str,
        apply: Callable[[state_pb2.ConversationState], Sequence[state_pb2.Delta]],
        *,
        timeout: Optional[float] = None,
        history_tail: Optional[int] = None,
    ) -> conversation_pb2.CommitResponse:
        """As `Client.commit_with_retry` (`history_tail` too); `apply` is a plain (not async) function."""
        conflict: Optional[VersionConflict] = None
        for attempt in range(1, self._conflict_attempts + 1):
            if conflict is not None:
                await asyncio.sleep(self._retry.backoff(attempt - 1))
            try:
                state = await self._state_for_commit(conversation_id, history_tail, timeout)
                request = conversation_pb2.CommitRequest(
                    conversation_id=conversation_id, expected_version=state.version, deltas=apply(state)
                )
                return await self.commit(request, timeout=timeout)
            except VersionConflict as error:
                conflict = error
        assert conflict is not None
        raise conflict

    async def _state_for_commit(self, conversation_id: str, history_tail: Optional[int], timeout: Optional[float]) -> state_pb2.ConversationState:
        if history_tail is None:
            return (await self.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id), timeout=timeout)).state
        state = (await self.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id, without_messages=True), timeout=timeout)).state
        if history_tail > 0:
            request = tail_request(conversation_id, history_tail, state.version)
            state.history.extend([message async for page in self.message_pages(request, timeout=timeout) for message in page.messages])
        return state

    async def clear(
        self, request: conversation_pb2.ClearRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.ClearResponse:
        """As `Client.clear` (not retried)."""
        return await self._unary(self._conversations.Clear, request, False, timeout)

    async def fork(
        self, request: conversation_pb2.ForkRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.ForkResponse:
        """As `Client.fork` (not retried)."""
        return await self._unary(self._conversations.Fork, request, False, timeout)

    async def rewind(
        self, request: conversation_pb2.RewindRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.RewindResponse:
        """As `Client.rewind`."""
        keyed = keyed_rewind(request)
        return await self._keyed_write(self._conversations.Rewind, keyed, keyed.idempotency_key, lambda same: same, timeout)

    async def list_conversations(
        self, request: conversation_pb2.ListConversationsRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.ListConversationsResponse:
        """As `Client.list_conversations`."""
        return await self._unary(self._conversations.ListConversations, request, True, timeout)

    async def delete_conversation(
        self, request: conversation_pb2.DeleteConversationRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.DeleteConversationResponse:
        """As `Client.delete_conversation`."""
        return await self._unary(self._conversations.DeleteConversation, request, False, timeout)

    async def delete_conversations(
        self, request: conversation_pb2.DeleteConversationsRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.DeleteConversationsResponse:
        """As `Client.delete_conversations`."""
        return await self._unary(self._conversations.DeleteConversations, request, True, timeout)

    async def export_conversations(
        self, request: conversation_pb2.ExportConversationsRequest
    ) -> AsyncIterator[conversation_pb2.ExportConversationsResponse]:
        """As `Client.export_conversations`."""
        call = self._conversations.ExportConversations(request)
        try:
            async for response in call:
                yield response
        except grpc.RpcError as error:
            raise from_rpc_error(error) from error
        finally:
            call.cancel()

    async def read_tool_result(
        self, request: conversation_pb2.ReadToolResultRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.ReadToolResultResponse:
        """As `Client.read_tool_result`."""
        return await self._unary(self._conversations.ReadToolResult, request, True, timeout)

    async def read_whole_tool_result(self, conversation_id: str, tool_call_id: str, *, timeout: Optional[float] = None) -> str:
        """As `Client.read_whole_tool_result`."""
        pieces: list[str] = []
        offset = 0
        while True:
            slice_ = await self.read_tool_result(
                conversation_pb2.ReadToolResultRequest(conversation_id=conversation_id, tool_call_id=tool_call_id, offset=offset, max_bytes=1 << 20),
                timeout=timeout,
            )
            pieces.append(slice_.text)
            if slice_.next_offset >= slice_.total_bytes:
                return "".join(pieces)
            offset = slice_.next_offset

    async def recall(self, request: conversation_pb2.RecallRequest, *, timeout: Optional[float] = None) -> conversation_pb2.RecallResponse:
        """As `Client.recall`."""
        return await self._unary(self._conversations.Recall, request, True, timeout)

    async def answer_recall_tool_call(self, conversation_id: str, name: str, arguments_json: str, *, timeout: Optional[float] = None) -> str:
        """As `Client.answer_recall_tool_call`."""
        request = conversation_pb2.RecallRequest(conversation_id=conversation_id, tool_call=conversation_pb2.RecallToolCall(name=name, arguments=arguments_json))
        return (await self.recall(request, timeout=timeout)).text

    async def read_messages(
        self, request: conversation_pb2.ReadMessagesRequest, *, timeout: Optional[float] = None
    ) -> conversation_pb2.ReadMessagesResponse:
        """As `Client.read_messages`."""
        return await self._unary(self._conversations.ReadMessages, request, True, timeout)

    async def message_pages(
        self, request: conversation_pb2.ReadMessagesRequest, *, timeout: Optional[float] = None
    ) -> AsyncIterator[conversation_pb2.ReadMessagesResponse]:
        """As `Client.message_pages`: `async for page in client.message_pages(request)`."""
        page = await self.read_messages(request, timeout=timeout)
        yield page
        while page.next_page_token:
            page = await self.read_messages(next_page_request(request, page), timeout=timeout)
            yield page

    async def compile(
        self, request: compile_pb2.CompileRequest, *, timeout: Optional[float] = None
    ) -> context_service_pb2.CompileResponse:
        """As `Client.compile`."""
        if not request.HasField("commit"):
            return await self._unary(self._contexts.Compile, request, True, timeout)
        keyed = keyed_compile(request)
        return await self._keyed_write(self._contexts.Compile, keyed, keyed.commit.idempotency_key, lean_compile, timeout)

    async def turn(
        self,
        request: compile_pb2.CompileRequest,
        expected_version: int,
        deltas: Sequence[state_pb2.Delta],
        *,
        timeout: Optional[float] = None,
    ) -> compile_pb2.CompileResult:
        """As `Client.turn`."""
        turn = turn_request(request, expected_version, deltas)
        result = (await self.compile(turn, timeout=timeout)).result
        if has_prompt(result):
            return result
        current = (await self.compile(without_commit(turn), timeout=timeout)).result
        return replay_with_prompt(result, current)

    async def count_tokens(
        self, request: context_service_pb2.CountTokensRequest, *, timeout: Optional[float] = None
    ) -> context_service_pb2.CountTokensResponse:
        """As `Client.count_tokens`."""
        return await self._unary(self._contexts.CountTokens, request, True, timeout)

    async def report_usage(
        self, request: context_service_pb2.ReportUsageRequest, *, timeout: Optional[float] = None
    ) -> context_service_pb2.ReportUsageResponse:
        """As `Client.report_usage`."""
        identified = bool(request.conversation_id and request.report_id)
        return await self._unary(self._contexts.ReportUsage, request, identified, timeout)

    async def get_usage(self, conversation_id: str, *, timeout: Optional[float] = None) -> usage_ledger_pb2.GetUsageResponse:
        """As `Client.get_usage`."""
        request = usage_ledger_pb2.GetUsageRequest(conversation_id=conversation_id)
        return await self._unary(self._conversations.GetUsage, request, True, timeout)

    async def list_tenant_usage(
        self, request: usage_ledger_pb2.ListTenantUsageRequest, *, timeout: Optional[float] = None
    ) -> usage_ledger_pb2.ListTenantUsageResponse:
        """As `Client.list_tenant_usage`."""
        return await self._unary(self._conversations.ListTenantUsage, request, True, timeout)

    async def render(
        self, request: context_service_pb2.RenderRequest, *, timeout: Optional[float] = None
    ) -> context_service_pb2.RenderResponse:
        """As `Client.render`."""
        return await self._unary(self._contexts.Render, request, True, timeout)

    async def compile_stream(
        self,
        request: context_service_pb2.CompileStreamRequest,
        on_event: Optional[Callable[[telemetry_pb2.ObserverEvent], None]] = None,
        *,
        timeout: Optional[float] = None,
    ) -> compile_pb2.CompileResult:
        """As `Client.compile_stream`."""
        call = self._contexts.CompileStream(request, timeout=self._timeout if timeout is None else timeout)
        try:
            async for response in call:
                if response.HasField("result"):
                    return response.result
                if on_event is not None:
                    on_event(response.event)
        except grpc.RpcError as error:
            raise from_rpc_error(error) from error
        finally:
            call.cancel()
        raise ContextdError("compile stream ended without a result")

    async def compile_session(
        self,
        request: compile_pb2.CompileRequest,
        summarize: AsyncSummarize,
        *,
        timeout: Optional[float] = None,
    ) -> compile_pb2.CompileResult:
        """As `Client.compile_session`; `summarize` may be a plain or a coroutine function."""
        return await self.compile_session_with_evidence(
            request, lambda asked: summarize(list(asked.messages), asked.target_tokens), timeout=timeout
        )

    async def compile_session_with_evidence(
        self,
        request: compile_pb2.CompileRequest,
        summarize: AsyncSummarizeWithEvidence,
        *,
        timeout: Optional[float] = None,
    ) -> compile_pb2.CompileResult:
        """As `Client.compile_session_with_evidence`; `summarize` may be a plain or a coroutine
        function."""
        call = self._contexts.CompileSession(timeout=timeout)
        try:
            await call.write(context_service_pb2.CompileSessionRequest(compile=keyed_compile(request)))
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    break
                if response.HasField("summarize_request"):
                    asked = response.summarize_request
                    answer = summarize(asked)
                    if inspect.isawaitable(answer):
                        answer = await answer
                    await call.write(session_answer(asked, answer))
                elif response.HasField("result"):
                    await call.done_writing()
                    return response.result
        except grpc.RpcError as error:
            raise from_rpc_error(error) from error
        finally:
            call.cancel()
        raise ContextdError("compile session ended without a result")

    async def watch(self, request: conversation_pb2.WatchRequest) -> AsyncIterator[conversation_pb2.Change]:
        """As `Client.watch`: resumes after the last change on UNAVAILABLE."""
        from_version = request.from_version
        failures = 0
        while True:
            call = self._conversations.Watch(
                conversation_pb2.WatchRequest(conversation_id=request.conversation_id, from_version=from_version)
            )
            try:
                async for response in call:
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
            await asyncio.sleep(self._retry.backoff(failures))

    async def watch_events(
        self, request: telemetry_service_pb2.WatchEventsRequest
    ) -> AsyncIterator[telemetry_service_pb2.WatchEventsResponse]:
        """As `Client.watch_events`."""
        call = self._telemetry.WatchEvents(request)
        try:
            async for response in call:
                yield response
        except grpc.RpcError as error:
            raise from_rpc_error(error) from error
        finally:
            call.cancel()

    async def _unary(
        self,
        method: Callable[..., Awaitable[Response]],
        request: Request,
        retryable: bool,
        timeout: Optional[float],
    ) -> Response:
        deadline = Deadline(self._timeout if timeout is None else timeout)
        attempts = max(self._retry.max_attempts, 1) if retryable else 1
        for attempt in range(1, attempts + 1):
            try:
                return await method(request, timeout=deadline.grpc_timeout())
            except grpc.RpcError as error:
                failure = from_rpc_error(error)
                pause = self._retry.backoff(attempt)
                if not isinstance(failure, Unavailable) or attempt == attempts or not deadline.allows(pause):
                    raise failure from error
            await asyncio.sleep(pause)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _keyed_write(
        self,
        method: Callable[..., Awaitable[Response]],
        request: Request,
        key: str,
        lean: Callable[[Request], Request],
        timeout: Optional[float],
    ) -> Response:
        """As `Client._keyed_write`."""
        deadline = Deadline(self._timeout if timeout is None else timeout)
        attempts = max(self._retry.max_attempts, 1)
        for attempt in range(1, attempts + 1):
            try:
                return await method(request, timeout=deadline.grpc_timeout())
            except grpc.RpcError as error:
                failure = from_rpc_error(error)
                if not outcome_unknown(failure):
                    raise failure from error
                if attempt == attempts or deadline.remaining() == 0:
                    raise OutcomeUnknown(key, failure) from error
                if response_too_large(failure):
                    request = lean(request)
                    continue
                pause = self._retry.backoff(attempt)
                if not deadline.allows(pause):
                    raise OutcomeUnknown(key, failure) from error
            await asyncio.sleep(pause)
        raise AssertionError("unreachable: the last attempt returns or raises")
