"""A LangChain v1 agent middleware (package `langchain`, extra `contextd-client[langchain]`) that
compiles the messages of every model call through contextd: `wrap_model_call` sends the agent's
messages and system message as an inline compile (nothing is stored) within a budget, with the
compile options of a template (tool-result and reasoning clearing, tool-round repair, the
estimator), and calls the model with the messages contextd keeps, in order. Messages contextd
keeps unchanged are the agent's own objects; a tool result contextd cleared is the agent's
ToolMessage with the compiled content; a message contextd made (a summary) is read from its
typed parts. The agent's state is not changed: only what the model sees is.

    agent = create_agent(model, tools, middleware=[ContextdMiddleware(client, budget=Budget(max_tokens=8000))])
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, List, Optional

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from contextd.client._inline_compile import inline_request, kept_history
from contextd.client._sync import Client
from contextd.client.langchain_history import langchain_message_of, message_for
from contextd.v1 import compile_pb2, message_pb2


class ContextdMiddleware(AgentMiddleware):
    """Budgets each model call's messages through contextd (see the module). `budget` is the
    token budget (None: the template's, or contextd's default of no limit); `template` a
    `CompileRequest` holding the other compile options, without a conversation or commit."""

    def __init__(self, client: Client, *, budget: Optional[compile_pb2.Budget] = None, template: Optional[compile_pb2.CompileRequest] = None) -> None:
        super().__init__()
        self._client = client
        self._budget = budget
        self._template = template
        #: The last compile's result (tokens, decisions, warnings), for logs and tests.
        self.last_result: Optional[compile_pb2.CompileResult] = None

    def compiled_messages(self, messages: List[BaseMessage], system: Optional[BaseMessage] = None) -> List[BaseMessage]:
        """The messages contextd keeps of `messages` (with `system` counted, not returned)."""
        sent = []
        for index, message in enumerate(messages):
            converted = message_for(message)
            converted.id = f"lc-{index}"
            sent.append(converted)
        system_messages = [message_for(system)] if system is not None else []
        for index, message in enumerate(system_messages):
            message.id = f"lc-system-{index}"
        request = inline_request(sent, system_messages, self._budget, self._template)
        result = self._client.compile(request).result
        self.last_result = result
        return [_framework_message(messages, index, changed, compiled) for index, changed, compiled in kept_history(sent, result)]

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        return handler(request.override(messages=self.compiled_messages(list(request.messages), request.system_message)))

    async def awrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]) -> Any:
        messages = await asyncio.to_thread(self.compiled_messages, list(request.messages), request.system_message)
        return await handler(request.override(messages=messages))


def _framework_message(messages: List[BaseMessage], index: Optional[int], changed: bool, compiled: message_pb2.Message) -> BaseMessage:
    if index is None:
        return langchain_message_of(compiled)
    original = messages[index]
    if not changed:
        return original
    if isinstance(original, ToolMessage):
        result = next(part.tool_result for part in compiled.parts if part.WhichOneof("kind") == "tool_result")
        return original.model_copy(update={"content": result.payload.text or result.payload.data})
    if isinstance(original, AIMessage):
        # Reasoning or text the compile cleared: the typed parts' text, the calls as they were.
        text = "".join(part.text.text for part in compiled.parts if part.WhichOneof("kind") == "text")
        return original.model_copy(update={"content": text})
    return langchain_message_of(compiled)
