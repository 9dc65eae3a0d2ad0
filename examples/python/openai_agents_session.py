"""An OpenAI Agents SDK agent whose session lives in contextd, with a stub in place of the LLM.

Needs the extra: `pip install './clients/python[openai-agents]'`. Run a sidecar (`node dist/src/main.js`),
then `python examples/python/openai_agents_session.py`. CONTEXTD_ADDRESS overrides the default
127.0.0.1:7420.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from contextd.client import Client
from contextd.client.openai_agents import ContextdSession
from contextd.v1 import compile_pb2


class StubModel(Model):
    """STUB MODEL, NOT AN LLM: calls the weather tool once, then answers with its result. Use a
    real model (`Agent(model="gpt-4.1")`) instead."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        last = input[-1] if isinstance(input, list) else {"content": input}
        if last.get("type") == "function_call_output":
            text = ResponseOutputText(type="output_text", text=f"It is {last['output']}.", annotations=[])
            output: Any = ResponseOutputMessage(id="msg_" + uuid.uuid4().hex[:8], type="message", role="assistant", status="completed", content=[text])
        elif "weather" in str(last.get("content", "")).lower():
            output = ResponseFunctionToolCall(type="function_call", call_id="call_" + uuid.uuid4().hex[:8], name="weather", arguments='{"city":"Oslo"}')
        else:
            text = ResponseOutputText(type="output_text", text=f"You have said {sum(1 for i in input if i.get('role') == 'user')} things so far.", annotations=[])
            output = ResponseOutputMessage(id="msg_" + uuid.uuid4().hex[:8], type="message", role="assistant", status="completed", content=[text])
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool
def weather(city: str) -> str:
    """The weather in a city (stub)."""
    return f"4°C and light rain in {city}"


async def main() -> None:
    set_tracing_disabled(True)
    with Client(os.environ.get("CONTEXTD_ADDRESS", "127.0.0.1:7420")) as client:
        client.wait_ready()
        # Reads keep what fits 4,000 tokens (contextd's trimming, whole tool rounds), not a count.
        session = ContextdSession("agents-example-" + uuid.uuid4().hex[:8], client, budget=compile_pb2.Budget(max_tokens=4000))
        agent = Agent(name="assistant", model=StubModel(), tools=[weather])
        for question in ["What's the weather in Oslo?", "Thanks!"]:
            result = await Runner.run(agent, question, session=session)
            print(f"user: {question}\nassistant: {result.final_output}")
        print(f"items stored: {len(await session.get_items())}")


if __name__ == "__main__":
    asyncio.run(main())
