"""An OpenAI Agents SDK agent whose model input is budgeted by contextd on every model call
(`RunConfig(call_model_input_filter=ContextdInputFilter(...))`), beside a session that keeps every
item, with a stub in place of the LLM that says how much it was sent.

Needs the extra: `pip install './clients/python[openai-agents]'`. Run a sidecar
(`node dist/src/main.js`), then `python examples/python/openai_agents_input_filter.py`.
CONTEXTD_ADDRESS overrides the default 127.0.0.1:7420.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

from agents import Agent, RunConfig, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from contextd.client import Client
from contextd.client.openai_agents import ContextdInputFilter, ContextdSession
from contextd.v1 import compile_pb2


class CountingModel(Model):
    """STUB MODEL, NOT AN LLM: answers with how many items it was sent. Use a real model
    (`Agent(model="gpt-4.1")`) instead."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        first = next(item for item in input if item.get("role") == "user")
        text = ResponseOutputText(type="output_text", text=f"I was sent {len(input)} items, the first user one: {first['content'].split(':')[0]}", annotations=[])
        message = ResponseOutputMessage(id="msg_" + uuid.uuid4().hex[:8], type="message", role="assistant", status="completed", content=[text])
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def main() -> None:
    set_tracing_disabled(True)
    with Client(os.environ.get("CONTEXTD_ADDRESS", "127.0.0.1:7420")) as client:
        client.wait_ready()
        session = ContextdSession("agents-filter-example-" + uuid.uuid4().hex[:8], client)
        # 600 tokens by contextd's character estimator: the newest turns that fit, whole.
        budget = compile_pb2.Budget(max_tokens=600, estimator=compile_pb2.Estimator(kind=compile_pb2.ESTIMATOR_KIND_CHARS))
        config = RunConfig(call_model_input_filter=ContextdInputFilter(client, budget=budget))
        agent = Agent(name="assistant", instructions="You are brief.", model=CountingModel())
        for turn in range(1, 7):
            result = await Runner.run(agent, f"question {turn}: " + "tell me more " * 10, session=session, run_config=config)
            print(f"turn {turn}: {len(await session.get_items())} items in the session; {result.final_output}")


if __name__ == "__main__":
    asyncio.run(main())
