"""Message sizes, commits whose answer is lost, and the one-RPC agent turn, through
contextd.client against a real sidecar backed by a real Redis."""

from __future__ import annotations

import asyncio
import socket
import threading
import urllib.request

import pytest

from contextd.client import (
    AsyncClient,
    Client,
    OutcomeUnknown,
    ResourceExhausted,
    ToolRound,
    VersionConflict,
    append_assistant,
    append_messages,
    append_user,
    system_text,
    text_payload,
    tool_call,
    user_text,
)
from contextd.v1 import compile_pb2, conversation_service_pb2 as conversation_pb2, message_pb2, state_pb2

OPENAI = compile_pb2.RenderOptions(provider=message_pb2.PROVIDER_OPENAI_CHAT, model="gpt-4o")
CHARS = compile_pb2.Estimator(kind=compile_pb2.ESTIMATOR_KIND_CHARS)


def shape(messages) -> str:
    return " ".join(
        message_pb2.Role.Name(m.role).removeprefix("ROLE_") + ":" + ",".join(p.WhichOneof("kind") for p in m.parts)
        for m in messages
    )


def test_default_limits_carry_a_five_megabyte_commit_and_a_large_compile(sidecar):
    """grpcio's own receive limit is 4 MiB; the client's default is the sidecar's 16 MiB."""
    with Client(sidecar.address) as client:
        deltas = []
        for letter in "abcde":
            deltas += [append_user(user_text(letter * (1 << 20))), append_assistant("noted")]
        request = conversation_pb2.CommitRequest(conversation_id="py-large", deltas=deltas)
        assert request.ByteSize() >= 5 << 20
        committed = client.commit(request)
        compiled = client.compile(
            compile_pb2.CompileRequest(conversation_id="py-large", render=OPENAI, include=[compile_pb2.COMPILE_RESULT_PART_PAYLOAD])
        )
        assert compiled.ByteSize() > 4 << 20, "the test needs an answer over grpcio's default 4 MiB"
        assert len(compiled.result.payload.history) == 10 and compiled.result.version == committed.version


def test_a_commit_whose_answer_is_lost_is_applied_once(sidecar):
    """An answer over the receive limit hides a commit that applied: the client retries with the
    same key, asking for less, and reports the commit as applied once."""
    conversation_id = "py-lost-answer"
    big = "a long question " * 400
    with Client(sidecar.address) as reader, Client(sidecar.address, max_receive_bytes=2048) as small:
        response = small.commit(
            conversation_pb2.CommitRequest(
                conversation_id=conversation_id, expected_version=0, include_state=True, deltas=[append_user(user_text(big))]
            )
        )
        assert response.version == 1 and response.replayed and not response.HasField("state")

        # A turn: the included source is over 2 KiB, the budgeted compile is not.
        result = small.turn(
            compile_pb2.CompileRequest(
                conversation_id=conversation_id,
                budget=compile_pb2.Budget(max_tokens=200, estimator=CHARS),
                include=[compile_pb2.COMPILE_RESULT_PART_SOURCE],
            ),
            1,
            [append_assistant("ok"), append_user(user_text("short"))],
        )
        assert result.committed_version == 2 and result.HasField("payload")
        assert "idempotent_replay" in [warning.code for warning in result.warnings]

        # Even the version-only answer can be refused: OutcomeUnknown names the key, and sending
        # the commit again with it applies nothing twice.
        request = conversation_pb2.CommitRequest(conversation_id=conversation_id, deltas=[append_assistant("one answer")])
        with Client(sidecar.address, max_receive_bytes=1) as tiny:
            with pytest.raises(OutcomeUnknown) as unknown:
                tiny.commit(request)
        assert isinstance(unknown.value.last, ResourceExhausted) and unknown.value.idempotency_key
        request.idempotency_key = unknown.value.idempotency_key
        again = reader.commit(request)
        assert again.replayed and again.version == 3

        state = reader.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id)).state
        assert state.version == 3
        assert shape(state.history) == "USER:text ASSISTANT:text USER:text ASSISTANT:text"


class AnswerCutter:
    """A TCP proxy in front of the sidecar that, on its first connection, cuts both sides when the
    first HTTP/2 HEADERS frame of a stream leaves the sidecar: the sidecar has then applied the
    call, and the client sees a broken connection for a commit that happened. Later connections
    pass through untouched."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self._listener.getsockname()[1]
        self.cut = False
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            cut_this, self.cut = not self.cut, True
            threading.Thread(target=self._pipe, args=(client, server), daemon=True).start()
            threading.Thread(target=self._until_answer if cut_this else self._pipe, args=(server, client), daemon=True).start()

    @staticmethod
    def _drop(*connections: socket.socket) -> None:
        # shutdown, not just close: another thread may be blocked reading the socket, and close
        # alone then sends no FIN.
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            connection.close()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            AnswerCutter._drop(sink)

    @staticmethod
    def _until_answer(server: socket.socket, client: socket.socket) -> None:
        def read(count: int) -> bytes:
            data = b""
            while len(data) < count:
                chunk = server.recv(count - len(data))
                if not chunk:
                    raise OSError("closed")
                data += chunk
            return data

        try:
            while True:
                header = read(9)
                length, frame_type = int.from_bytes(header[:3], "big"), header[3]
                stream = int.from_bytes(header[5:9], "big") & 0x7FFFFFFF
                if frame_type == 0x1 and stream != 0:  # HEADERS of a response
                    return
                client.sendall(header + read(length))
        except OSError:
            pass
        finally:
            AnswerCutter._drop(client, server)


def test_a_commit_whose_connection_is_cut_after_it_applied_is_applied_once(sidecar):
    cutter = AnswerCutter(sidecar.address)
    try:
        with Client(cutter.address) as client:
            response = client.commit(
                conversation_pb2.CommitRequest(
                    conversation_id="py-cut", expected_version=0, deltas=[append_user(user_text("asked once"))]
                )
            )
        assert cutter.cut and response.replayed and response.version == 1
    finally:
        cutter.close()
    with Client(sidecar.address) as reader:
        state = reader.get_state(conversation_pb2.GetStateRequest(conversation_id="py-cut")).state
    assert state.version == 1 and shape(state.history) == "USER:text"


def compile_calls(sidecar) -> int:
    """How many Compile RPCs the sidecar has answered OK (its /metrics counter)."""
    series = 'contextd_rpc_requests_total{method="contextd.v1.ContextService/Compile",code="ok"} '
    with urllib.request.urlopen(f"http://{sidecar.address}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(series):
                return int(float(line[len(series) :]))
    return 0


def test_a_rendered_turn_sends_its_prompt_once(sidecar):
    """With render set the rendered body is the prompt: no payload unless included, one Compile per turn."""
    request = compile_pb2.CompileRequest(conversation_id="py-rendered-turns", render=OPENAI)
    with Client(sidecar.address) as client:
        before = compile_calls(sidecar)
        result = client.turn(request, 0, [append_user(user_text("Weather in Oslo?"))])
        assert compile_calls(sidecar) - before == 1
        assert not result.HasField("payload") and b"Weather in Oslo?" in result.rendered.json
        asked = compile_pb2.CompileRequest()
        asked.CopyFrom(request)
        asked.include.append(compile_pb2.COMPILE_RESULT_PART_PAYLOAD)
        result = client.turn(asked, result.committed_version, [append_assistant("Rain."), append_user(user_text("Tomorrow?"))])
        assert shape(result.payload.history) == "USER:text ASSISTANT:text USER:text" and b"Tomorrow?" in result.rendered.json

    async def one_async_turn() -> compile_pb2.CompileResult:
        async with AsyncClient(sidecar.address) as client:
            return await client.turn(request, 2, [append_assistant("Sun."), append_user(user_text("Thanks!"))])

    before = compile_calls(sidecar)
    result = asyncio.run(asyncio.wait_for(one_async_turn(), timeout=30))
    assert compile_calls(sidecar) - before == 1
    assert result.committed_version == 3 and not result.HasField("payload") and b"Thanks!" in result.rendered.json


def test_an_agent_loop_needs_one_rpc_per_model_call(sidecar):
    # The typed payload beside the rendered body (a rendered compile sends it only when asked).
    request = compile_pb2.CompileRequest(conversation_id="py-turns", render=OPENAI, include=[compile_pb2.COMPILE_RESULT_PART_PAYLOAD])
    with Client(sidecar.address) as client:
        result = client.turn(
            request, 0, [append_messages(state_pb2.SEGMENT_SYSTEM, system_text("You are terse.")), append_user(user_text("Weather in Oslo?"))]
        )
        round_ = ToolRound("", tool_call("call_1", "weather", '{"city":"Oslo"}')).answer("call_1", text_payload("4°C"))
        for deltas in ([round_.delta()], [append_assistant("4°C in Oslo."), append_user(user_text("And tomorrow?"))]):
            previous = result.committed_version
            result = client.turn(request, previous, deltas)
            assert result.version == result.committed_version == previous + 1
        assert shape(result.payload.history) == "USER:text ASSISTANT:tool_call TOOL:tool_result ASSISTANT:text USER:text"
        assert b"And tomorrow?" in result.rendered.json and b"You are terse." in result.rendered.json

        # A stale version is a conflict, and nothing of that turn is stored.
        with pytest.raises(VersionConflict):
            client.turn(request, 1, [append_assistant("late")])
        with pytest.raises(ValueError, match="append_user"):
            client.turn(compile_pb2.CompileRequest(conversation_id="py-turns", current_turn=compile_pb2.CurrentTurn(raw=user_text("?"))), 4, [])
        state = client.get_state(conversation_pb2.GetStateRequest(conversation_id="py-turns")).state
        assert state.version == result.committed_version and len(state.history) == 5


def test_the_async_client_turns_and_retries_alike(sidecar):
    async def main() -> None:
        async with AsyncClient(sidecar.address, max_receive_bytes=2048) as client:
            request = compile_pb2.CompileRequest(
                conversation_id="py-async-turns",
                budget=compile_pb2.Budget(max_tokens=200, estimator=CHARS),
                include=[compile_pb2.COMPILE_RESULT_PART_SOURCE],
            )
            # The included source is over 2 KiB; the budgeted compile is not.
            first = await client.turn(
                request, 0, [append_user(user_text("a long question " * 400)), append_assistant("noted"), append_user(user_text("short"))]
            )
            assert first.committed_version == 1 and first.HasField("payload")
            assert "idempotent_replay" in [warning.code for warning in first.warnings]
            second = await client.turn(request, 1, [append_assistant("ok"), append_user(user_text("shorter"))])
            assert second.committed_version == 2
        async with AsyncClient(sidecar.address) as reader:
            state = (await reader.get_state(conversation_pb2.GetStateRequest(conversation_id="py-async-turns"))).state
            assert shape(state.history) == "USER:text ASSISTANT:text USER:text ASSISTANT:text USER:text"

    asyncio.run(asyncio.wait_for(main(), timeout=30))
