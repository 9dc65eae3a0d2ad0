"""Client.compile_session and AsyncClient.compile_session against a real sidecar on a real Redis."""

from __future__ import annotations

import asyncio
from typing import List, Sequence

import pytest

from contextd.client import (
    AsyncClient,
    Client,
    ToolRound,
    append_assistant,
    append_user,
    assistant_text,
    text_payload,
    tool_call,
    user_text,
)
from contextd.v1 import compile_pb2, context_service_pb2, conversation_service_pb2 as conversation_pb2, message_pb2, state_pb2

TEN = compile_pb2.Estimator(kind=compile_pb2.ESTIMATOR_KIND_FIXED, fixed_per_message=10)


@pytest.fixture()
def client(sidecar) -> Client:
    with Client(sidecar.address) as connected:
        yield connected


def store_eight_messages(client: Client, conversation_id: str) -> state_pb2.ConversationState:
    """user, a tool round with two calls (3 messages), user, assistant, user, assistant."""
    round_ = (
        ToolRound("", tool_call("c1", "search", '{"q":"a"}'), tool_call("c2", "search", '{"q":"b"}'))
        .answer("c1", text_payload("a"))
        .answer("c2", text_payload("b"))
    )
    response = client.commit(
        conversation_pb2.CommitRequest(
            conversation_id=conversation_id,
            deltas=[
                append_user(user_text("look up a and b")),
                round_.delta(),
                append_user(user_text("thanks")),
                append_assistant("you're welcome"),
                append_user(user_text("one more")),
                append_assistant("sure"),
            ],
            include_state=True,
        )
    )
    return response.state


def ids(messages: Sequence[message_pb2.Message]) -> List[str]:
    return [message.id for message in messages]


def test_compile_session_stores_the_summary_and_remembers_facts(client: Client):
    stored = store_eight_messages(client, "py-session")
    history = ids(stored.history)
    asked: List[List[str]] = []

    def summarize(messages: Sequence[message_pb2.Message], target_tokens: int):
        asked.append(ids(messages))
        assert target_tokens == 30
        return assistant_text("The user looked up a and b."), ["the user likes short answers"]

    result = client.compile_session(
        compile_pb2.CompileRequest(
            conversation_id="py-session",
            budget=compile_pb2.Budget(max_tokens=50, strategy=compile_pb2.BUDGET_STRATEGY_SUMMARIZE, estimator=TEN),
            commit=compile_pb2.CommitOptions(expected_version=stored.version),
        ),
        summarize,
    )
    # 50 available, 12 kept free for the summary: whole units go from the head until 38 remain,
    # and the answer after them too, so that a user turn follows the summary.
    assert asked == [history[:6]]
    head = result.payload.history[0]
    assert list(head.provenance.summary.covered_message_ids) == history[:6]
    assert ids(result.payload.history[1:]) == history[6:]
    assert result.committed_version == stored.version + 1

    state = client.get_state(conversation_pb2.GetStateRequest(conversation_id="py-session")).state
    assert ids(state.history) == [head.id, *history[6:]]
    assert [experience.text for experience in state.experiences] == ["the user likes short answers"]
    system = client.compile(compile_pb2.CompileRequest(conversation_id="py-session")).result.payload.system
    assert [message.parts[0].text.text for message in system] == ["<experience>\n- [exp_1] the user likes short answers"]


def test_a_failing_summarize_cancels_the_session_and_commits_nothing(client: Client):
    stored = store_eight_messages(client, "py-session-error")

    def summarize(messages: Sequence[message_pb2.Message], target_tokens: int):
        raise RuntimeError("model unavailable")

    with pytest.raises(RuntimeError, match="model unavailable"):
        client.compile_session(
            compile_pb2.CompileRequest(
                conversation_id="py-session-error",
                budget=compile_pb2.Budget(context_window=70, output_reserve=20, auto_compact=True, estimator=TEN),
                commit=compile_pb2.CommitOptions(expected_version=stored.version),
            ),
            summarize,
        )
    state = client.get_state(conversation_pb2.GetStateRequest(conversation_id="py-session-error")).state
    assert state.version == stored.version


def test_async_compile_session_with_a_coroutine_summarizer(sidecar, client: Client):
    stored = store_eight_messages(client, "py-session-async")
    history = ids(stored.history)

    async def summarize(messages: Sequence[message_pb2.Message], target_tokens: int) -> message_pb2.Message:
        await asyncio.sleep(0)
        return assistant_text(f"{len(messages)} messages about a and b")

    async def main() -> compile_pb2.CompileResult:
        async with AsyncClient(sidecar.address) as aclient:
            return await aclient.compile_session(
                compile_pb2.CompileRequest(
                    conversation_id="py-session-async",
                    current_turn=compile_pb2.CurrentTurn(raw=user_text("and now?")),
                    budget=compile_pb2.Budget(context_window=70, output_reserve=20, auto_compact=True, estimator=TEN),
                    commit=compile_pb2.CommitOptions(expected_version=stored.version),
                ),
                summarize,
            )

    result = asyncio.run(main())
    # 50 tokens minus the current turn's 10 leave 40 for history; 10 kept free for the summary.
    # The summary also covers the answer after the dropped units, so a user turn follows it.
    head, *rest = result.payload.history
    assert list(head.provenance.summary.covered_message_ids) == history[:6]
    assert head.parts[0].text.text == "6 messages about a and b"
    assert ids(rest[:-1]) == history[6:] and rest[-1].parts[0].text.text == "and now?"
    state = client.get_state(conversation_pb2.GetStateRequest(conversation_id="py-session-async")).state
    assert ids(state.history)[0] == head.id and state.history[-1].parts[0].text.text == "and now?"


def store_a_failing_test_run(client: Client, conversation_id: str) -> state_pb2.ConversationState:
    """user, a run_tests round whose result is an error, assistant, user, assistant."""
    round_ = ToolRound("", tool_call("c1", "run_tests", '{"command":"pytest tests/test_parser.py"}')).answer(
        "c1", text_payload("FAILED tests/test_parser.py::test_empty"), is_error=True
    )
    return client.commit(
        conversation_pb2.CommitRequest(
            conversation_id=conversation_id,
            deltas=[
                append_user(user_text("the parser in src/parser.py breaks on empty input")),
                round_.delta(),
                append_assistant("one test fails"),
                append_user(user_text("fix it")),
                append_assistant("fixed"),
            ],
            include_state=True,
        )
    ).state


def summary_request(conversation_id: str, version: int) -> compile_pb2.CompileRequest:
    return compile_pb2.CompileRequest(
        conversation_id=conversation_id,
        budget=compile_pb2.Budget(max_tokens=30, strategy=compile_pb2.BUDGET_STRATEGY_SUMMARIZE, estimator=TEN),
        commit=compile_pb2.CommitOptions(expected_version=version),
    )


def fact_lines(asked: context_service_pb2.SummarizeRequest) -> List[str]:
    return [f"{context_service_pb2.SummaryFactKind.Name(fact.kind)} {fact.text}" for fact in asked.facts]


EXPECTED_FACTS = [
    "SUMMARY_FACT_KIND_FILE_PATH src/parser.py",
    "SUMMARY_FACT_KIND_COMMAND pytest tests/test_parser.py",
    "SUMMARY_FACT_KIND_ERROR_MESSAGE FAILED tests/test_parser.py::test_empty",
    "SUMMARY_FACT_KIND_TOOL_NAME run_tests",
]


def test_compile_session_with_evidence_hands_the_summarizer_the_template_and_facts(client: Client):
    stored = store_a_failing_test_run(client, "py-session-evidence")
    seen: List[context_service_pb2.SummarizeRequest] = []

    def summarize(asked: context_service_pb2.SummarizeRequest):
        seen.append(asked)
        return assistant_text("The parser broke on empty input: " + "; ".join(fact.text for fact in asked.facts))

    result = client.compile_session_with_evidence(summary_request("py-session-evidence", stored.version), summarize)
    assert len(seen) == 1
    asked = seen[0]
    assert [section.key for section in asked.template.sections] == ["goal", "decisions", "open_questions", "files", "commands", "errors"]
    assert "## Files" in asked.template.text
    assert set(EXPECTED_FACTS) <= set(fact_lines(asked)), fact_lines(asked)
    assert not asked.facts_truncated
    assert [message.id for message in asked.messages] == list(result.payload.history[0].provenance.summary.covered_message_ids)


def test_async_compile_session_with_evidence(sidecar, client: Client):
    stored = store_a_failing_test_run(client, "py-session-evidence-async")
    seen: List[List[str]] = []

    async def summarize(asked: context_service_pb2.SummarizeRequest) -> message_pb2.Message:
        await asyncio.sleep(0)
        seen.append(fact_lines(asked))
        return assistant_text(f"{len(asked.facts)} facts kept")

    async def main() -> compile_pb2.CompileResult:
        async with AsyncClient(sidecar.address) as aclient:
            return await aclient.compile_session_with_evidence(summary_request("py-session-evidence-async", stored.version), summarize)

    result = asyncio.run(main())
    assert len(seen) == 1 and set(EXPECTED_FACTS) <= set(seen[0]), seen
    assert result.payload.history[0].parts[0].text.text == f"{len(seen[0])} facts kept"
