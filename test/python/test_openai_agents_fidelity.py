"""ContextdSession against the SDK's reference store, SQLiteSession, on a real sidecar (Redis
store): every item kind round-trips exactly (the same batches into both, the same reads and pops
back), items are stored once (a 9 MB item commits), lone surrogates, session_settings given as a
dict, the session id "", cancelled writes awaited to their outcome, commits whose outcome was
unknown sent again with their key, and the same session over an AsyncClient."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, Dict, List

import pytest

pytest.importorskip("agents")

from agents import SQLiteSession  # noqa: E402
from agents.memory import SessionSettings  # noqa: E402

from contextd.client import AsyncClient, Client, RetryPolicy  # noqa: E402
from contextd.client.openai_agents import EMPTY_SESSION_CONVERSATION_ID, ContextdSession  # noqa: E402
from contextd.v1 import conversation_service_pb2 as conversation_pb2  # noqa: E402
from test_outcomes import AnswerCutter  # noqa: E402

LONG = "a sentence long enough to be held by a typed part only. " * 3

# Batches of items as add_items gets them: every input, output and model item kind of the SDK's
# TResponseInputItem, with long and short strings, JSON values of every type, and a lone surrogate.
BATCHES: List[List[Dict[str, Any]]] = [
    [
        {"role": "system", "content": "Be brief."},
        {"content": "Hi " + LONG, "role": "user"},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": LONG}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "data:image/png;base64," + "iVBORw0KGgo" * 8, "detail": "high"},
            {"type": "input_image", "file_id": "file-img", "detail": "auto"},
            {"type": "input_file", "file_id": "file-abc", "filename": "report.pdf"},
            {"type": "input_file", "file_url": "https://example.com/" + "f" * 40 + ".pdf"},
            {"type": "input_file", "file_data": "JVBERi0x" * 6, "filename": "inline.pdf"},
        ]},
        {"role": "assistant", "content": "plain assistant " + LONG},
    ],
    [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": LONG}, {"type": "summary_text", "text": "two"}], "content": [{"type": "reasoning_text", "text": LONG}], "encrypted_content": "gAAAA" + "Z" * 64},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "oslo"}},
        {"type": "file_search_call", "id": "fs_1", "queries": ["q"], "status": "completed", "results": None},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather", "arguments": json.dumps({"city": "Oslo", "note": LONG}), "status": "completed"},
        {"type": "function_call", "call_id": "call_2", "name": "clock", "arguments": ""},
    ],
    [
        {"type": "function_call_output", "call_id": "call_1", "output": "rainy " + LONG},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": LONG}, {"type": "input_image", "image_url": "https://example.com/clock.png", "detail": "low"}]},
    ],
    [
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": [
            {"type": "output_text", "text": "Oslo: rainy. " + LONG, "annotations": [{"type": "url_citation", "start_index": 0, "end_index": 4, "url": "https://example.com", "title": "t"}], "logprobs": []},
            {"type": "refusal", "refusal": "no more " + LONG},
        ]},
        {"type": "computer_call", "id": "cu_1", "call_id": "cc_1", "action": {"type": "click", "x": 1, "y": 2, "button": "left"}, "pending_safety_checks": [], "status": "completed"},
        {"type": "computer_call_output", "call_id": "cc_1", "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64," + "A" * 48}},
        {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": "B" * 80},
        {"type": "code_interpreter_call", "id": "ci_1", "code": "print(1)", "container_id": "c", "outputs": [{"type": "logs", "logs": "1"}], "status": "completed"},
        {"type": "local_shell_call", "id": "ls_1", "call_id": "lsc_1", "action": {"type": "exec", "command": ["ls"], "env": {}}, "status": "completed"},
        {"type": "local_shell_call_output", "id": "lsc_1", "output": "file.txt"},
        {"type": "mcp_list_tools", "id": "ml_1", "server_label": "s", "tools": [{"name": "t", "input_schema": {"type": "object"}}]},
        {"type": "mcp_approval_request", "id": "ma_1", "server_label": "s", "name": "t", "arguments": "{}"},
        {"type": "mcp_approval_response", "approval_request_id": "ma_1", "approve": True},
        {"type": "mcp_call", "id": "mc_1", "server_label": "s", "name": "t", "arguments": "{}", "output": LONG, "error": None},
        {"type": "custom_tool_call", "call_id": "ct_1", "name": "grammar", "input": LONG},
        {"type": "custom_tool_call_output", "call_id": "ct_1", "output": "ok"},
        {"type": "item_reference", "id": "msg_0"},
        {"type": "compaction", "encrypted_content": "C" * 40},
    ],
    [
        {"role": "user", "content": "numbers and nulls", "extra": {"int": 1, "float": 0.1, "big": 12345678901234567890, "neg": -1.5e-7, "null": None, "bools": [True, False], "empty": [{}, [], ""]}},
        {"role": "user", "content": "こんにちは 😊👍 Привет " + LONG},
        {"role": "user", "content": "half a pair: \ud83d"},
        {"role": "user", "content": "a lone low surrogate \udc00 in a long string " + LONG, "\ud800key": "\udfff"},
        {"type": "function_call", "call_id": "call_3", "name": "echo", "arguments": '{"s": "\ud83d ' + LONG + '"}'},
    ],
    [
        {"type": "function_call_output", "call_id": "call_3", "output": "\ud83d " + LONG},
        {"role": "assistant", "content": ""},
    ],
]


@pytest.fixture(params=["Client", "AsyncClient"])
def client_kind(request):
    return request.param


def in_loop(make_client, body):
    """Runs `body(client)` in a new event loop with a client made inside it (AsyncClient must be
    created in the loop that uses it)."""

    async def main():
        client = make_client()
        try:
            return await body(client)
        finally:
            closed = client.close()
            if asyncio.iscoroutine(closed):
                await closed

    return asyncio.run(main())


def maker(address: str, kind: str, **options: Any):
    return (lambda: Client(address, **options)) if kind == "Client" else (lambda: AsyncClient(address, **options))


def test_every_item_kind_round_trips_as_in_sqlite_session(sidecar, client_kind):
    async def body(client):
        ours = ContextdSession(f"fidelity-{uuid.uuid4().hex}", client)
        reference = SQLiteSession("reference")
        for batch in BATCHES:
            await ours.add_items(batch)
            await reference.add_items(batch)
            assert json.dumps(await ours.get_items()) == json.dumps(await reference.get_items())
        for limit in (0, 1, 3, 7, 100, -1):
            assert json.dumps(await ours.get_items(limit)) == json.dumps(await reference.get_items(limit))
        # Pop until empty: the same item each time, the same items left.
        while True:
            popped, expected = await ours.pop_item(), await reference.pop_item()
            assert json.dumps(popped) == json.dumps(expected)
            assert json.dumps(await ours.get_items()) == json.dumps(await reference.get_items())
            if expected is None:
                break
        reference.close()

    in_loop(maker(sidecar.address, client_kind), body)


def test_long_strings_are_stored_once(sidecar):
    """The typed parts hold the long strings; the extension only names them. A 9 MB item (twice
    would be over the sidecar's 16 MiB request limit) commits and reads back, beside a 5 MB output.
    (A conversation over 16 MiB in all is the paged read's to read.)"""
    nine = "n" * (9 << 20)
    five = "o" * (5 << 20)
    with Client(sidecar.address) as client:
        session = ContextdSession(f"once-{uuid.uuid4().hex}", client)
        items = [{"role": "user", "content": nine}, {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]
        asyncio.run(session.add_items(items))
        asyncio.run(session.add_items([{"type": "function_call_output", "call_id": "c1", "output": five}]))
        read = asyncio.run(session.get_items())
        assert read == items + [{"type": "function_call_output", "call_id": "c1", "output": five}]
        state = client.get_state(conversation_pb2.GetStateRequest(conversation_id=session.conversation_id)).state
        assert state.ByteSize() < len(nine) + len(five) + 4096
        assert all(len(extension.payload) < 200 for message in state.history for extension in message.extensions)
        # A lone surrogate reaches the provider-facing part as U+FFFD, and get_items as it was.
        asyncio.run(session.add_items([{"role": "user", "content": "x\ud83dy"}]))
        assert asyncio.run(session.get_items(1)) == [{"role": "user", "content": "x\ud83dy"}]
        last = client.get_state(conversation_pb2.GetStateRequest(conversation_id=session.conversation_id)).state.history[-1]
        assert last.parts[0].text.text == "x\ufffdy"


def test_session_settings_are_normalised_as_the_sdk_does(sidecar):
    with Client(sidecar.address) as client:
        session = ContextdSession(f"settings-{uuid.uuid4().hex}", client, session_settings={"limit": 2})
        assert isinstance(session.session_settings, SessionSettings) and session.session_settings.limit == 2
        asyncio.run(session.add_items([{"role": "user", "content": str(index)} for index in range(4)]))
        assert [item["content"] for item in asyncio.run(session.get_items())] == ["2", "3"]
        with pytest.raises(TypeError) as refused:
            ContextdSession("settings-unknown", client, session_settings={"limitt": 1})
        assert "limitt" in str(refused.value)


def test_the_empty_session_id_has_its_own_conversation(sidecar):
    with Client(sidecar.address) as client:
        session = ContextdSession("", client)
        assert session.session_id == "" and session.conversation_id == EMPTY_SESSION_CONVERSATION_ID
        asyncio.run(session.clear_session())
        asyncio.run(session.add_items([{"role": "user", "content": "no id"}]))
        assert asyncio.run(ContextdSession("", client).get_items()) == [{"role": "user", "content": "no id"}]


def test_a_cancelled_write_has_settled_when_the_cancel_is_raised(sidecar, client_kind):
    """Cancelled while its commit is in flight, add_items waits for the commit's outcome and then
    raises the cancellation: right after it, the item is there, once (so the caller knows not to
    write it again)."""

    async def body(client):
        session = ContextdSession(f"cancel-{uuid.uuid4().hex}", client)
        big = {"role": "user", "content": "c" * (4 << 20)}
        write = asyncio.ensure_future(session.add_items([big]))
        await asyncio.sleep(0)  # the write has started
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
        assert await session.get_items() == [big]
        popping = asyncio.ensure_future(session.pop_item())
        await asyncio.sleep(0)
        popping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await popping
        assert await session.get_items() == []

    in_loop(maker(sidecar.address, client_kind), body)


def test_a_commit_whose_outcome_was_unknown_is_sent_again_with_its_key(sidecar, client_kind):
    """The connection is cut after the sidecar applied the commit; the client, allowed no retries
    of its own, raises OutcomeUnknown; the session sends the commit again with the key the error
    names, and the sidecar answers it from the key's record: stored once."""
    cutter = AnswerCutter(sidecar.address)
    conversation_id = f"unknown-{uuid.uuid4().hex}"

    async def body(client):
        session = ContextdSession(conversation_id, client)
        await session.add_items([{"role": "user", "content": "asked once"}])

    try:
        in_loop(maker(cutter.address, client_kind, retry=RetryPolicy(max_attempts=1)), body)
        assert cutter.cut
    finally:
        cutter.close()
    with Client(sidecar.address) as reader:
        state = reader.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id)).state
    assert state.version == 1 and len(state.history) == 1


APPENDER = """
import asyncio, sys
from contextd.client import Client
from contextd.client.openai_agents import ContextdSession

async def main(address, conversation_id, name):
    with Client(address) as client:
        session = ContextdSession(conversation_id, client)
        for index in range(8):
            await session.add_items([{"role": "user", "content": f"{name} {index}"}])
            await session.add_items([{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"{name} reply {index}", "annotations": []}]}])

asyncio.run(main(*sys.argv[1:]))
"""


def test_two_processes_appending_one_session_lose_nothing(sidecar):
    """Two processes append to one session at once (inputs without reading, model items with a
    checked rewrite of the last message, retried on conflict): every item lands once, each
    process's in its order."""
    import subprocess
    import sys

    conversation_id = f"two-writers-{uuid.uuid4().hex}"
    writers = [subprocess.Popen([sys.executable, "-c", APPENDER, sidecar.address, conversation_id, name]) for name in ("a", "b")]
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0]
    with Client(sidecar.address) as client:
        items = asyncio.run(ContextdSession(conversation_id, client).get_items())
    texts = [item["content"] if isinstance(item["content"], str) else item["content"][0]["text"] for item in items]
    assert len(texts) == 32
    for name in ("a", "b"):
        own = [text for text in texts if text.startswith(name + " ")]
        assert own == [text for index in range(8) for text in (f"{name} {index}", f"{name} reply {index}")]
