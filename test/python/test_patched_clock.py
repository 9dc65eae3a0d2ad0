"""Calls keep their deadlines on the real clock while something has replaced `time.time`
process-wide, as the Agents SDK's compaction tests do (`monkeypatch.setattr(
"cryptography.fernet.time.time", lambda: 1000)`): grpcio turns a timeout into a deadline with
`time.time()`, so without `grpc_timeout` every call under a clock frozen in 1970 failed at once
with DEADLINE_EXCEEDED, and one under a clock far ahead would have run unbounded."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid

import pytest

from contextd.client import AsyncClient, Client, DeadlineExceeded, RetryPolicy
from contextd.client._common import grpc_timeout
from contextd.client.builders import append_user, user_text
from contextd.v1 import conversation_service_pb2 as conversation_pb2

_REAL = time.time


def test_grpc_timeout_is_the_timeout_on_the_real_clock_and_adds_back_a_replaced_clocks_offset(monkeypatch):
    assert grpc_timeout(None) is None
    assert grpc_timeout(5.0) == 5.0
    monkeypatch.setattr(time, "time", lambda: 1000.0)
    # grpcio's deadline is time.time() + timeout: 1000 + that is 5 s from now on the real clock.
    assert abs(1000.0 + grpc_timeout(5.0) - (_REAL() + 5.0)) < 1.0
    assert grpc_timeout(None) is None
    ahead = _REAL() + 10**6
    monkeypatch.setattr(time, "time", lambda: ahead)
    assert abs(ahead + grpc_timeout(5.0) - (_REAL() + 5.0)) < 1.0


@pytest.mark.parametrize("clock", ["1970", "far ahead"])
def test_calls_with_timeouts_succeed_under_a_replaced_clock(sidecar, monkeypatch, clock):
    conversation_id = f"patched-clock-{uuid.uuid4().hex}"
    fixed = 1000.0 if clock == "1970" else _REAL() + 10**6
    with Client(sidecar.address, timeout=10.0) as client:
        monkeypatch.setattr(time, "time", lambda: fixed)
        client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, deltas=[append_user(user_text("hello"))]))
        assert len(client.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id), timeout=5.0).state.history) == 1

    async def over_async() -> int:
        async with AsyncClient(sidecar.address, timeout=10.0) as async_client:
            page = await async_client.read_messages(conversation_pb2.ReadMessagesRequest(conversation_id=conversation_id, last=1), timeout=5.0)
            return len(page.messages)

    assert asyncio.run(asyncio.wait_for(over_async(), timeout=30)) == 1


def test_a_deadline_still_ends_a_call_that_gets_no_answer_under_a_clock_far_ahead(monkeypatch):
    # A listener that never speaks HTTP/2: the call can only end by its deadline.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        ahead = _REAL() + 10**6
        with Client(address, retry=RetryPolicy(max_attempts=1)) as client:
            monkeypatch.setattr(time, "time", lambda: ahead)
            with pytest.raises(DeadlineExceeded):
                client.get_state(conversation_pb2.GetStateRequest(conversation_id="never"), timeout=1.0)
