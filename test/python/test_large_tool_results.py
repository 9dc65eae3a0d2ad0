"""Large tool results by reference from Python: a compile sends the preview, the client reads the whole text back."""

import asyncio
import uuid

from contextd.client import AsyncClient, Client, ToolRound, append_user, text_payload, tool_call, user_text
from contextd.v1 import compile_pb2
from contextd.v1 import conversation_service_pb2 as conversation_pb2

FILE = "línea del fichero 😀\n" * 4000


def _seed(client: Client) -> str:
    conversation_id = "large-result-" + uuid.uuid4().hex
    round_ = ToolRound("", tool_call("call_read", "read_file", '{"path":"a.txt"}')).answer("call_read", text_payload(FILE))
    client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, expected_version=0, deltas=[append_user(user_text("read a.txt")), round_.delta()]))
    return conversation_id


def test_preview_then_whole_text(sidecar):
    with Client(sidecar.address) as client:
        conversation_id = _seed(client)
        compiled = client.compile(compile_pb2.CompileRequest(conversation_id=conversation_id, large_tool_results=compile_pb2.LargeToolResults(add_read_tool=True))).result
        sent = compiled.payload.history[2].parts[0].tool_result.payload.text
        assert 'read more with read_tool_result(tool_call_id "call_read"' in sent
        assert len(sent.encode()) < 2000
        assert [definition.name for definition in compiled.payload.tool_definitions] == ["read_tool_result"]
        assert client.read_whole_tool_result(conversation_id, "call_read") == FILE
        first = client.read_tool_result(conversation_pb2.ReadToolResultRequest(conversation_id=conversation_id, tool_call_id="call_read", max_bytes=1000))
        assert first.total_bytes == len(FILE.encode()) and first.next_offset <= 1000 and FILE.startswith(first.text)


def test_async_client_reads_the_whole_text(sidecar):
    with Client(sidecar.address) as client:
        conversation_id = _seed(client)

    async def main() -> str:
        async with AsyncClient(sidecar.address) as client:
            return await client.read_whole_tool_result(conversation_id, "call_read")

    assert asyncio.run(main()) == FILE
