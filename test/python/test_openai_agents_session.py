"""contextd.client.openai_agents.ContextdSession against a real sidecar (Redis store).

The first group ports the OpenAI Agents SDK's own session tests (openai-agents-python
tests/memory/test_session.py, written there for SQLiteSession) faithfully to this session, in the
same scenarios and with the same assertions: basic memory across turns, an explicit session,
no session, separate sessions, add/get/clear, pop_item, pop in separate sessions, get_items with a
limit, list input appended by default, session_input_callback, unicode, special characters and SQL
keywords, concurrent writers from threads with their own event loops, and the SessionSettings
tests (default, constructor, limit from settings, explicit limit over settings, RunConfig override).
The SDK parametrizes the runner tests over run, run_sync and run_streamed; here run and run_sync
(the stub model does not stream). Not ported: SQLite-specific tests (connections, file locks) and
the add_items-failure propagation in run_streamed (an SDK runner property, not a session one).

The second group shows what is contextd's: items round-trip byte for byte through the typed model,
tool rounds are stored as contextd tool rounds, pop_item inside a round, budgeted get_items, and
items read from messages contextd ingested from a provider stream.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import uuid
from typing import Any, Dict, List

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.memory import SessionSettings  # noqa: E402

from agents_stub_model import StubModel, call_output, text_output  # noqa: E402
from contextd.client import Client  # noqa: E402
from contextd.client.openai_agents import ITEMS_EXTENSION, ContextdSession  # noqa: E402
from contextd.v1 import compile_pb2, conversation_service_pb2 as conversation_pb2, message_pb2, state_pb2  # noqa: E402

set_tracing_disabled(True)

RUNNERS = ["run", "run_sync"]


@pytest.fixture
def client(sidecar):
    with Client(sidecar.address) as connected:
        yield connected


def new_session(client: Client, **kwargs: Any) -> ContextdSession:
    return ContextdSession(f"agents-{uuid.uuid4().hex}", client, **kwargs)


def run_agent(runner_method: str, agent: Agent, input_data: Any, **kwargs: Any) -> Any:
    if runner_method == "run":
        return asyncio.run(Runner.run(agent, input_data, **kwargs))
    return Runner.run_sync(agent, input_data, **kwargs)


# ---- ported from openai-agents-python tests/memory/test_session.py ----


@pytest.mark.parametrize("runner_method", RUNNERS)
def test_session_memory_basic_functionality(client, runner_method):
    session = new_session(client)
    model = StubModel()
    agent = Agent(name="test", model=model)
    model.set_next_output([text_output("San Francisco")])
    assert run_agent(runner_method, agent, "What city is the Golden Gate Bridge in?", session=session).final_output == "San Francisco"
    model.set_next_output([text_output("California")])
    assert run_agent(runner_method, agent, "What state is it in?", session=session).final_output == "California"
    assert len(model.last_input) > 1


@pytest.mark.parametrize("runner_method", RUNNERS)
def test_session_memory_with_explicit_instance(client, runner_method):
    session = new_session(client)
    model = StubModel()
    agent = Agent(name="test", model=model)
    model.set_next_output([text_output("Hello")])
    assert run_agent(runner_method, agent, "Hi there", session=session).final_output == "Hello"
    model.set_next_output([text_output("I remember you said hi")])
    assert run_agent(runner_method, agent, "Do you remember what I said?", session=session).final_output == "I remember you said hi"


@pytest.mark.parametrize("runner_method", RUNNERS)
def test_session_memory_disabled(runner_method):
    model = StubModel()
    agent = Agent(name="test", model=model)
    model.set_next_output([text_output("Hello")])
    assert run_agent(runner_method, agent, "Hi there").final_output == "Hello"
    model.set_next_output([text_output("I don't remember")])
    assert run_agent(runner_method, agent, "Do you remember what I said?").final_output == "I don't remember"
    assert len(model.last_input) == 1


@pytest.mark.parametrize("runner_method", RUNNERS)
def test_session_memory_different_sessions(client, runner_method):
    model = StubModel()
    agent = Agent(name="test", model=model)
    session_1 = new_session(client)
    model.set_next_output([text_output("I like cats")])
    assert run_agent(runner_method, agent, "I like cats", session=session_1).final_output == "I like cats"
    session_2 = new_session(client)
    model.set_next_output([text_output("I like dogs")])
    assert run_agent(runner_method, agent, "I like dogs", session=session_2).final_output == "I like dogs"
    model.set_next_output([text_output("Yes, you mentioned cats")])
    assert run_agent(runner_method, agent, "What did I say I like?", session=session_1).final_output == "Yes, you mentioned cats"
    contents = [item.get("content") for item in model.last_input if isinstance(item.get("content"), str)]
    assert "I like cats" in contents and "I like dogs" not in contents


def test_session_memory_direct(client):
    session = new_session(client)
    asyncio.run(session.add_items([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"}]))
    retrieved = asyncio.run(session.get_items())
    assert len(retrieved) == 2
    assert retrieved[0].get("role") == "user" and retrieved[0].get("content") == "Hello"
    assert retrieved[1].get("role") == "assistant" and retrieved[1].get("content") == "Hi there!"
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []


def test_session_memory_pop_item(client):
    session = new_session(client)
    assert asyncio.run(session.pop_item()) is None
    items = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"}, {"role": "user", "content": "How are you?"}]
    asyncio.run(session.add_items(items))
    assert len(asyncio.run(session.get_items())) == 3
    popped = asyncio.run(session.pop_item())
    assert popped is not None and popped.get("role") == "user" and popped.get("content") == "How are you?"
    remaining = asyncio.run(session.get_items())
    assert len(remaining) == 2 and remaining[-1].get("content") == "Hi there!"
    popped = asyncio.run(session.pop_item())
    assert popped is not None and popped.get("role") == "assistant" and popped.get("content") == "Hi there!"
    popped = asyncio.run(session.pop_item())
    assert popped is not None and popped.get("role") == "user" and popped.get("content") == "Hello"
    assert asyncio.run(session.pop_item()) is None
    assert asyncio.run(session.get_items()) == []


def test_session_memory_pop_different_sessions(client):
    session_1, session_2 = new_session(client), new_session(client)
    asyncio.run(session_1.add_items([{"role": "user", "content": "Session 1 message"}]))
    asyncio.run(session_2.add_items([{"role": "user", "content": "Session 2 message 1"}, {"role": "user", "content": "Session 2 message 2"}]))
    popped = asyncio.run(session_2.pop_item())
    assert popped is not None and popped.get("content") == "Session 2 message 2"
    assert [item.get("content") for item in asyncio.run(session_1.get_items())] == ["Session 1 message"]
    assert [item.get("content") for item in asyncio.run(session_2.get_items())] == ["Session 2 message 1"]


def test_session_get_items_with_limit(client):
    session = new_session(client)
    contents = ["Message 1", "Response 1", "Message 2", "Response 2", "Message 3", "Response 3"]
    asyncio.run(session.add_items([{"role": "user" if index % 2 == 0 else "assistant", "content": text} for index, text in enumerate(contents)]))
    all_items = asyncio.run(session.get_items())
    assert len(all_items) == 6 and all_items[0].get("content") == "Message 1" and all_items[-1].get("content") == "Response 3"
    assert [item.get("content") for item in asyncio.run(session.get_items(limit=2))] == ["Message 3", "Response 3"]
    assert [item.get("content") for item in asyncio.run(session.get_items(limit=4))] == contents[2:]
    assert [item.get("content") for item in asyncio.run(session.get_items(limit=10))] == contents
    assert asyncio.run(session.get_items(limit=0)) == []


@pytest.mark.parametrize("runner_method", RUNNERS)
def test_session_memory_appends_list_input_by_default(client, runner_method):
    session = new_session(client)
    model = StubModel()
    agent = Agent(name="test", model=model)
    initial_history = [{"role": "user", "content": "Earlier message"}, {"role": "assistant", "content": "Saved reply"}]
    asyncio.run(session.add_items(initial_history))
    list_input = [{"role": "user", "content": "Test message"}]
    model.set_next_output([text_output("This should run")])
    run_agent(runner_method, agent, list_input, session=session)
    assert model.last_input == initial_history + list_input


@pytest.mark.parametrize("runner_method", RUNNERS)
def test_session_callback_prepared_input(client, runner_method):
    session = new_session(client)
    model = StubModel()
    agent = Agent(name="test", model=model)
    initial_history = [{"role": "user", "content": "Hello there."}, {"role": "assistant", "content": "Hi, I'm here to assist you."}]
    asyncio.run(session.add_items(initial_history))

    def filter_assistant_messages(history, new_input):
        return [item for item in history if item["role"] == "user"] + new_input

    new_turn_input = [{"role": "user", "content": "What your name?"}]
    model.set_next_output([text_output("I'm gpt-4o")])
    run_agent(runner_method, agent, new_turn_input, session=session, run_config=RunConfig(session_input_callback=filter_assistant_messages))
    assert model.last_input == [initial_history[0], new_turn_input[0]]


def test_session_unicode_content(client):
    session = new_session(client)
    asyncio.run(session.add_items([{"role": "user", "content": "こんにちは"}, {"role": "assistant", "content": "😊👍"}, {"role": "user", "content": "Привет"}]))
    assert [item.get("content") for item in asyncio.run(session.get_items())] == ["こんにちは", "😊👍", "Привет"]


def test_session_special_characters_and_sql_injection(client):
    session = new_session(client)
    contents = ["O'Reilly", "DROP TABLE sessions;", '"SELECT * FROM users WHERE name = "admin";"', "Robert'); DROP TABLE students;--", "Normal message"]
    asyncio.run(session.add_items([{"role": "user" if index % 2 == 0 else "assistant", "content": text} for index, text in enumerate(contents)]))
    assert [item.get("content") for item in asyncio.run(session.get_items())] == contents


def test_session_concurrent_access(client):
    session = new_session(client)
    items = [{"role": "user", "content": f"Message {i}"} for i in range(10)]

    def add_item(item: Dict[str, Any]) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(session.add_items([item]))
        finally:
            loop.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as executor:
        list(executor.map(add_item, items))
    assert {item.get("content") for item in asyncio.run(session.get_items())} == {f"Message {i}" for i in range(10)}


def test_session_settings_default(client):
    session = new_session(client)
    assert isinstance(session.session_settings, SessionSettings)
    assert session.session_settings.limit is None


def test_session_settings_constructor(client):
    session = new_session(client, session_settings=SessionSettings(limit=5))
    assert session.session_settings is not None and session.session_settings.limit == 5


def test_get_items_uses_session_settings_limit(client):
    session = new_session(client, session_settings=SessionSettings(limit=3))
    asyncio.run(session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(5)]))
    assert [item.get("content") for item in asyncio.run(session.get_items())] == ["Message 2", "Message 3", "Message 4"]


def test_get_items_explicit_limit_overrides_session_settings(client):
    session = new_session(client, session_settings=SessionSettings(limit=5))
    asyncio.run(session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(10)]))
    assert [item.get("content") for item in asyncio.run(session.get_items(limit=2))] == ["Message 8", "Message 9"]


def test_runner_with_session_settings_override(client):
    session = new_session(client, session_settings=SessionSettings(limit=100))
    asyncio.run(session.add_items([{"role": "user", "content": f"Turn {i}"} for i in range(10)]))
    model = StubModel()
    agent = Agent(name="test", model=model)
    model.set_next_output([text_output("Got it")])
    asyncio.run(Runner.run(agent, "New question", session=session, run_config=RunConfig(session_settings=SessionSettings(limit=2))))
    history_items = [item for item in model.last_input if item.get("content") != "New question"]
    assert len(history_items) == 2


# ---- contextd's own ----

# Items of every kind the typed model holds, plus one it has no typed form for (web_search_call).
EVERY_KIND: List[Dict[str, Any]] = [
    {"role": "developer", "content": "Answer briefly."},
    {"role": "user", "content": [{"type": "input_text", "text": "Weather in Lisbon and Porto?"}, {"type": "input_image", "image_url": "https://example.com/map.png", "detail": "low"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Two cities."}], "encrypted_content": "gAAAA+enc=="},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "lisbon weather"}},
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Lisbon\"}", "status": "completed"},
    {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "get_weather", "arguments": "{\"city\":\"Porto\"}", "status": "completed"},
    {"type": "function_call_output", "call_id": "call_1", "output": "22C"},
    {"type": "function_call_output", "call_id": "call_2", "output": "19C"},
    {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "Lisbon 22C, Porto 19C.", "annotations": []}]},
]


def test_items_round_trip_exactly_and_are_typed(client):
    session = new_session(client)
    asyncio.run(session.add_items(EVERY_KIND[:6]))  # a model response split over two add_items
    asyncio.run(session.add_items(EVERY_KIND[6:]))
    assert json.dumps(asyncio.run(session.get_items())) == json.dumps(EVERY_KIND)

    history = client.get_state(conversation_pb2.GetStateRequest(conversation_id=session.conversation_id)).state.history
    shapes = [(message_pb2.Role.Name(message.role), [part.WhichOneof("kind") for part in message.parts]) for message in history]
    assert shapes == [
        ("ROLE_DEVELOPER", ["text"]),
        ("ROLE_USER", ["text", "image"]),
        ("ROLE_ASSISTANT", ["reasoning", "tool_call", "tool_call"]),
        ("ROLE_TOOL", ["tool_result"]),
        ("ROLE_TOOL", ["tool_result"]),
        ("ROLE_ASSISTANT", ["text"]),
    ]
    reasoning = history[2].parts[0].reasoning
    assert (reasoning.item_id, reasoning.text, reasoning.redacted_data) == ("rs_1", "Two cities.", "gAAAA+enc==")
    assert history[2].parts[1].tool_call.item_id == "fc_1"
    assert history[3].parts[0].tool_result.name == "get_weather"
    assert all(extension.type_id == ITEMS_EXTENSION for message in history for extension in message.extensions)

    # The conversation renders for a provider like any other.
    request = compile_pb2.CompileRequest(conversation_id=session.conversation_id, render=compile_pb2.RenderOptions(provider=message_pb2.PROVIDER_OPENAI_RESPONSES, model="gpt-4o"))
    body = json.loads(client.compile(request).result.rendered.json)
    assert [item.get("type") for item in body["input"]] == ["message", "message", "reasoning", "function_call", "function_call", "function_call_output", "function_call_output", "message"]


def test_pop_item_inside_a_tool_round(client):
    session = new_session(client)
    asyncio.run(session.add_items(EVERY_KIND))
    popped = [asyncio.run(session.pop_item()) for _ in range(3)]
    assert popped == [EVERY_KIND[8], EVERY_KIND[7], EVERY_KIND[6]]
    assert asyncio.run(session.get_items()) == EVERY_KIND[:6]
    # The round is open again: the next output answers call_1.
    asyncio.run(session.add_items([EVERY_KIND[6]]))
    assert asyncio.run(session.get_items()) == EVERY_KIND[:7]


def test_runner_with_tools_stores_a_contextd_tool_round(client):
    @function_tool
    def get_weather(city: str) -> str:
        """Current weather."""
        return f"22C in {city}"

    session = new_session(client)
    model = StubModel()
    agent = Agent(name="weather", model=model, tools=[get_weather])
    model.set_next_output([call_output("call_9", "get_weather", '{"city":"Lisbon"}')])
    model.set_next_output([text_output("It is 22C.")])
    assert asyncio.run(Runner.run(agent, "Weather?", session=session)).final_output == "It is 22C."
    model.set_next_output([text_output("You're welcome.")])
    asyncio.run(Runner.run(agent, "Thanks", session=session))
    assert [item.get("type", "message") for item in model.last_input] == ["message", "function_call", "function_call_output", "message", "message"]
    history = client.get_state(conversation_pb2.GetStateRequest(conversation_id=session.conversation_id)).state.history
    assert [message_pb2.Role.Name(message.role) for message in history] == ["ROLE_USER", "ROLE_ASSISTANT", "ROLE_TOOL", "ROLE_ASSISTANT", "ROLE_USER", "ROLE_ASSISTANT"]


def test_budgeted_get_items_keeps_what_contextd_keeps(client):
    chars = compile_pb2.Estimator(kind=compile_pb2.ESTIMATOR_KIND_CHARS)
    session = new_session(client)
    turns = []
    for index in range(6):
        turns += [{"role": "user", "content": f"question {index} " + "x" * 400}, {"role": "assistant", "content": f"answer {index} " + "y" * 400}]
    asyncio.run(session.add_items(turns))
    everything = asyncio.run(session.get_items())
    budgeted = asyncio.run(session.get_items(budget=compile_pb2.Budget(max_tokens=1000, estimator=chars)))
    assert 0 < len(budgeted) < len(everything)
    assert budgeted == everything[-len(budgeted):]  # the newest turns, whole
    assert asyncio.run(session.get_items(limit=1, budget=compile_pb2.Budget(max_tokens=1000, estimator=chars))) == everything[-1:]
    # A session-wide budget applies to the runner's reads.
    limited = new_session(client, budget=compile_pb2.Budget(max_tokens=1000, estimator=chars))
    asyncio.run(limited.add_items(turns))
    model = StubModel()
    model.set_next_output([text_output("ok")])
    asyncio.run(Runner.run(Agent(name="t", model=model), "next", session=limited))
    assert model.last_input == budgeted + [{"role": "user", "content": "next"}]


def test_a_user_item_while_a_call_is_open_is_stored(client):
    # The approval flow: the run stops for an approval and the user speaks meanwhile. contextd
    # stores it as SQLiteSession does; its compile closes the open call for the provider.
    session = new_session(client)
    asyncio.run(session.add_items([{"role": "user", "content": "go"}, EVERY_KIND[4]]))
    asyncio.run(session.add_items([{"role": "user", "content": "never mind"}]))
    assert asyncio.run(session.get_items()) == [{"role": "user", "content": "go"}, EVERY_KIND[4], {"role": "user", "content": "never mind"}]


def test_items_of_a_stream_ingested_conversation(client):
    session = new_session(client)
    asyncio.run(session.add_items([{"role": "user", "content": "hi"}]))
    events = [
        {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": []}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello!"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_stop"},
    ]
    delta = state_pb2.Delta(append_provider_stream=state_pb2.AppendProviderStream(provider=message_pb2.PROVIDER_ANTHROPIC_MESSAGES, events=[json.dumps(e).encode() for e in events]))
    client.commit(conversation_pb2.CommitRequest(conversation_id=session.conversation_id, deltas=[delta]))
    assert asyncio.run(session.get_items()) == [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello!", "annotations": []}]},
    ]
