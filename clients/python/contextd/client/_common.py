"""Pieces shared by the sync and the asyncio client."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple, Union

import grpc
from grpc_health.v1 import health_pb2

from contextd.v1 import compile_pb2, context_service_pb2, conversation_service_pb2, message_pb2, state_pb2

#: Where a sidecar listens unless configured otherwise.
DEFAULT_ADDRESS = "127.0.0.1:7420"

#: The largest message a client sends or receives unless configured otherwise: the sidecar's
#: default --max-request-bytes (16 MiB) plus the 5-byte gRPC frame header. grpcio's own default
#: receive limit, 4 MiB, is smaller than a sidecar answers for a long conversation, and a commit
#: whose answer is refused for its size has still been applied.
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024 + 5


def channel_options(max_receive_bytes: int, max_send_bytes: int) -> List[Tuple[str, int]]:
    """grpcio channel options for the clients' message size limits."""
    return [("grpc.max_receive_message_length", max_receive_bytes), ("grpc.max_send_message_length", max_send_bytes)]


def channel_credentials(
    token: Optional[str], tls: bool, ca_file: Optional[str], cert_file: Optional[str] = None, key_file: Optional[str] = None
) -> Optional[grpc.ChannelCredentials]:
    """The credentials of a channel the client creates; None for plain cleartext.

    TLS (`tls=True`, or `ca_file`) verifies the server against the PEM certificates in `ca_file`,
    or grpcio's default roots without it (its bundled list, or the file named by
    GRPC_DEFAULT_SSL_ROOTS_FILE_PATH). A `token` is sent as "authorization: Bearer <token>" with
    every call; without TLS it is sent in cleartext, which grpcio allows to a loopback address only
    (a sidecar next to the agent). `cert_file` and `key_file` (PEM, both or neither) are the client
    certificate a sidecar started with --tls-client-ca requires (mutual TLS); they imply TLS."""
    if (cert_file is None) != (key_file is None):
        raise ValueError("cert_file and key_file go together: the client certificate and its private key")
    if ca_file is not None or cert_file is not None:
        tls = True
    if not tls and token is None:
        return None
    if tls:
        roots = Path(ca_file).read_bytes() if ca_file is not None else None
        transport = grpc.ssl_channel_credentials(
            root_certificates=roots,
            private_key=Path(key_file).read_bytes() if key_file is not None else None,
            certificate_chain=Path(cert_file).read_bytes() if cert_file is not None else None,
        )
    else:
        transport = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    if token is None:
        return transport
    return grpc.composite_channel_credentials(transport, grpc.access_token_call_credentials(token))


HEALTH_REASON_HEADER = "contextd-health-reason"


def health_status_text(status: int, metadata: Optional[Sequence[Tuple[str, Union[str, bytes]]]]) -> str:
    """How wait_ready describes a health answer that is not SERVING: the status and, when the
    sidecar says why (its contextd-health-reason header, e.g. the store's connection error), the
    reason, so that a readiness timeout names its cause."""
    text = f"health is {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}"
    reasons = [value if isinstance(value, str) else value.decode("utf-8", "replace") for key, value in (metadata or ()) if key == HEALTH_REASON_HEADER]
    return f"{text}: {'; '.join(reasons)}" if reasons else text


def keyed_commit(request: conversation_service_pb2.CommitRequest) -> conversation_service_pb2.CommitRequest:
    """The request with a random idempotency key when it has none, so that a retry after
    UNAVAILABLE can never apply the batch twice. The caller's message is not modified."""
    if request.idempotency_key:
        return request
    keyed = conversation_service_pb2.CommitRequest()
    keyed.CopyFrom(request)
    keyed.idempotency_key = _new_key()
    return keyed


def keyed_rewind(request: conversation_service_pb2.RewindRequest) -> conversation_service_pb2.RewindRequest:
    """As keyed_commit, for a rewind."""
    if request.idempotency_key:
        return request
    keyed = conversation_service_pb2.RewindRequest()
    keyed.CopyFrom(request)
    keyed.idempotency_key = _new_key()
    return keyed


def keyed_compile(request: compile_pb2.CompileRequest) -> compile_pb2.CompileRequest:
    """As keyed_commit, for a compile that commits (its deltas and writeback)."""
    if not request.HasField("commit") or request.commit.idempotency_key:
        return request
    keyed = compile_pb2.CompileRequest()
    keyed.CopyFrom(request)
    keyed.commit.idempotency_key = _new_key()
    return keyed


def lean_commit(request: conversation_service_pb2.CommitRequest) -> conversation_service_pb2.CommitRequest:
    """The commit asking for the version only, for a retry after an answer over the receive limit
    (`include_state` is not part of what the idempotency key must match)."""
    if not request.include_state:
        return request
    lean = conversation_service_pb2.CommitRequest()
    lean.CopyFrom(request)
    lean.include_state = False
    return lean


def lean_compile(request: compile_pb2.CompileRequest) -> compile_pb2.CompileRequest:
    """The compile without `include`, as lean_commit (`include` is not part of what the key must
    match either)."""
    if not request.include:
        return request
    lean = compile_pb2.CompileRequest()
    lean.CopyFrom(request)
    del lean.include[:]
    return lean


def turn_request(
    request: compile_pb2.CompileRequest, expected_version: int, deltas: Sequence[state_pb2.Delta]
) -> compile_pb2.CompileRequest:
    """The compile of one agent turn: `request` (not modified) committing `deltas` on top of
    `expected_version`, keyed."""
    if not request.conversation_id:
        raise ValueError("turn needs request.conversation_id (a turn commits to a stored conversation)")
    if request.HasField("current_turn"):
        raise ValueError("turn takes the user's message as a delta (append_user), not as request.current_turn")
    turn = compile_pb2.CompileRequest()
    turn.CopyFrom(request)
    key = request.commit.idempotency_key
    turn.commit.CopyFrom(compile_pb2.CommitOptions(expected_version=expected_version, deltas=deltas, idempotency_key=key))
    return keyed_compile(turn)


def without_commit(request: compile_pb2.CompileRequest) -> compile_pb2.CompileRequest:
    """The compile as a read: the same request without `commit`."""
    read = compile_pb2.CompileRequest()
    read.CopyFrom(request)
    read.ClearField("commit")
    return read


def has_prompt(result: compile_pb2.CompileResult) -> bool:
    """Whether a compile result carries the prompt: `rendered` when the request rendered for a
    provider (`payload` is then sent only with COMPILE_RESULT_PART_PAYLOAD), else `payload`. A
    replayed turn whose conversation moved on carries neither."""
    return result.HasField("rendered") or result.HasField("payload")


def replay_with_prompt(replayed: compile_pb2.CompileResult, current: compile_pb2.CompileResult) -> compile_pb2.CompileResult:
    """A compile of the conversation as it is now, carrying what the replayed turn committed."""
    current.committed_version = replayed.committed_version
    warnings = list(replayed.warnings) + list(current.warnings)
    del current.warnings[:]
    current.warnings.extend(warnings)
    return current


#: What a summarize callable returns: the summary message, or the summary and facts to remember.
SummaryAnswer = Union[message_pb2.Message, Tuple[message_pb2.Message, Sequence[str]]]

#: `summarize(messages, target_tokens)`: write a summary of `messages` (whole units of the oldest
#: history; never a split tool round, the open round, pending messages or the current turn; a
#: previous summary, when history starts with one, is `messages[0]`) in about `target_tokens`
#: tokens. The summary's role defaults to ASSISTANT, its id and provenance are filled in by contextd,
#: and it may not carry tool calls or results.
Summarize = Callable[[Sequence[message_pb2.Message], int], SummaryAnswer]

#: `summarize(asked)`: as `Summarize`, given the whole `SummarizeRequest`: `asked.messages` and
#: `asked.target_tokens`, and what the summary should keep: `asked.template` (the sections a summary
#: should have — goal, decisions, open questions, files, commands, errors — and the same as prompt
#: text in `asked.template.text`), `asked.facts` (the file paths, URLs, commands, error messages,
#: tool names and ids found in the messages, each once with the id of the message it first appears
#: in, to be kept word for word) and `asked.facts_truncated` (a bound left some facts out).
SummarizeWithEvidence = Callable[[context_service_pb2.SummarizeRequest], SummaryAnswer]


def session_answer(
    asked: context_service_pb2.SummarizeRequest, answer: SummaryAnswer
) -> context_service_pb2.CompileSessionRequest:
    """The session message answering `asked` with a summarize callable's answer."""
    summary, facts = (answer, ()) if isinstance(answer, message_pb2.Message) else answer
    return context_service_pb2.CompileSessionRequest(
        summarize_response=context_service_pb2.SummarizeResponse(
            request_id=asked.request_id, summary=summary, remember=list(facts)
        )
    )


def _new_key() -> str:
    return "contextd-py-" + uuid.uuid4().hex


# The wall clock as it was when the client was imported. grpcio turns a call's timeout into a
# deadline with `time.time()` (grpc/_channel.py, grpc/aio/_utils.py) and its core compares that with
# the real clock, so code that replaces `time.time` process-wide (a test's monkeypatch, mock.patch or
# freezegun; the Agents SDK's own tests do) would move every deadline by the difference.
_WALL_CLOCK = time.time


def grpc_timeout(seconds: Optional[float]) -> Optional[float]:
    """The timeout to give grpcio so that its deadline is `seconds` from now on the real clock.
    While `time.time` is the real one it is `seconds`; while something has replaced it, the
    replacement is read once and its distance from the real clock added, so a frozen or shifted
    clock neither expires a call at once nor lets it run unbounded."""
    replaced = time.time
    if seconds is None or replaced is _WALL_CLOCK:
        return seconds
    return seconds + (_WALL_CLOCK() - float(replaced()))


class Deadline:
    """One call's deadline across its retries, on the monotonic clock; None = unbounded."""

    def __init__(self, timeout: Optional[float]) -> None:
        self._at = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> Optional[float]:
        """Seconds left (at least 0), or None when unbounded."""
        return None if self._at is None else max(self._at - time.monotonic(), 0.0)

    def grpc_timeout(self) -> Optional[float]:
        """`remaining()` as the timeout of a grpcio call (`grpc_timeout`)."""
        return grpc_timeout(self.remaining())

    def allows(self, pause: float) -> bool:
        """Whether a pause of `pause` seconds still leaves time for another try."""
        return self._at is None or time.monotonic() + pause < self._at


def next_page_request(
    first: conversation_service_pb2.ReadMessagesRequest, page: conversation_service_pb2.ReadMessagesResponse
) -> conversation_service_pb2.ReadMessagesRequest:
    """The request for the page after `page` of the window `first` named: the token carries the
    window and its version, so only the conversation and the page bound go with it."""
    return conversation_service_pb2.ReadMessagesRequest(
        conversation_id=first.conversation_id, max_bytes=first.max_bytes, page_token=page.next_page_token
    )


def tail_request(conversation_id: str, last: int, version: int) -> conversation_service_pb2.ReadMessagesRequest:
    """The history's last `last` messages at `version` (what `commit_with_retry(history_tail=...)` reads)."""
    return conversation_service_pb2.ReadMessagesRequest(
        conversation_id=conversation_id, segment=state_pb2.SEGMENT_HISTORY, last=min(last, 2**32 - 1), version=version
    )


RECALL_TOOL_NAMES: tuple[str, ...] = ("contextd_recall_message", "contextd_search_history")
"""The tools a compile with `recall_tools` adds; `Client.answer_recall_tool_call` answers their calls."""


def is_recall_tool(name: str) -> bool:
    """Whether a model's tool call is one of contextd's recall tools."""
    return name in RECALL_TOOL_NAMES
