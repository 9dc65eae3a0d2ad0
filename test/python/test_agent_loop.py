"""A realistic agent loop against a real sidecar backed by a real Redis, through contextd.client."""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import List, Tuple

import pytest

from contextd.client import (
    AsyncClient,
    Client,
    FailedPrecondition,
    InvalidArgument,
    ResourceExhausted,
    ToolRound,
    VersionConflict,
    append_assistant,
    append_messages,
    append_tool_result,
    append_user,
    json_payload,
    remember,
    system_text,
    text_payload,
    tool_call,
    user_text,
)
from contextd.v1 import (
    compile_pb2,
    context_service_pb2,
    conversation_service_pb2 as conversation_pb2,
    message_pb2,
    state_pb2,
    telemetry_service_pb2,
)

CHARS = compile_pb2.Estimator(kind=compile_pb2.ESTIMATOR_KIND_CHARS)
FILLER = "We compared trains, flights and ferries in detail. " * 4


@pytest.fixture()
def client(sidecar) -> Client:
    with Client(sidecar.address) as connected:
        yield connected


def store_trip_planning(client: Client, conversation_id: str) -> Tuple[List[message_pb2.Message], message_pb2.Message]:
    """Stores three units, a parallel tool round and an answer; returns the round and the answer."""
    round_ = (
        ToolRound(
            "Checking weather and trains in parallel.",
            tool_call("call_weather", "weather", '{"city":"Bergen"}'),
            tool_call("call_trains", "trains", '{"from":"Oslo","to":"Bergen"}'),
        )
        .answer("call_trains", text_payload("07:25, 11:25, 15:25. " + FILLER))
        .answer("call_weather", text_payload("Rain, 9°C. " + FILLER))
    )
    response = client.commit(
        conversation_pb2.CommitRequest(
            conversation_id=conversation_id,
            deltas=[
                append_messages(state_pb2.SEGMENT_SYSTEM, system_text("You plan trips.")),
                append_user(user_text("I want to visit Bergen. " + FILLER)),
                append_assistant("Happy to help. " + FILLER),
                append_user(user_text("How is the weather, and which trains go there? " + FILLER)),
                round_.delta(),
                append_assistant("Take the 07:25 train and pack a raincoat. " + FILLER),
            ],
            include_state=True,
        )
    )
    history = list(response.state.history)
    return history[3:6], history[6]


def shape(messages) -> List[str]:
    return [
        message_pb2.Role.Name(m.role).removeprefix("ROLE_") + ":" + ",".join(p.WhichOneof("kind") for p in m.parts)
        for m in messages
    ]


def test_turns_and_parallel_tool_calls_are_stored(client: Client):
    conversation_id = "py-turns"
    steps = [
        [append_user(user_text("Weather in Oslo and time in Tokyo?"))],
        [
            append_assistant(
                "Checking both.",
                tool_call("call_weather", "weather", '{"city":"Oslo"}'),
                tool_call("call_time", "clock", '{"zone":"Asia/Tokyo"}'),
            )
        ],
        [append_tool_result("call_time", "clock", text_payload("09:30"))],
        [append_tool_result("call_weather", "weather", json_payload('{"celsius":4}'))],
        [append_assistant("4°C in Oslo; 09:30 in Tokyo.")],
    ]
    for expected, deltas in enumerate(steps):
        response = client.commit(
            conversation_pb2.CommitRequest(conversation_id=conversation_id, expected_version=expected, deltas=deltas)
        )
        assert response.version == expected + 1
    state = client.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id)).state
    assert shape(state.history) == [
        "USER:text",
        "ASSISTANT:text,tool_call,tool_call",
        "TOOL:tool_result",
        "TOOL:tool_result",
        "ASSISTANT:text",
    ]
    assert all(message.id for message in state.history)


def test_commit_with_retry_resolves_a_conflict(sidecar, client: Client):
    conversation_id = "py-conflict"
    client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, deltas=[append_user(user_text("Book a table."))]))
    seen: List[int] = []

    def apply(state: state_pb2.ConversationState) -> List[state_pb2.Delta]:
        seen.append(state.version)
        if len(seen) == 1:  # another writer commits between this read and this commit
            with Client(sidecar.address) as other:
                other.commit(
                    conversation_pb2.CommitRequest(conversation_id=conversation_id, deltas=[remember("Prefers window seats.")])
                )
        return [append_assistant("Booked for 19:00.")]

    response = client.commit_with_retry(conversation_id, apply)
    assert seen == [1, 2]
    assert response.version == 3 and not response.HasField("state")  # the state only when asked for
    state = client.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id)).state
    assert len(state.experiences) == 1 and len(state.history) == 2

    with pytest.raises(VersionConflict) as conflict:
        client.commit(
            conversation_pb2.CommitRequest(conversation_id=conversation_id, expected_version=1, deltas=[remember("stale")])
        )
    assert conflict.value.current_version == 3


def test_error_codes_for_bad_input(client: Client):
    conversation_id = "py-bad-input"
    client.commit(
        conversation_pb2.CommitRequest(
            conversation_id=conversation_id,
            deltas=[append_user(user_text("Look this up.")), append_assistant("", tool_call("call_1", "search", "{}"))],
        )
    )
    with pytest.raises(InvalidArgument):
        client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id))
    # A user message while the round is open is stored (the approval flow); a call id twice in one
    # round is not.
    with pytest.raises(InvalidArgument, match="call_1"):
        client.commit(
            conversation_pb2.CommitRequest(
                conversation_id=conversation_id,
                deltas=[append_assistant("", tool_call("call_1", "search", "{}"), tool_call("call_1", "search", "{}"))],
            )
        )
    duplicate = user_text("hello")
    duplicate.id = "m1"
    with pytest.raises(InvalidArgument):
        client.compile(compile_pb2.CompileRequest(history=compile_pb2.MessageList(messages=[duplicate, duplicate])))
    with pytest.raises(ResourceExhausted):
        client.compile(
            compile_pb2.CompileRequest(
                current_turn=compile_pb2.CurrentTurn(raw=user_text("long " * 100)),
                budget=compile_pb2.Budget(max_tokens=5, estimator=CHARS),
            )
        )
    with pytest.raises(FailedPrecondition):
        client.compile(
            compile_pb2.CompileRequest(
                history=compile_pb2.MessageList(messages=[user_text("no id")]),
                identity=compile_pb2.IdentityOptions(require_durable=True),
            )
        )
    assert client.get_state(conversation_pb2.GetStateRequest(conversation_id=conversation_id)).state.version == 1


def test_compile_under_budget_keeps_the_round_whole_and_protects_the_current_turn(client: Client):
    conversation_id = "py-trip"
    round_, answer = store_trip_planning(client, conversation_id)
    current_turn = compile_pb2.CurrentTurn(
        raw=user_text("Book it on card 4111 1111 1111 1111."), prompt_safe=user_text("Book it on the card on file.")
    )

    # HISTORY_START_ANY: what the strategy keeps, so the round can be seen kept whole on its own
    # (by default, history after trimming must start on a user turn; checked below).
    def compile_with(max_tokens: int, start: int = compile_pb2.HISTORY_START_ANY) -> compile_pb2.CompileResult:
        request = compile_pb2.CompileRequest(
            conversation_id=conversation_id,
            current_turn=current_turn,
            budget=compile_pb2.Budget(max_tokens=max_tokens, estimator=CHARS, history_start=start),
            # The records of the messages the budget dropped are not in the default answer.
            include=[compile_pb2.COMPILE_RESULT_PART_ALL_TRANSFORMATIONS],
        )
        return client.compile(request).result

    def count(*messages: message_pb2.Message) -> int:
        return client.count_tokens(context_service_pb2.CountTokensRequest(messages=messages, estimator=CHARS)).total

    reserved = compile_with(0).usage.reserved
    round_tokens, answer_tokens = count(*round_), count(answer)

    tight = compile_with(reserved + answer_tokens + round_tokens // 2)
    assert [m.id for m in tight.payload.history[:-1]] == [answer.id]
    for message in round_:
        assert tight.transformations[message.id].action == compile_pb2.TRANSFORMATION_ACTION_DROPPED

    # By default the answer left at the head without its question goes too.
    aligned = compile_with(reserved + answer_tokens + round_tokens // 2, compile_pb2.HISTORY_START_UNSPECIFIED)
    assert len(aligned.payload.history) == 1
    assert aligned.transformations[answer.id].reason == compile_pb2.TRANSFORMATION_REASON_HISTORY_ALIGNMENT

    roomy = compile_with(reserved + answer_tokens + round_tokens)
    assert [m.id for m in roomy.payload.history[:-1]] == [m.id for m in round_] + [answer.id]

    for result in (tight, roomy):
        last = result.payload.history[-1]
        assert last.parts[0].text.text == "Book it on the card on file."
        assert result.transformations[last.id].reason == compile_pb2.TRANSFORMATION_REASON_CURRENT_TURN_PROJECTION
        assert "4111" not in str(result.payload)
        assert result.usage.total <= result.usage.limit


def test_usage_report_corrects_the_next_compiles_budget(sidecar, client: Client):
    history = [
        message_pb2.Message(
            id=f"m{index}",
            role=message_pb2.ROLE_USER if index % 2 == 0 else message_pb2.ROLE_ASSISTANT,
            parts=[message_pb2.Part(text=message_pb2.TextPart(text=f"message {index}"))],
        )
        for index in range(12)
    ]

    def request(model: str) -> compile_pb2.CompileRequest:
        return compile_pb2.CompileRequest(
            history=compile_pb2.MessageList(messages=history),
            budget=compile_pb2.Budget(
                max_tokens=100, estimator=compile_pb2.Estimator(kind=compile_pb2.ESTIMATOR_KIND_FIXED, fixed_per_message=10)
            ),
            render=compile_pb2.RenderOptions(provider=message_pb2.PROVIDER_ANTHROPIC_MESSAGES, model=model),
            include=[compile_pb2.COMPILE_RESULT_PART_PAYLOAD],
        )

    def report(calibration: compile_pb2.TokenCalibration, actual: int) -> context_service_pb2.ReportUsageRequest:
        return context_service_pb2.ReportUsageRequest(
            provider=calibration.provider,
            model=calibration.model,
            estimator=calibration.estimator,
            estimated_tokens=calibration.estimated_tokens,
            actual_input_tokens=actual,
        )

    first = client.compile(request("py-calibrated")).result
    assert (first.calibration.correction, first.calibration.estimated_tokens, len(first.payload.history)) == (1, 100, 10)
    # 125 counted for 100 estimated: later budgets hold estimates to floor(100 / 1.25) = 80.
    reported = client.report_usage(report(first.calibration, 125))
    assert (reported.correction, reported.reports) == (1.25, 1)
    second = client.compile(request("py-calibrated")).result
    assert [m.id for m in second.payload.history] == [m.id for m in history[4:]]
    assert (second.usage.limit, second.calibration.corrected_tokens) == (80, 100)

    async def main() -> None:
        async with AsyncClient(sidecar.address) as aclient:
            result = (await aclient.compile(request("py-calibrated-async"))).result
            # 50 counted for 100 estimated: 200 estimated tokens now fit, all 12 messages.
            assert (await aclient.report_usage(report(result.calibration, 50))).correction == 0.5
            again = (await aclient.compile(request("py-calibrated-async"))).result
            assert (len(again.payload.history), again.usage.limit) == (12, 200)

    asyncio.run(main())


def test_watch_sees_each_commit(client: Client):
    conversation_id = "py-watched"
    texts = ["first", "second", "third"]
    changes: "queue.Queue[conversation_pb2.Change]" = queue.Queue()
    stream = client.watch(conversation_pb2.WatchRequest(conversation_id=conversation_id))

    def consume() -> None:
        for change in stream:
            changes.put(change)
            if change.version == len(texts):
                return

    watcher = threading.Thread(target=consume, daemon=True)
    watcher.start()
    for version, text in enumerate(texts, start=1):
        client.commit(conversation_pb2.CommitRequest(conversation_id=conversation_id, deltas=[append_user(user_text(text))]))
        change = changes.get(timeout=15)
        assert change.version == version
        assert change.deltas[0].append_user.message.parts[0].text.text == text
    watcher.join(timeout=15)

    resumed = client.watch(conversation_pb2.WatchRequest(conversation_id=conversation_id, from_version=1))
    assert [next(resumed).version, next(resumed).version] == [2, 3]
    resumed.close()


def test_async_client_streams_telemetry_and_compile_events(sidecar, client: Client):
    conversation_id = "py-observed"
    store_trip_planning(client, conversation_id)
    request = compile_pb2.CompileRequest(
        conversation_id=conversation_id, budget=compile_pb2.Budget(max_tokens=400, estimator=CHARS)
    )

    async def main() -> None:
        async with AsyncClient(sidecar.address) as aclient:
            received: "asyncio.Queue" = asyncio.Queue()

            async def subscribe() -> None:
                events = aclient.watch_events(telemetry_service_pb2.WatchEventsRequest(conversation_id=conversation_id))
                async for response in events:
                    await received.put(response.event)

            subscriber = asyncio.create_task(subscribe())
            by_compile: dict = {}
            finished = ""
            # The subscription is live once a compile's events arrive; compile until one does.
            while not finished:
                await aclient.compile(request)
                await aclient.compile(compile_pb2.CompileRequest(conversation_id="someone-else"))
                try:
                    while not finished:
                        event = await asyncio.wait_for(received.get(), timeout=0.2)
                        assert event.conversation_id == conversation_id
                        by_compile.setdefault(event.compile_id, []).append(event.WhichOneof("event"))
                        if event.HasField("pipeline_compiled"):
                            finished = event.compile_id
                except asyncio.TimeoutError:
                    pass
            subscriber.cancel()
            kinds = by_compile[finished]
            # The budget trims the head of the history: one event for the run.
            assert "tokens_estimated" in kinds and "history_head_dropped" in kinds, kinds

            streamed: List[str] = []
            result = await aclient.compile_stream(
                context_service_pb2.CompileStreamRequest(request=request),
                lambda event: streamed.append(event.WhichOneof("event")),
            )
            assert streamed and streamed[-1] == "pipeline_compiled"
            assert result.usage.limit == 400 and result.version == 1

    asyncio.run(asyncio.wait_for(main(), timeout=30))
