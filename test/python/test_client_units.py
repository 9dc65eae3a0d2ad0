"""Client pieces that need no server: error mapping, builders, backoff."""

import grpc
import pytest

from contextd.client import (
    InvalidArgument,
    RetryPolicy,
    ToolRound,
    Unavailable,
    VersionConflict,
    error_payload,
    text_payload,
    tool_call,
)
from contextd.client.errors import CURRENT_VERSION_TRAILER, Internal, from_status
from contextd.v1 import message_pb2


def test_each_code_has_its_exception():
    assert isinstance(from_status(grpc.StatusCode.INVALID_ARGUMENT, "deltas: empty", None), InvalidArgument)
    assert isinstance(from_status(grpc.StatusCode.UNAVAILABLE, "store down", None), Unavailable)
    other = from_status(grpc.StatusCode.DATA_LOSS, "lost", None)
    assert isinstance(other, Internal) and other.grpc_code == grpc.StatusCode.DATA_LOSS
    assert from_status(grpc.StatusCode.NOT_FOUND, "no such conversation", None).message == "no such conversation"


def test_version_conflict_prefers_the_trailer_then_the_message():
    trailer = [("other", "1"), (CURRENT_VERSION_TRAILER, "12")]
    conflict = from_status(grpc.StatusCode.ABORTED, "expected version 3, current version 11", trailer)
    assert isinstance(conflict, VersionConflict) and conflict.current_version == 12
    assert from_status(grpc.StatusCode.ABORTED, "expected version 3, current version 11", ()).current_version == 11
    assert from_status(grpc.StatusCode.ABORTED, "stale write", None).current_version is None


def test_tool_round_orders_results_by_call():
    round_ = ToolRound("checking both", tool_call("call_a", "weather", '{"city":"Oslo"}'), tool_call("call_b", "time", "{}"))
    round_.answer("call_b", text_payload("12:00")).answer("call_a", error_payload("timeout", "no answer"), is_error=True)
    delta = round_.delta().append_tool_round
    assert [part.WhichOneof("kind") for part in delta.assistant.parts] == ["text", "tool_call", "tool_call"]
    results = [message.parts[0].tool_result for message in delta.results]
    assert [(r.tool_call_id, r.name, r.is_error) for r in results] == [("call_a", "weather", True), ("call_b", "time", False)]
    assert all(message.role == message_pb2.ROLE_TOOL for message in delta.results)


def test_tool_round_rejects_missing_and_unknown_results():
    round_ = ToolRound("", tool_call("call_a", "weather", "{}"), tool_call("call_b", "time", "{}"))
    round_.answer("call_a", text_payload("sunny"))
    with pytest.raises(ValueError, match="call_b"):
        round_.messages()
    round_.answer("call_b", text_payload("noon")).answer("call_c", text_payload("?"))
    with pytest.raises(ValueError, match="call_c"):
        round_.delta()


def test_backoff_grows_to_the_cap():
    policy = RetryPolicy(max_attempts=10, initial_backoff=0.1, max_backoff=1.0, multiplier=2.0)
    assert [policy.backoff_bound(n) for n in range(1, 7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert all(0 <= policy.backoff(3) <= 0.4 for _ in range(100))


def test_outcome_unknown_tells_the_clients_refusal_from_the_sidecars():
    from contextd.client.errors import outcome_unknown

    def failure(code, message):
        return from_status(code, message, None)

    assert outcome_unknown(failure(grpc.StatusCode.RESOURCE_EXHAUSTED, "CLIENT: Received message larger than max (6684 vs. 2048)"))
    assert outcome_unknown(failure(grpc.StatusCode.UNAVAILABLE, "connection reset"))
    assert outcome_unknown(failure(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))
    # The sidecar refusing a request, or a budget, applied nothing.
    assert not outcome_unknown(failure(grpc.StatusCode.RESOURCE_EXHAUSTED, "message size 17000000 is larger than configured readMaxBytes 16777216"))
    assert not outcome_unknown(failure(grpc.StatusCode.RESOURCE_EXHAUSTED, "pending exceeds budget"))
    assert not outcome_unknown(failure(grpc.StatusCode.INVALID_ARGUMENT, "deltas: empty"))
