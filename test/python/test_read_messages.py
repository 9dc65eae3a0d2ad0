"""ReadMessages from the Python clients against a real sidecar (Redis store): a 100,000-message,
50 MB conversation that GetState refuses is read whole in pages, sync and asyncio; the Agents SDK
session's `get_items(limit=...)` and LangChain's `messages` read a conversation over the 16 MiB
message limit."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from contextd.client import AsyncClient, Client, ResourceExhausted, VersionConflict
from contextd.client.builders import append_messages, append_user, user_text
from contextd.client.history_reads import read_history, read_history_async, read_history_tail, read_history_tail_async
from contextd.v1 import conversation_service_pb2 as conversation_pb2, state_pb2


def commit_long_conversation(client: Client, conversation_id: str, count: int, bytes_each: int) -> None:
    """`count` messages of about `bytes_each` bytes, in commits of 10,000 (the sidecar's --max-messages)."""
    filler = "x" * bytes_each
    for start in range(0, count, 10_000):
        messages = []
        for index in range(start, min(start + 10_000, count)):
            message = user_text(f"{index} {filler}")
            message.id = f"m{index}"
            messages.append(message)
        client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, deltas=[append_messages(state_pb2.SEGMENT_HISTORY, *messages)]))


@pytest.fixture(scope="module")
def fifty_mb(sidecar) -> str:
    conversation_id = f"fifty-mb-{uuid.uuid4().hex}"
    with Client(sidecar.address) as client:
        commit_long_conversation(client, conversation_id, 100_000, 500)
    return conversation_id


def test_get_state_over_the_limit_names_the_paged_read(sidecar, fifty_mb):
    with Client(sidecar.address) as client:
        with pytest.raises(ResourceExhausted) as refused:
            client.get_state(conversation_pb2.GetStateRequest(conversation_id=fifty_mb))
    assert refused.value.reason == "STATE_TOO_LARGE"
    assert "ConversationService.ReadMessages" in str(refused.value)
    assert refused.value.metadata["read_with"] == "contextd.v1.ConversationService.ReadMessages"


def test_a_50_mb_conversation_reads_whole_in_pages(sidecar, fifty_mb):
    with Client(sidecar.address) as client:
        pages = list(client.message_pages(conversation_pb2.ReadMessagesRequest(conversation_id=fifty_mb)))
    ids = [message.id for page in pages for message in page.messages]
    assert ids == [f"m{index}" for index in range(100_000)]
    assert sum(page.page_bytes for page in pages) > 50_000_000
    assert all(page.version == 10 and page.segment_sizes.history == 100_000 and page.page_bytes <= 4 << 20 for page in pages)


def test_a_50_mb_conversation_reads_whole_from_the_async_client(sidecar, fifty_mb):
    async def read() -> list:
        async with AsyncClient(sidecar.address) as client:
            last = await client.read_messages(conversation_pb2.ReadMessagesRequest(conversation_id=fifty_mb, last=10))
            assert [message.id for message in last.messages] == [f"m{index}" for index in range(99_990, 100_000)]
            return [message.id async for page in client.message_pages(conversation_pb2.ReadMessagesRequest(conversation_id=fifty_mb)) for message in page.messages]

    assert asyncio.run(asyncio.wait_for(read(), timeout=120)) == [f"m{index}" for index in range(100_000)]


def test_pages_stay_at_the_first_version_and_a_dropped_version_is_a_conflict(sidecar):
    conversation_id = f"pinned-{uuid.uuid4().hex}"
    with Client(sidecar.address) as client:
        commit_long_conversation(client, conversation_id, 30, 100)
        ids, versions = [], set()
        for page in client.message_pages(conversation_pb2.ReadMessagesRequest(conversation_id=conversation_id, max_bytes=300)):
            if not ids:
                client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, deltas=[append_user(user_text("late"))]))
            ids.extend(message.id for message in page.messages)
            versions.add(page.version)
        assert ids == [f"m{index}" for index in range(30)] and versions == {1}
        with pytest.raises(VersionConflict) as conflict:
            client.read_messages(conversation_pb2.ReadMessagesRequest(conversation_id=conversation_id, version=0))
        assert conflict.value.current_version == 2


def test_a_tail_read_moves_only_the_messages_that_hold_the_wanted_units(sidecar):
    conversation_id = f"tail-{uuid.uuid4().hex}"
    with Client(sidecar.address) as client:
        commit_long_conversation(client, conversation_id, 1_000, 10)
        # One unit per message: the last 10 messages, read once.
        assert [m.id for m in read_history_tail(client, conversation_id, 10, lambda message: 1)] == [f"m{i}" for i in range(990, 1_000)]
        # Units only in every 100th message: earlier ranges until three are held.
        held = read_history_tail(client, conversation_id, 3, lambda message: 1 if int(message.id[1:]) % 100 == 0 else 0)
        assert held[-1].id == "m999" and sum(1 for m in held if int(m.id[1:]) % 100 == 0) >= 3
        assert len(held) < 1_000
        # Fewer units than wanted in the whole history: all of it.
        assert len(read_history_tail(client, conversation_id, 5, lambda message: 0)) == 1_000
        # A wanted count past the uint32 `last` reads the whole history.
        assert len(read_history_tail(client, conversation_id, 2**40, lambda message: 1)) == 1_000


def test_the_async_history_reads_match_the_sync_ones(sidecar):
    conversation_id = f"tail-async-{uuid.uuid4().hex}"
    with Client(sidecar.address) as client:
        commit_long_conversation(client, conversation_id, 1_000, 10)
        whole = [message.id for message in read_history(client, conversation_id)]
        sparse = [m.id for m in read_history_tail(client, conversation_id, 3, lambda message: 1 if int(message.id[1:]) % 100 == 0 else 0)]

    async def read() -> tuple:
        async with AsyncClient(sidecar.address) as client:
            all_ids = [message.id for message in await read_history_async(client, conversation_id)]
            last = [m.id for m in await read_history_tail_async(client, conversation_id, 10, lambda message: 1)]
            held = [m.id for m in await read_history_tail_async(client, conversation_id, 3, lambda message: 1 if int(message.id[1:]) % 100 == 0 else 0)]
            return all_ids, last, held

    all_ids, last, held = asyncio.run(asyncio.wait_for(read(), timeout=60))
    assert all_ids == whole == [f"m{index}" for index in range(1_000)]
    assert last == [f"m{index}" for index in range(990, 1_000)]
    assert held == sparse


def test_agents_session_get_items_with_limit_reads_a_conversation_over_the_message_limit(sidecar):
    pytest.importorskip("agents")
    from contextd.client.openai_agents import ContextdSession

    with Client(sidecar.address) as client:
        session = ContextdSession(f"big-session-{uuid.uuid4().hex}", client)
        # 20 items of 1 MB: the stored conversation is over the 16 MiB message limit.
        for index in range(20):
            asyncio.run(session.add_items([{"role": "user", "content": f"{index} " + "y" * 1_000_000}]))
        with pytest.raises(ResourceExhausted):
            client.get_state(conversation_pb2.GetStateRequest(conversation_id=session.conversation_id))
        last = asyncio.run(session.get_items(limit=1))
        assert len(last) == 1 and last[0]["content"].startswith("19 ")
        assert [item["content"][:3] for item in asyncio.run(session.get_items(limit=3))] == ["17 ", "18 ", "19 "]
        everything = asyncio.run(session.get_items())
        assert [item["content"].split(" ")[0] for item in everything] == [str(index) for index in range(20)]

    async def read_async() -> tuple:
        async with AsyncClient(sidecar.address) as async_client:
            over_async = ContextdSession(session.session_id, async_client, conversation_id=session.conversation_id)
            return await over_async.get_items(limit=2), await over_async.get_items()

    last_two, all_async = asyncio.run(asyncio.wait_for(read_async(), timeout=60))
    assert [item["content"][:3] for item in last_two] == ["18 ", "19 "]
    assert len(all_async) == 20


def test_langchain_history_reads_a_conversation_over_the_message_limit(sidecar):
    pytest.importorskip("langchain_core")
    from langchain_core.messages import HumanMessage

    from contextd.client.langchain_history import ContextdChatMessageHistory

    with Client(sidecar.address) as client:
        history = ContextdChatMessageHistory(f"big-history-{uuid.uuid4().hex}", client)
        for index in range(20):
            history.add_messages([HumanMessage(content=f"{index} " + "z" * 1_000_000)])
        with pytest.raises(ResourceExhausted):
            client.get_state(conversation_pb2.GetStateRequest(conversation_id=history.conversation_id))
        messages = history.messages
        assert [message.content.split(" ")[0] for message in messages] == [str(index) for index in range(20)]


