"""A LangChain v1 agent whose every model call is budgeted by contextd (ContextdMiddleware), with a
stub in place of the LLM that says how much it was sent.

Needs the extra: `pip install './clients/python[langchain]'` (LangChain v1's `langchain` package).
Run a sidecar (`node dist/src/main.js`), then `python examples/python/langchain_middleware.py`.
CONTEXTD_ADDRESS overrides the default 127.0.0.1:7420.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional

from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from contextd.client import Client
from contextd.client.langchain_middleware import ContextdMiddleware
from contextd.v1 import compile_pb2


class CountingModel(BaseChatModel):
    """STUB MODEL, NOT AN LLM: answers with how many messages it was sent. Use a real chat model
    (for example ChatOpenAI) instead."""

    @property
    def _llm_type(self) -> str:
        return "counting-stub"

    def _generate(self, messages: List[BaseMessage], stop: Optional[List[str]] = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        first = next((m for m in messages if isinstance(m, HumanMessage)), None)
        text = f"I was sent {len(messages)} messages, the first human one: {first.content.split(':')[0] if first else '-'}"
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


def main() -> None:
    with Client(os.environ.get("CONTEXTD_ADDRESS", "127.0.0.1:7420")) as client:
        client.wait_ready()
        # 600 tokens by contextd's character estimator: the newest turns that fit, whole.
        budget = compile_pb2.Budget(max_tokens=600, estimator=compile_pb2.Estimator(kind=compile_pb2.ESTIMATOR_KIND_CHARS))
        agent = create_agent(CountingModel(), tools=[], system_prompt="You are brief.", middleware=[ContextdMiddleware(client, budget=budget)])
        messages: List[BaseMessage] = []
        for turn in range(1, 7):
            messages.append(HumanMessage(content=f"question {turn}: " + "tell me more " * 10))
            messages = agent.invoke({"messages": messages})["messages"]
            print(f"turn {turn}: {len(messages)} messages in the agent's state; {messages[-1].content}")


if __name__ == "__main__":
    main()
