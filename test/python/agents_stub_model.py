"""A stub `agents.Model` for tests: it answers each call with the next scripted output and records
the input it was given. No network, no API key."""

from __future__ import annotations

from typing import Any, List, Optional

from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText


def text_output(text: str, item_id: str = "msg_stub") -> ResponseOutputMessage:
    """An assistant message the model returns."""
    return ResponseOutputMessage(
        id=item_id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def call_output(call_id: str, name: str, arguments: str) -> ResponseFunctionToolCall:
    """A function call the model returns."""
    return ResponseFunctionToolCall(type="function_call", id=f"fc_{call_id}", call_id=call_id, name=name, arguments=arguments, status="completed")


class StubModel(Model):
    """Answers the n-th call with the n-th list given to `script` (or set_next_output)."""

    def __init__(self) -> None:
        self._outputs: List[List[Any]] = []
        self.inputs: List[Any] = []

    def set_next_output(self, output: List[Any]) -> None:
        self._outputs.append(output)

    @property
    def last_input(self) -> Any:
        return self.inputs[-1]

    async def get_response(self, system_instructions: Optional[str], input: Any, model_settings: Any, tools: Any, output_schema: Any, handoffs: Any, tracing: Any, **_: Any) -> ModelResponse:
        self.inputs.append(input)
        if not self._outputs:
            raise AssertionError("the stub model was called more often than scripted")
        return ModelResponse(output=self._outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        # Part of the SDK's Model interface; the ported tests use Runner.run / run_sync only, so a
        # call here is a test that asked for more than this stub scripts: fail it, like get_response.
        raise AssertionError("the stub model was asked to stream; it scripts non-streaming responses only")
