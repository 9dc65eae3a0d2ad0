"""The Python client against a real sidecar: conversation metadata and ListConversations by update."""

import time
import uuid

import pytest

from contextd.client import Client, VersionConflict, append_user, prune_history, set_metadata, user_text
from contextd.v1 import conversation_service_pb2 as conversation_pb2


def test_set_metadata_and_list_newest_update_first_by_label(sidecar):
    prefix = "py-listed-" + uuid.uuid4().hex + "/"
    since = int(time.time() * 1000)
    with Client(sidecar.address) as client:
        client.wait_ready(timeout=10)
        client.commit(conversation_pb2.CommitRequest(conversation_id=prefix + "first", deltas=[append_user(user_text("one")), set_metadata(title="First", labels={"app": "demo"})]))
        client.commit(conversation_pb2.CommitRequest(conversation_id=prefix + "skipped", deltas=[set_metadata(labels={"app": "other"})]))
        client.commit(conversation_pb2.CommitRequest(conversation_id=prefix + "second", deltas=[set_metadata(title="Second", labels={"app": "demo", "draft": "yes"})]))
        client.commit(conversation_pb2.CommitRequest(conversation_id=prefix + "second", deltas=[set_metadata(remove_labels=["draft"])]))
        page = client.list_conversations(
            conversation_pb2.ListConversationsRequest(
                prefix=prefix, labels={"app": "demo"}, order=conversation_pb2.CONVERSATION_ORDER_UPDATED_DESC, updated_since_unix_ms=since
            )
        )
    listed = [(summary.conversation_id[len(prefix):], summary.title, dict(summary.labels), summary.version) for summary in page.conversations]
    assert listed == [("second", "Second", {"app": "demo"}, 2), ("first", "First", {"app": "demo"}, 1)]
    assert page.conversations[0].updated_at_unix_ms >= page.conversations[1].updated_at_unix_ms >= since
    assert page.conversations[1].created_at_unix_ms >= since
    assert page.next_page_token == ""


def test_prune_delete_and_export_conversations(sidecar):
    prefix = "py-retention-" + uuid.uuid4().hex + "/"
    with Client(sidecar.address) as client:
        client.wait_ready(timeout=10)
        for name in ("a", "b"):
            client.commit(conversation_pb2.CommitRequest(conversation_id=prefix + name, deltas=[append_user(user_text("one")), append_user(user_text("two"))]))
        pruned = client.commit(
            conversation_pb2.CommitRequest(conversation_id=prefix + "a", expected_version=1, deltas=[prune_history(max_messages=1), set_metadata(idle_ttl_ms=-1)], include_state=True)
        )
        assert [message.provenance.WhichOneof("kind") for message in pruned.state.history] == ["summary", None]
        assert pruned.state.idle_ttl_ms == -1
        exported = [(item.state.conversation_id[len(prefix):], item.state.version) for item in client.export_conversations(conversation_pb2.ExportConversationsRequest(prefix=prefix))]
        assert exported == [("a", 2), ("b", 1)]
        with pytest.raises(VersionConflict):
            client.delete_conversation(conversation_pb2.DeleteConversationRequest(conversation_id=prefix + "a", expected_version=1))
        assert client.delete_conversation(conversation_pb2.DeleteConversationRequest(conversation_id=prefix + "a", expected_version=2)).deleted_version == 2
        page = client.delete_conversations(conversation_pb2.DeleteConversationsRequest(prefix=prefix))
        assert (page.deleted, page.next_page_token) == (1, "")
        assert client.get_state(conversation_pb2.GetStateRequest(conversation_id=prefix + "b")).state.version == 0
