"""Structured error details (google.rpc.ErrorInfo, BadRequest) of real failed calls, sync and asyncio."""

from __future__ import annotations

import asyncio

import pytest

from contextd.client import (
    AsyncClient,
    Client,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    VersionConflict,
    append_assistant,
    append_user,
    remember,
    tool_call,
    user_text,
)
from contextd.v1 import compile_pb2, conversation_service_pb2 as conversation_pb2, message_pb2, state_pb2


@pytest.fixture()
def client(sidecar) -> Client:
    with Client(sidecar.address) as connected:
        yield connected


def test_invalid_argument_has_a_reason_and_field_violations(client: Client):
    with pytest.raises(InvalidArgument) as raised:
        client.commit(
            conversation_pb2.CommitRequest(
                conversation_id="py-error-details",
                deltas=[append_user(user_text("Weather?")), append_assistant("", tool_call("k1", "get_weather", "city=Oslo"))],
            )
        )
    error = raised.value
    assert error.reason == "TOOL_ARGUMENTS_INVALID"
    assert error.metadata["tool_call_id"] == "k1"
    assert [v.field for v in error.field_violations] == ["deltas[1].append_assistant.message.parts[0].tool_call.arguments"]
    assert 'tool call "k1" must be a JSON object, got "city=Oslo" (not valid JSON)' in error.field_violations[0].description

    with pytest.raises(InvalidArgument) as raised:
        client.commit(conversation_pb2.CommitRequest(conversation_id="py-error-details", deltas=[state_pb2.Delta()]))
    assert raised.value.reason == "INVALID_ARGUMENT"
    assert raised.value.field_violations == [FieldViolation("deltas[0]", "no operation set")]


def test_version_conflict_and_failed_precondition_reasons(client: Client):
    conversation_id = "py-error-details-conflict"
    client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, deltas=[remember("one")]))
    with pytest.raises(VersionConflict) as conflict:
        client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, expected_version=0, deltas=[remember("stale")]))
    assert conflict.value.reason == "VERSION_CONFLICT"
    assert conflict.value.metadata["current_version"] == "1" and conflict.value.current_version == 1
    assert conflict.value.field_violations == []

    open_round = message_pb2.Message(
        id="a1",
        role=message_pb2.ROLE_ASSISTANT,
        parts=[message_pb2.Part(tool_call=message_pb2.ToolCallPart(id="oc1", name="f"))],
    )
    with pytest.raises(FailedPrecondition) as rule:
        client.compile(
            compile_pb2.CompileRequest(
                history=compile_pb2.MessageList(messages=[message_pb2.Message(id="u1", role=message_pb2.ROLE_USER, parts=[message_pb2.Part(text=message_pb2.TextPart(text="q"))]), open_round]),
                current_turn=compile_pb2.CurrentTurn(raw=message_pb2.Message(id="u2", role=message_pb2.ROLE_USER, parts=[message_pb2.Part(text=message_pb2.TextPart(text="next"))])),
                render=compile_pb2.RenderOptions(provider=message_pb2.PROVIDER_ANTHROPIC_MESSAGES, model="claude"),
                # Without REJECT the default repair closes the open call before the current turn.
                repair=compile_pb2.TOOL_ROUND_REPAIR_REJECT,
            )
        )
    assert rule.value.reason == "PROVIDER_RULE_VIOLATED"
    assert rule.value.metadata == {"rule": "anthropic.open_call_position"}


def test_asyncio_client_reads_the_same_details(sidecar):
    async def run() -> None:
        async with AsyncClient(sidecar.address) as client:
            with pytest.raises(InvalidArgument) as raised:
                await client.commit(conversation_pb2.CommitRequest(conversation_id="py-error-details-aio", deltas=[state_pb2.Delta()]))
            assert raised.value.reason == "INVALID_ARGUMENT"
            assert raised.value.field_violations == [FieldViolation("deltas[0]", "no operation set")]

    asyncio.run(run())
