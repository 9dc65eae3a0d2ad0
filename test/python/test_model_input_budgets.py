"""The integration points that budget a model call's input through contextd, against a real
sidecar: the Agents SDK's call_model_input_filter (ContextdInputFilter) and LangChain v1's agent
middleware (ContextdMiddleware). Old tool results are cleared (contextd's tool-result clearing,
the placeholder in the model's input), kept items are the framework's own, whole tool rounds."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

pytest.importorskip("agents")
pytest.importorskip("langchain.agents")

from agents.run_config import ModelInputData  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402

from contextd.client import AsyncClient, Client  # noqa: E402
from contextd.client.langchain_middleware import ContextdMiddleware  # noqa: E402
from contextd.client.openai_agents import ContextdInputFilter  # noqa: E402
from contextd.v1 import compile_pb2  # noqa: E402

CHARS = compile_pb2.Estimator(kind=compile_pb2.ESTIMATOR_KIND_CHARS)
CLEARING = compile_pb2.CompileRequest(
    budget=compile_pb2.Budget(tool_result_clearing=compile_pb2.ToolResultClearing(trigger_tokens=400, keep_recent=1, placeholder="[cleared {name}]"))
)
BIG = "row " * 200


def agents_items():
    items = [{"role": "user", "content": "look both up"}]
    for index in range(3):
        items += [
            {"type": "function_call", "call_id": f"call_{index}", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"call_{index}", "output": f"{index}: {BIG}"},
        ]
    return items + [{"role": "user", "content": "and now?"}]


@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_the_agents_filter_clears_old_tool_results_and_keeps_the_rest_as_given(sidecar, kind):
    items = agents_items()

    async def main():
        client = Client(sidecar.address) if kind == "Client" else AsyncClient(sidecar.address)
        try:
            input_filter = ContextdInputFilter(client, template=CLEARING)
            data = SimpleNamespace(model_data=ModelInputData(input=items, instructions="Be brief."), agent=None, context=None)
            return await input_filter(data)
        finally:
            closed = client.close()
            if asyncio.iscoroutine(closed):
                await closed

    filtered = asyncio.run(main())
    assert filtered.instructions == "Be brief."
    outputs = [item["output"] for item in filtered.input if item.get("type") == "function_call_output"]
    assert outputs == ["[cleared lookup]", "[cleared lookup]", f"2: {BIG}"]
    # Everything else is the run's own items, in order.
    assert json.dumps([item for item in filtered.input if item.get("type") != "function_call_output"]) == json.dumps(
        [item for item in items if item.get("type") != "function_call_output"]
    )


def test_the_agents_filter_keeps_the_newest_whole_turns_within_a_budget(sidecar):
    turns = []
    for index in range(5):
        turns += [{"role": "user", "content": f"q{index} " + "x" * 200}, {"role": "assistant", "content": f"a{index} " + "y" * 200}]
    turns.append({"role": "user", "content": "last"})
    with Client(sidecar.address) as client:
        input_filter = ContextdInputFilter(client, budget=compile_pb2.Budget(max_tokens=900, estimator=CHARS))
        data = SimpleNamespace(model_data=ModelInputData(input=turns, instructions=None), agent=None, context=None)
        kept = asyncio.run(input_filter(data)).input
    assert 1 < len(kept) < len(turns) and kept == turns[-len(kept):] and kept[0]["role"] == "user"


def test_the_langchain_middleware_clears_old_tool_results_and_keeps_the_rest_as_given(sidecar):
    messages = [HumanMessage(content="look both up")]
    for index in range(3):
        messages += [
            AIMessage(content="", tool_calls=[{"id": f"call_{index}", "name": "lookup", "args": {}}]),
            ToolMessage(content=f"{index}: {BIG}", tool_call_id=f"call_{index}", name="lookup"),
        ]
    messages.append(HumanMessage(content="and now?"))
    with Client(sidecar.address) as client:
        middleware = ContextdMiddleware(client, template=CLEARING)
        compiled = middleware.compiled_messages(messages, SystemMessage(content="Be brief."))
    assert [m.content for m in compiled if isinstance(m, ToolMessage)] == ["[cleared lookup]", "[cleared lookup]", f"2: {BIG}"]
    assert [m for m in compiled if not isinstance(m, ToolMessage)] == [m for m in messages if not isinstance(m, ToolMessage)]
    assert all(a is b for a, b in zip([m for m in compiled if not isinstance(m, ToolMessage)], [m for m in messages if not isinstance(m, ToolMessage)]))
    assert middleware.last_result is not None and middleware.last_result.usage.cleared_tokens > 0


def test_the_langchain_middleware_budgets_an_async_agent_run(sidecar):
    """create_agent with the middleware, run with ainvoke (awrap_model_call): the model is sent
    the system message and the newest whole turns; the agent's state keeps every message."""
    from typing import Any, List, Optional

    from langchain.agents import create_agent
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.outputs import ChatGeneration, ChatResult

    seen: List[int] = []

    class Counting(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "counting"

        def _generate(self, messages: List[Any], stop: Optional[List[str]] = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
            seen.append(len(messages))
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="ok " + "z" * 100))])

    with Client(sidecar.address) as client:
        budget = compile_pb2.Budget(max_tokens=700, estimator=CHARS)
        agent = create_agent(Counting(), tools=[], system_prompt="Be brief.", middleware=[ContextdMiddleware(client, budget=budget)])
        state: dict = {"messages": []}
        for turn in range(5):
            state = asyncio.run(agent.ainvoke({"messages": state["messages"] + [HumanMessage(content=f"q{turn} " + "x" * 200)]}))
    assert len(state["messages"]) == 10
    assert seen[:2] == [2, 4] and max(seen) < 10 and seen[-1] == seen[-2]
