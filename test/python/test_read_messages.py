"""ReadMessages from the Python clients against a real sidecar (Redis store): a 100,000-message,
50 MB conversation that GetState refuses is read whole in pages, sync and asyncio; the Agents SDK
session and LangChain's history read a 52 MB conversation whole and by its tail, and write on it
(add_items, pop_item, clear_session, add_messages, clear), as `commit_with_retry(history_tail=...)`
does, reading only the tail they change."""

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
        assert [m.id for m in read_history_tail(client, conversation_id, 10, lambda message: 1).messages] == [f"m{i}" for i in range(990, 1_000)]
        # Units only in every 100th message: earlier ranges until three are held.
        held, version = read_history_tail(client, conversation_id, 3, lambda message: 1 if int(message.id[1:]) % 100 == 0 else 0)
        assert version == 1  # the version the tail was read at, for a commit on top of it
        assert held[-1].id == "m999" and sum(1 for m in held if int(m.id[1:]) % 100 == 0) >= 3
        assert len(held) < 1_000
        # Fewer units than wanted in the whole history: all of it.
        assert len(read_history_tail(client, conversation_id, 5, lambda message: 0).messages) == 1_000
        # A wanted count past the uint32 `last` reads the whole history.
        assert len(read_history_tail(client, conversation_id, 2**40, lambda message: 1).messages) == 1_000


def test_the_async_history_reads_match_the_sync_ones(sidecar):
    conversation_id = f"tail-async-{uuid.uuid4().hex}"
    with Client(sidecar.address) as client:
        commit_long_conversation(client, conversation_id, 1_000, 10)
        whole = [message.id for message in read_history(client, conversation_id)]
        sparse = [m.id for m in read_history_tail(client, conversation_id, 3, lambda message: 1 if int(message.id[1:]) % 100 == 0 else 0).messages]

    async def read() -> tuple:
        async with AsyncClient(sidecar.address) as client:
            all_ids = [message.id for message in await read_history_async(client, conversation_id)]
            last = [m.id for m in (await read_history_tail_async(client, conversation_id, 10, lambda message: 1)).messages]
            held = [m.id for m in (await read_history_tail_async(client, conversation_id, 3, lambda message: 1 if int(message.id[1:]) % 100 == 0 else 0)).messages]
            return all_ids, last, held

    all_ids, last, held = asyncio.run(asyncio.wait_for(read(), timeout=60))
    assert all_ids == whole == [f"m{index}" for index in range(1_000)]
    assert last == [f"m{index}" for index in range(990, 1_000)]
    assert held == sparse


# What the adapters are tried on: 20 items or messages of 2.6 MB, in 4 commits of about 13 MB (each
# under the 16 MiB message limit), 52 MB stored: GetState refuses it.
_BIG_COMMITS = 4
_BIG_PER_COMMIT = 5
_BIG_BYTES = 2_600_000


def _big_text(index: int, letter: str) -> str:
    return f"{index} " + letter * _BIG_BYTES


def _commit_with_retry_on_the_tail(client: Client, address: str, conversation_id: str) -> None:
    """`commit_with_retry(history_tail=...)` takes turns on a conversation GetState refuses, sync and asyncio."""
    seen = []

    def append_after(state: state_pb2.ConversationState) -> list:
        seen.append((state.version, [message.id for message in state.history]))
        return [append_user(user_text(f"after {len(state.history)}"))]

    before = list(client.message_pages(conversation_pb2.ReadMessagesRequest(conversation_id=conversation_id, last=2)))
    committed = client.commit_with_retry(conversation_id, append_after, history_tail=2)
    assert committed.version == before[0].version + 1
    assert seen == [(before[0].version, [message.id for page in before for message in page.messages])]

    async def turn() -> int:
        async with AsyncClient(address) as async_client:
            return (await async_client.commit_with_retry(conversation_id, lambda state: [append_user(user_text(f"async after {len(state.history)}"))], history_tail=1)).version

    assert asyncio.run(asyncio.wait_for(turn(), timeout=60)) == committed.version + 1
    last = client.read_messages(conversation_pb2.ReadMessagesRequest(conversation_id=conversation_id, last=2))
    assert [message.parts[0].text.text for message in last.messages] == ["after 2", "async after 1"]
    # Without history_tail the whole state is read, and refused as before.
    with pytest.raises(ResourceExhausted):
        client.commit_with_retry(conversation_id, append_after)


def test_agents_session_reads_and_writes_a_52_mb_conversation(sidecar):
    """get_items / get_items(limit) read a 52 MB session; add_items (input, model and output items),
    pop_item and clear_session write on it; commit_with_retry(history_tail=...) takes turns."""
    pytest.importorskip("agents")
    from contextd.client.openai_agents import ContextdSession

    with Client(sidecar.address) as client:
        session = ContextdSession(f"big-session-{uuid.uuid4().hex}", client)
        for commit in range(_BIG_COMMITS):
            first = commit * _BIG_PER_COMMIT
            asyncio.run(session.add_items([{"role": "user", "content": _big_text(index, "y")} for index in range(first, first + _BIG_PER_COMMIT)]))
        count = _BIG_COMMITS * _BIG_PER_COMMIT
        with pytest.raises(ResourceExhausted) as refused:
            client.get_state(conversation_pb2.GetStateRequest(conversation_id=session.conversation_id))
        assert refused.value.reason == "STATE_TOO_LARGE"
        last = asyncio.run(session.get_items(limit=1))
        assert len(last) == 1 and last[0]["content"].startswith(f"{count - 1} ")
        assert [item["content"].split(" ")[0] for item in asyncio.run(session.get_items(limit=3))] == [str(index) for index in range(count - 3, count)]
        everything = asyncio.run(session.get_items())
        assert [item["content"].split(" ")[0] for item in everything] == [str(index) for index in range(count)]
        assert sum(len(item["content"]) for item in everything) > 52_000_000

        # Writes that read the tail: a model response in two add_items (the second joins the first's
        # ASSISTANT message), its outputs (their tool names from that message), pop_item inside the round.
        call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{}", "status": "completed"}
        reasoning = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look it up."}]}
        output = {"type": "function_call_output", "call_id": "call_1", "output": "22C"}
        asyncio.run(session.add_items([reasoning]))
        asyncio.run(session.add_items([call]))
        asyncio.run(session.add_items([output]))
        assert asyncio.run(session.get_items(limit=3)) == [reasoning, call, output]
        tail = client.read_messages(conversation_pb2.ReadMessagesRequest(conversation_id=session.conversation_id, last=2))
        assert [len(message.parts) for message in tail.messages] == [2, 1]
        assert tail.messages[1].parts[0].tool_result.name == "get_weather"
        assert asyncio.run(session.pop_item()) == output
        assert asyncio.run(session.pop_item()) == call
        assert asyncio.run(session.get_items(limit=2)) == [everything[-1], reasoning]
        assert asyncio.run(session.pop_item()) == reasoning
        assert asyncio.run(session.pop_item())["content"].startswith(f"{count - 1} ")
        assert len(asyncio.run(session.get_items())) == count - 1

        _commit_with_retry_on_the_tail(client, sidecar.address, session.conversation_id)

    async def over_async() -> tuple:
        async with AsyncClient(sidecar.address) as async_client:
            again = ContextdSession(session.session_id, async_client, conversation_id=session.conversation_id)
            limited = await again.get_items(limit=2)
            await again.add_items([reasoning])
            popped = await again.pop_item()
            whole = await again.get_items()
            await again.clear_session()
            return limited, popped, whole, await again.get_items()

    limited, popped, whole, cleared = asyncio.run(asyncio.wait_for(over_async(), timeout=120))
    assert [item["role"] for item in limited] == ["user", "user"] and popped == reasoning
    assert len(whole) == count + 1 and cleared == []


def test_langchain_history_reads_and_writes_a_52_mb_conversation(sidecar):
    pytest.importorskip("langchain_core")
    from langchain_core.messages import AIMessage, HumanMessage

    from contextd.client.langchain_history import ContextdChatMessageHistory

    with Client(sidecar.address) as client:
        history = ContextdChatMessageHistory(f"big-history-{uuid.uuid4().hex}", client)
        for commit in range(_BIG_COMMITS):
            first = commit * _BIG_PER_COMMIT
            history.add_messages([HumanMessage(content=_big_text(index, "z")) for index in range(first, first + _BIG_PER_COMMIT)])
        count = _BIG_COMMITS * _BIG_PER_COMMIT
        with pytest.raises(ResourceExhausted):
            client.get_state(conversation_pb2.GetStateRequest(conversation_id=history.conversation_id))
        messages = history.messages
        assert [message.content.split(" ")[0] for message in messages] == [str(index) for index in range(count)]
        assert sum(len(message.content) for message in messages) > 52_000_000
        history.add_messages([AIMessage(content="read it all"), HumanMessage(content="thanks")])
        tail = client.read_messages(conversation_pb2.ReadMessagesRequest(conversation_id=history.conversation_id, last=2))
        assert [message.parts[0].text.text for message in tail.messages] == ["read it all", "thanks"]
        history.clear()
        assert history.messages == []
