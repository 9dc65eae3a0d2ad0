"""Pieces shared by the sync and the asyncio client."""

from __future__ import annotations

import time
import uuid
from typing import Optional

from contextd.v1 import compile_pb2, conversation_service_pb2

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
