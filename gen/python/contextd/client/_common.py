"""Pieces shared by the sync and the asyncio client."""

from __future__ import annotations

import time
import uuid
from typing import Callable, Optional, Sequence, Tuple, Union

from contextd.v1 import compile_pb2, context_service_pb2, conversation_service_pb2, message_pb2

#: Where a sidecar listens unless configured otherwise.
DEFAULT_ADDRESS = "127.0.0.1:7420"


def keyed_commit(request: conversation_service_pb2.CommitRequest) -> conversation_service_pb2.CommitRequest:
    """The request with a random idempotency key when it has none, so that a retry after
    UNAVAILABLE can never apply the batch twice. The caller's message is not modified."""
    if request.idempotency_key:
        return request
    keyed = conversation_service_pb2.CommitRequest()
    keyed.CopyFrom(request)
    keyed.idempotency_key = _new_key()
    return keyed


def keyed_compile(request: compile_pb2.CompileRequest) -> compile_pb2.CompileRequest:
    """As keyed_commit, for a compile that commits its writeback."""
    if not request.HasField("commit") or request.commit.idempotency_key:
        return request
    keyed = compile_pb2.CompileRequest()
    keyed.CopyFrom(request)
    keyed.commit.idempotency_key = _new_key()
    return keyed


#: What a summarize callable returns: the summary message, or the summary and facts to remember.
SummaryAnswer = Union[message_pb2.Message, Tuple[message_pb2.Message, Sequence[str]]]

#: `summarize(messages, target_tokens)`: write a summary of `messages` (whole units of the oldest
#: history; never a split tool round, the open round, pending messages or the current turn; a
#: previous summary, when history starts with one, is `messages[0]`) in about `target_tokens`
#: tokens. The summary's role defaults to ASSISTANT, its id and provenance are filled in by contextd,
#: and it may not carry tool calls or results.
Summarize = Callable[[Sequence[message_pb2.Message], int], SummaryAnswer]


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


class Deadline:
    """One call's deadline across its retries; None = unbounded."""

    def __init__(self, timeout: Optional[float]) -> None:
        self._at = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> Optional[float]:
        """Seconds left (at least 0), or None when unbounded."""
        return None if self._at is None else max(self._at - time.monotonic(), 0.0)

    def allows(self, pause: float) -> bool:
        """Whether a pause of `pause` seconds still leaves time for another try."""
        return self._at is None or time.monotonic() + pause < self._at
