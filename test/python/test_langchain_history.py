"""contextd.client.langchain_history.ContextdChatMessageHistory against a real sidecar (Redis).

langchain-core ships no standard test suite for chat histories (langchain-tests has none either),
so these tests check the contract BaseChatMessageHistory documents: `messages`, `add_message`,
`add_messages` (one round trip for many), `add_user_message` / `add_ai_message`, `clear`, and the
async variants `aget_messages`, `aadd_messages`, `aclear` (the scenarios of langchain-core's own
chat-history unit tests, here against a real store); then that messages come back equal, that they
are stored as contextd's typed messages, budgeted reads, a chat loop with LangChain's fake chat
model, and contextd's history rules.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

pytest.importorskip("langchain_core")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402

from contextd.client import Client, InvalidArgument  # noqa: E402
from contextd.client.langchain_history import MESSAGE_EXTENSION, ContextdChatMessageHistory  # noqa: E402
from contextd.v1 import compile_pb2, conversation_service_pb2 as conversation_pb2, message_pb2, state_pb2  # noqa: E402



@pytest.fixture
def client(sidecar):
    with Client(sidecar.address) as connected:
        yield connected


def new_history(client: Client, **kwargs) -> ContextdChatMessageHistory:
    return ContextdChatMessageHistory(f"langchain-{uuid.uuid4().hex}", client, **kwargs)


def test_add_message_and_add_messages(client):
    history = new_history(client)
    history.add_message(HumanMessage(content="Hello"))
    assert history.messages == [HumanMessage(content="Hello")]
    history.add_message(HumanMessage(content="World"))
    assert history.messages[1] == HumanMessage(content="World")
    history.add_messages([HumanMessage(content="Hello"), HumanMessage(content="World")])
    assert history.messages == [HumanMessage(content="Hello"), HumanMessage(content="World")] * 2


def test_add_messages_is_one_commit(client):
    history = new_history(client)
    history.add_messages([HumanMessage(content="a"), AIMessage(content="b"), HumanMessage(content="c")])
    state = client.get_state(conversation_pb2.GetStateRequest(conversation_id=history.conversation_id)).state
    assert state.version == 1 and len(state.history) == 3


def test_user_and_ai_message_helpers(client):
    history = new_history(client)
    history.add_user_message("hi")
    history.add_ai_message("hello")
    assert history.messages == [HumanMessage(content="hi"), AIMessage(content="hello")]


def test_async_interface(client):
    history = new_history(client)

    async def scenario():
        await history.aadd_messages([HumanMessage(content="Hello"), HumanMessage(content="World")])
        assert await history.aget_messages() == [HumanMessage(content="Hello"), HumanMessage(content="World")]
        await history.aadd_messages([HumanMessage(content="!")])
        assert await history.aget_messages() == [HumanMessage(content="Hello"), HumanMessage(content="World"), HumanMessage(content="!")]
        await history.aclear()
        assert await history.aget_messages() == []

    asyncio.run(scenario())


def test_clear_and_separate_histories(client):
    first, second = new_history(client), new_history(client)
    first.add_user_message("first")
    second.add_user_message("second")
    first.clear()
    assert first.messages == []
    assert second.messages == [HumanMessage(content="second")]


ROUND = [
    SystemMessage(content="Be brief."),
    HumanMessage(content=[{"type": "text", "text": "Weather in Lisbon? ☀"}, {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}], id="h1"),
    AIMessage(
        content="Checking.",
        id="run-1",
        tool_calls=[{"id": "call_1", "name": "get_weather", "args": {"city": "Lisbon"}}, {"id": "call_2", "name": "get_time", "args": {}}],
        additional_kwargs={"refusal": None},
        response_metadata={"model_name": "gpt-4o", "finish_reason": "tool_calls"},
        usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    ),
    ToolMessage(content="22C", tool_call_id="call_1"),
    ToolMessage(content="clock broken", tool_call_id="call_2", status="error"),
    AIMessage(content="22C in Lisbon.", name="weather-bot"),
]


def test_messages_come_back_equal_and_are_stored_typed(client):
    history = new_history(client)
    history.add_messages(ROUND)
    assert history.messages == ROUND
    assert [message.model_dump() for message in history.messages] == [message.model_dump() for message in ROUND]

    stored = client.get_state(conversation_pb2.GetStateRequest(conversation_id=history.conversation_id)).state.history
    shapes = [(message_pb2.Role.Name(message.role), [part.WhichOneof("kind") for part in message.parts]) for message in stored]
    assert shapes == [
        ("ROLE_SYSTEM", ["text"]),
        ("ROLE_USER", ["text", "image"]),
        ("ROLE_ASSISTANT", ["text", "tool_call", "tool_call"]),
        ("ROLE_TOOL", ["tool_result"]),
        ("ROLE_TOOL", ["tool_result"]),
        ("ROLE_ASSISTANT", ["text"]),
    ]
    assert json.loads(stored[2].parts[1].tool_call.arguments.data) == {"city": "Lisbon"}
    assert stored[4].parts[0].tool_result.is_error and stored[4].parts[0].tool_result.name == "get_time"
    assert stored[5].sender_name == "weather-bot"
    assert all(message.extensions[0].type_id == MESSAGE_EXTENSION for message in stored)


def test_budgeted_reads_keep_the_newest_whole_rounds(client):
    chars = compile_pb2.Estimator(kind=compile_pb2.ESTIMATOR_KIND_CHARS)
    history = new_history(client)
    for index in range(4):
        history.add_messages([HumanMessage(content=f"q{index} " + "x" * 300), AIMessage(content=f"a{index} " + "y" * 300)])
    history.add_messages(ROUND[1:])
    everything = history.messages
    budgeted = history.get_messages(compile_pb2.Budget(max_tokens=900, estimator=chars))
    assert 0 < len(budgeted) < len(everything)
    assert budgeted == everything[-len(budgeted):]
    # The tool round (the AIMessage with calls and both results) is kept or dropped whole.
    calls = {call["id"] for message in budgeted if isinstance(message, AIMessage) for call in message.tool_calls}
    results = {message.tool_call_id for message in budgeted if isinstance(message, ToolMessage)}
    assert calls == results
    limited = ContextdChatMessageHistory(history.conversation_id, client, budget=compile_pb2.Budget(max_tokens=900, estimator=chars))
    assert limited.messages == budgeted


def test_a_chat_loop_with_a_langchain_chat_model(client):
    history = new_history(client)
    model = GenericFakeChatModel(messages=iter([AIMessage(content="Hi Ana!"), AIMessage(content="Your name is Ana.")]))
    for question in ["I'm Ana.", "What's my name?"]:
        history.add_user_message(question)
        history.add_message(model.invoke(history.messages))
    assert [message.content for message in history.messages] == ["I'm Ana.", "Hi Ana!", "What's my name?", "Your name is Ana."]


def test_contextd_refuses_a_user_message_while_a_call_is_open(client):
    history = new_history(client)
    with pytest.raises(InvalidArgument) as raised:
        history.add_messages([AIMessage(content="", tool_calls=[{"id": "c1", "name": "f", "args": {}}]), HumanMessage(content="never mind")])
    assert "c1" in raised.value.message
    assert history.messages == []


def test_messages_of_a_stream_ingested_conversation(client):
    history = new_history(client)
    history.add_user_message("hi")
    chunks = [
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}]},
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "lo!"}, "finish_reason": "stop"}]},
    ]
    delta = state_pb2.Delta(append_provider_stream=state_pb2.AppendProviderStream(provider=message_pb2.PROVIDER_OPENAI_CHAT, events=[json.dumps(c).encode() for c in chunks]))
    client.commit(conversation_pb2.CommitRequest(conversation_id=history.conversation_id, deltas=[delta]))
    assert history.messages == [HumanMessage(content="hi"), AIMessage(content="Hello!")]


LONG = "a sentence long enough to be held by a typed part only. " * 3


def test_messages_round_trip_as_in_the_in_memory_history_stored_once(client):
    """The same messages into ContextdChatMessageHistory and LangChain's reference
    InMemoryChatMessageHistory read back equal (dumped alike), long strings, tool-call arguments,
    content blocks, metadata and lone surrogates included; the long strings are stored once and a
    commit whose outcome was unknown is sent again with its key."""
    from langchain_core.chat_history import InMemoryChatMessageHistory
    from langchain_core.messages import message_to_dict

    messages = [
        SystemMessage(content="Be brief. " + LONG),
        HumanMessage(content=[{"type": "text", "text": LONG}, {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 64}}, "a bare string block"], id="h1"),
        AIMessage(content="", tool_calls=[{"id": "call_1", "name": "lookup", "args": {"q": LONG, "n": 0.5, "none": None}}], response_metadata={"model": "m"}, usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}),
        ToolMessage(content=[{"type": "text", "text": "structured " + LONG}], tool_call_id="call_1", artifact={"raw": [1, 2]}),
        AIMessage(content="half a pair \ud83d and " + LONG, additional_kwargs={"note": "\udc00"}),
        HumanMessage(content="こんにちは 😊"),
    ]
    ours, reference = new_history(client), InMemoryChatMessageHistory()
    ours.add_messages(messages)
    reference.add_messages(messages)
    assert json.dumps([message_to_dict(m) for m in ours.messages]) == json.dumps([message_to_dict(m) for m in reference.messages])
    stored = client.get_state(conversation_pb2.GetStateRequest(conversation_id=ours.conversation_id)).state.history
    # A string with a lone surrogate cannot go into a typed part as it is: the extension keeps it.
    assert [LONG in message.extensions[0].payload for message in stored] == [False, False, False, False, True, False]
    assert stored[4].parts[0].text.text == "half a pair \ufffd and " + LONG


def test_a_commit_whose_outcome_was_unknown_is_sent_again_with_its_key(sidecar):
    from contextd.client import RetryPolicy
    from test_outcomes import AnswerCutter

    cutter = AnswerCutter(sidecar.address)
    conversation_id = f"langchain-unknown-{uuid.uuid4().hex}"
    try:
        with Client(cutter.address, retry=RetryPolicy(max_attempts=1)) as cut:
            ContextdChatMessageHistory(conversation_id, cut).add_messages([HumanMessage(content="once")])
        assert cutter.cut
    finally:
        cutter.close()
    with Client(sidecar.address) as reader:
        state = reader.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id)).state
    assert state.version == 1 and len(state.history) == 1
