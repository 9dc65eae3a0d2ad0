"""Recall from Python: a compile with recall_tools trims a coding history and sends contextd's recall
tools; the model's calls of them are answered with one answer_recall_tool_call each, from what the
budget dropped, by the blocking and the asyncio client."""

import asyncio
import json
import re
import uuid

import pytest

from contextd.client import RECALL_TOOL_NAMES, AsyncClient, Client, InvalidArgument, ToolRound, append_user, is_recall_tool, text_payload, tool_call, user_text
from contextd.v1 import compile_pb2, message_pb2
from contextd.v1 import conversation_service_pb2 as conversation_pb2


def _seed(client: Client) -> str:
    conversation_id = "recall-" + uuid.uuid4().hex
    deltas = []
    for index in range(30):
        round_ = ToolRound("", tool_call(f"c{index}", "run_command", json.dumps({"command": f"make -C services/worker_{index} test"}))).answer(
            f"c{index}", text_payload(f"ok services/worker_{index}\n" + "build output line\n" * 100)
        )
        deltas += [append_user(user_text(f"step {index}")), round_.delta()]
    client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, expected_version=0, deltas=deltas))
    return conversation_id


def test_answers_the_models_recall_calls(sidecar):
    with Client(sidecar.address) as client:
        conversation_id = _seed(client)
        compiled = client.compile(
            compile_pb2.CompileRequest(
                conversation_id=conversation_id,
                budget=compile_pb2.Budget(max_tokens=2000),
                recall_tools=True,
                render=compile_pb2.RenderOptions(provider=message_pb2.PROVIDER_GEMINI, model="gemini-2.5-pro"),
            )
        ).result
        body = json.loads(compiled.rendered.json)
        names = [declaration["name"] for tool in body["tools"] for declaration in tool["functionDeclarations"]]
        assert [name for name in names if is_recall_tool(name)] == list(RECALL_TOOL_NAMES)
        assert compiled.budget_dropped_messages > 0
        found = client.answer_recall_tool_call(conversation_id, "contextd_search_history", json.dumps({"query": "services/worker_2", "max_results": 3}))
        match = re.search(r"--- message (\S+) · position \d+ · assistant · run_command\ntool call run_command \(c2\)", found)
        assert match, found
        whole = client.answer_recall_tool_call(conversation_id, "contextd_recall_message", json.dumps({"message_ids": [match.group(1)]}))
        assert "make -C services/worker_2 test" in whole
        with pytest.raises(InvalidArgument, match='tool_call.name: "read_file" is not a recall tool'):
            client.answer_recall_tool_call(conversation_id, "read_file", "{}")


def test_async_client_answers_a_search(sidecar):
    with Client(sidecar.address) as client:
        conversation_id = _seed(client)

    async def main() -> str:
        async with AsyncClient(sidecar.address) as client:
            return await client.answer_recall_tool_call(conversation_id, "contextd_search_history", '{"query":"worker_7"}')

    assert "make -C services/worker_7 test" in asyncio.run(main())
