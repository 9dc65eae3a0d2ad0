"""The Python client against a real sidecar: Fork, GetState at a past version and Rewind (docs/history.md)."""

import asyncio
import uuid

import pytest

from contextd.client import AlreadyExists, AsyncClient, Client, OutOfRange, VersionConflict, append_user, user_text
from contextd.v1 import conversation_service_pb2 as conversation_pb2


def test_fork_read_a_past_version_and_rewind(sidecar):
    conversation = "py-history-" + uuid.uuid4().hex
    with Client(sidecar.address) as client:
        client.wait_ready(timeout=10)
        for version, text in enumerate(["plan a trip", "to Oslo", "no, to Tokyo"]):
            client.commit(conversation_pb2.CommitRequest(conversation_id=conversation, expected_version=version, deltas=[append_user(user_text(text))]))
        past = client.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation, at_version=2)).state
        assert (past.version, len(past.history)) == (2, 2)

        forked = client.fork(conversation_pb2.ForkRequest(conversation_id=conversation, at_version=2, new_conversation_id=conversation + "-branch"))
        assert (forked.version, forked.forked_from.conversation_id, forked.forked_from.version) == (1, conversation, 2)
        branch = client.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation + "-branch")).state
        assert list(branch.history) == list(past.history)
        assert (branch.forked_from.conversation_id, branch.forked_from.version) == (conversation, 2)
        with pytest.raises(AlreadyExists, match="already exists"):
            client.fork(conversation_pb2.ForkRequest(conversation_id=conversation, new_conversation_id=conversation + "-branch"))

        rewound = client.rewind(conversation_pb2.RewindRequest(conversation_id=conversation, to_version=2, expected_version=3))
        assert (rewound.version, rewound.replayed) == (4, False)
        assert list(client.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation)).state.history) == list(past.history)
        with pytest.raises(VersionConflict):
            client.rewind(conversation_pb2.RewindRequest(conversation_id=conversation, to_version=1, expected_version=3))
        with pytest.raises(OutOfRange, match="past its current version 4"):
            client.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation, at_version=9))


def test_async_client_forks_and_rewinds(sidecar):
    asyncio.run(_forks_and_rewinds(sidecar.address))


async def _forks_and_rewinds(address):
    conversation = "py-history-async-" + uuid.uuid4().hex
    async with AsyncClient(address) as client:
        await client.wait_ready(timeout=10)
        await client.commit(conversation_pb2.CommitRequest(conversation_id=conversation, deltas=[append_user(user_text("one"))]))
        await client.commit(conversation_pb2.CommitRequest(conversation_id=conversation, deltas=[append_user(user_text("two"))]))
        forked = await client.fork(conversation_pb2.ForkRequest(conversation_id=conversation, new_conversation_id=conversation + "-copy"))
        assert (forked.version, forked.forked_from.version) == (1, 2)
        rewound = await client.rewind(conversation_pb2.RewindRequest(conversation_id=conversation, to_version=1, idempotency_key="undo"))
        again = await client.rewind(conversation_pb2.RewindRequest(conversation_id=conversation, to_version=1, idempotency_key="undo"))
        assert (rewound.version, again.version, again.replayed) == (3, 3, True)
