"""Stream golden vectors (test/golden/streams, format in its README) through a real sidecar: a
provider's stream committed with append_provider_stream and the equivalent body committed with
append_provider_response store byte-identical messages, equal to the vector's expected_messages;
refused streams raise the expected code and append nothing."""

from __future__ import annotations

import json
import uuid
from typing import Any, Dict, List

import pytest
from google.protobuf import json_format

from conftest import REPO_ROOT
from contextd.client import Client, append_provider_stream
from contextd.client.errors import ContextdError
from contextd.v1 import conversation_service_pb2 as conversation_pb2, message_pb2, state_pb2


def _goldens() -> List[Dict[str, Any]]:
    paths = sorted((REPO_ROOT / "test" / "golden" / "streams").glob("*.json"))
    assert paths, "no stream golden vectors found"
    return [json.loads(path.read_text()) for path in paths]


def _encode(value: Any) -> bytes:
    # A string event is sent as its text ("[DONE]"); anything else as its JSON, keys in file order.
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.encode()


def _provider(golden: Dict[str, Any]) -> int:
    return message_pb2.Provider.Value("PROVIDER_" + golden["provider"])


def _stream_delta(golden: Dict[str, Any]) -> state_pb2.Delta:
    return append_provider_stream(
        _provider(golden),
        [_encode(event) for event in golden["events"]],
        interrupted=golden.get("interrupted", False),
        abort_reason=golden.get("abort_reason", ""),
    )


def _body_delta(golden: Dict[str, Any]) -> state_pb2.Delta:
    return state_pb2.Delta(
        append_provider_response=state_pb2.AppendProviderResponse(provider=_provider(golden), json=_encode(golden["body"]))
    )


def _appended(client: Client, delta: state_pb2.Delta) -> List[bytes]:
    """Commits `delta` to a new conversation; its history serialized, message ids cleared."""
    conversation_id = f"golden-stream-{uuid.uuid4().hex}"
    client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, deltas=[delta]))
    history = client.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id)).state.history
    messages = []
    for message in history:
        message.ClearField("id")
        messages.append(message.SerializeToString(deterministic=True))
    return messages


def _expected(golden: Dict[str, Any]) -> List[bytes]:
    return [json_format.ParseDict(value, message_pb2.Message()).SerializeToString(deterministic=True) for value in golden["expected_messages"]]


GOLDENS = _goldens()
NAMES = [golden["name"] for golden in GOLDENS]


@pytest.mark.parametrize("golden", [g for g in GOLDENS if "expected_error" not in g], ids=lambda g: g["name"])
def test_stream_appends_expected_messages(sidecar, golden: Dict[str, Any]):
    with Client(sidecar.address) as client:
        from_stream = _appended(client, _stream_delta(golden))
        assert from_stream == _expected(golden)
        if "body" in golden:
            assert from_stream == _appended(client, _body_delta(golden))


@pytest.mark.parametrize("golden", [g for g in GOLDENS if "expected_error" in g], ids=lambda g: g["name"])
def test_malformed_stream_is_refused_and_appends_nothing(sidecar, golden: Dict[str, Any]):
    conversation_id = f"golden-stream-{uuid.uuid4().hex}"
    with Client(sidecar.address) as client:
        with pytest.raises(ContextdError) as raised:
            client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, deltas=[_stream_delta(golden)]))
        state = client.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id)).state
    assert raised.value.code.name == golden["expected_error"]["code"]
    assert golden["expected_error"]["message_contains"] in raised.value.message, raised.value.message
    # The field violation names the delta's events, and the event when one is at fault.
    field = golden["expected_error"]["message_contains"].split(":")[0]  # "events[4]" or "events"
    assert [violation.field for violation in raised.value.field_violations] == [f"deltas[0].append_provider_stream.{field}"]
    assert state.version == 0 and len(state.history) == 0


def test_vectors_cover_every_provider():
    providers = {golden["provider"] for golden in GOLDENS if "body" in golden}
    assert providers == {"OPENAI_CHAT", "OPENAI_RESPONSES", "ANTHROPIC_MESSAGES", "GEMINI"}
