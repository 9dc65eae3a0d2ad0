"""An OpenAI Agents SDK `Session` (package `openai-agents`, extra `contextd[openai-agents]`) that
keeps a session's items in a contextd conversation.

Each item is stored once: as contextd's typed parts (text, tool calls with their arguments, tool
results, reasoning with its item id and encrypted content), so contextd can count, trim, compile
and render the conversation for any provider, and the rest of the item's JSON (keys, ids, status,
short strings, items without a typed form such as built-in tool calls) in the message's `Extension`
(type `openai-agents.items/v2`, never sent to a provider), which names the typed fields holding its
long strings instead of repeating them (`contextd.client._stored_json`). `get_items` gives back
exactly what `add_items` was given, as JSON gives it back (what SQLiteSession stores); a lone
surrogate ("\\ud83d") comes back too, while the typed part a provider sees holds U+FFFD in its
place. Consecutive model-side items (reasoning, assistant messages, function calls, built-in tool
items) share one ASSISTANT message, as one provider response does; each function call output is
one TOOL message; each input message is one message. Messages the conversation got some other way
(for example `append_provider_stream`) have no extension and are read back from their typed parts;
messages written by earlier versions (`openai-agents.items/v1`, a whole JSON copy) are read as
they are.

`get_items(limit=None, budget=None)`: with a `contextd.v1.Budget` (given here or to the session),
the items are those of the messages a contextd compile keeps within the budget, whole tool rounds
at a time, instead of a count; `limit` then keeps the last N of those. The compile reads stored
history only, so its latest user message is trimmed like any other
(`trim_latest_user_message` is set).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, TypeVar, Union

from agents.memory import SessionSettings
from agents.memory.session_settings import coerce_session_settings, resolve_session_limit

from contextd.client._common import keyed_commit
from contextd.client._inline_compile import inline_request, kept_history
from contextd.client._stored_json import Path, PartsBuilder, json_text, restore, wire_text
from contextd.client._sync import Client
from contextd.client.aio import AsyncClient
from contextd.client.errors import OutcomeUnknown, VersionConflict
from contextd.client.history_reads import HistoryTail, read_history, read_history_async, read_history_tail, read_history_tail_async
from contextd.client.retry import DEFAULT_RETRY_POLICY, RetryPolicy
from contextd.v1 import compile_pb2, conversation_service_pb2 as conversation_pb2, message_pb2, state_pb2

ITEMS_EXTENSION = "openai-agents.items/v2"
"""The `Extension.type_id` under which a message keeps the items it stands for, their long strings
held by the typed parts only (`contextd.client._stored_json`)."""

ITEMS_EXTENSION_V1 = "openai-agents.items/v1"
"""The extension of earlier versions, a whole JSON copy of the items; still read."""

EMPTY_SESSION_CONVERSATION_ID = "openai-agents-session:empty"
"""The conversation of the session id "" (which the SDK's stores accept and contextd's
conversation ids do not): a session whose id is this text shares it."""

_INPUT_ROLES = {
    "user": message_pb2.ROLE_USER,
    "system": message_pb2.ROLE_SYSTEM,
    "developer": message_pb2.ROLE_DEVELOPER,
}
_REASONING_SEPARATOR = "\n\n"
_IMAGE_DETAIL = {"low": message_pb2.IMAGE_DETAIL_LOW, "high": message_pb2.IMAGE_DETAIL_HIGH, "auto": message_pb2.IMAGE_DETAIL_AUTO}

Item = Dict[str, Any]
T = TypeVar("T")


def _kind(item: Item) -> str:
    """"input" (one message each), "output" (a function call output: one TOOL message each) or
    "model" (grouped into the ASSISTANT message of one model response)."""
    item_type = item.get("type")
    if item_type in (None, "message") and item.get("role") in _INPUT_ROLES:
        return "input"
    if item_type == "function_call_output":
        return "output"
    return "model"


def _str(value: Any) -> str:
    return wire_text(value) if isinstance(value, str) else ""


def _add_text(parts: PartsBuilder, path: Path, text: str) -> None:
    parts.add(message_pb2.Part(text=message_pb2.TextPart(text=wire_text(text))), (path, "text.text", text))


def _add_content(parts: PartsBuilder, path: Path, content: Any) -> None:
    """The typed parts of a message's `content` (at `path` in the message's items)."""
    if isinstance(content, str):
        if content:
            _add_text(parts, path, content)
        return
    if not isinstance(content, list):
        return
    for index, block in enumerate(content):
        if not isinstance(block, dict):
            continue
        block_type = block.get("type")
        here = path + (index,)
        if block_type in ("input_text", "output_text", "text") and isinstance(block.get("text", ""), str):
            _add_text(parts, here + ("text",), block.get("text", ""))
        elif block_type == "refusal" and isinstance(block.get("refusal", ""), str):
            _add_text(parts, here + ("refusal",), block.get("refusal", ""))
        elif block_type == "input_image" and isinstance(block.get("image_url"), str) and block["image_url"]:
            image = message_pb2.ImagePart(url=wire_text(block["image_url"]), detail=_IMAGE_DETAIL.get(block.get("detail", ""), 0))
            parts.add(message_pb2.Part(image=image), (here + ("image_url",), "image.url", block["image_url"]))
        elif block_type == "input_file":
            uri = block.get("file_url") or block.get("file_id") or ""
            file = message_pb2.FilePart(name=_str(block.get("filename")), uri=_str(uri))
            key = "file_url" if block.get("file_url") else "file_id"
            parts.add(message_pb2.Part(file=file), *([(here + (key,), "file.uri", uri)] if isinstance(uri, str) and uri else []))


def _add_model_item(parts: PartsBuilder, path: Path, item: Item) -> None:
    item_type = item.get("type")
    if item_type in (None, "message"):
        _add_content(parts, path + ("content",), item.get("content"))
    elif item_type == "function_call":
        arguments = item.get("arguments")
        data = arguments if isinstance(arguments, str) and arguments else "{}"
        call = message_pb2.ToolCallPart(
            id=_str(item.get("call_id")),
            name=_str(item.get("name")),
            arguments=message_pb2.ToolPayload(data=wire_text(data)),
            item_id=_str(item.get("id")),
        )
        parts.add(message_pb2.Part(tool_call=call), (path + ("arguments",), "tool_call.arguments.data", arguments))
    elif item_type == "reasoning":
        summary = [entry.get("text", "") for entry in item.get("summary") or [] if isinstance(entry, dict)]
        encrypted = item.get("encrypted_content") or ""
        reasoning = message_pb2.ReasoningPart(
            provider=message_pb2.PROVIDER_OPENAI_RESPONSES,
            item_id=_str(item.get("id")),
            text=wire_text(_REASONING_SEPARATOR.join(text for text in summary if isinstance(text, str))),
            redacted_data=_str(encrypted),
        )
        parts.add(message_pb2.Part(reasoning=reasoning), (path + ("encrypted_content",), "reasoning.redacted_data", encrypted))
    # Built-in tool items (web search, computer use, ...) have no typed form: kept in the extension.


def _message(role: int, parts: PartsBuilder, items: Sequence[Item]) -> message_pb2.Message:
    message = message_pb2.Message(role=role, parts=parts.parts)
    message.extensions.append(parts.extension(ITEMS_EXTENSION, list(items)))
    return message


def messages_for_items(items: Sequence[Item], call_names: Optional[Dict[str, str]] = None) -> List[message_pb2.Message]:
    """The contextd messages standing for `items`, in order (grouped as the module says).
    `call_names` maps call ids to tool names for outputs whose call came earlier."""
    names = dict(call_names or {})
    messages: List[message_pb2.Message] = []
    group: List[Item] = []

    def close_group() -> None:
        if group:
            parts = PartsBuilder()
            for index, item in enumerate(group):
                _add_model_item(parts, (index,), item)
            messages.append(_message(message_pb2.ROLE_ASSISTANT, parts, group[:]))
            group.clear()

    for item in items:
        kind = _kind(item)
        if kind == "model":
            if item.get("type") == "function_call":
                names[_str(item.get("call_id"))] = _str(item.get("name"))
            group.append(item)
            continue
        close_group()
        parts = PartsBuilder()
        if kind == "input":
            _add_content(parts, (0, "content"), item.get("content"))
            messages.append(_message(_INPUT_ROLES[item["role"]], parts, [item]))
            continue
        output = item.get("output")
        call_id = _str(item.get("call_id"))
        if isinstance(output, str):
            payload = message_pb2.ToolPayload(text=wire_text(output))
            field = "tool_result.payload.text"
        else:
            payload = message_pb2.ToolPayload(data=json_text(output))
            field = "tool_result.payload.data"
        result = message_pb2.ToolResultPart(tool_call_id=call_id, name=names.get(call_id, ""), payload=payload)
        parts.add(message_pb2.Part(tool_result=result), ((0, "output"), field, output))
        messages.append(_message(message_pb2.ROLE_TOOL, parts, [item]))
    close_group()
    return messages


def items_of(message: message_pb2.Message) -> List[Item]:
    """The items a message stands for: its extension's, or for a message written some other way,
    items made from its typed parts."""
    for extension in message.extensions:
        if extension.type_id == ITEMS_EXTENSION:
            return restore(extension.payload, message.parts)
        if extension.type_id == ITEMS_EXTENSION_V1:
            return json.loads(extension.payload)
    return _items_from_parts(message)


def _has_items(message: message_pb2.Message) -> bool:
    return any(extension.type_id in (ITEMS_EXTENSION, ITEMS_EXTENSION_V1) for extension in message.extensions)


def _items_from_parts(message: message_pb2.Message) -> List[Item]:
    role = message_pb2.Role.Name(message.role)
    if role in ("ROLE_USER", "ROLE_SYSTEM", "ROLE_DEVELOPER"):
        text = "".join(part.text.text for part in message.parts if part.WhichOneof("kind") == "text")
        return [{"role": role[len("ROLE_"):].lower(), "content": text}]
    items: List[Item] = []
    for part in message.parts:
        kind = part.WhichOneof("kind")
        if kind == "text":
            items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": part.text.text, "annotations": []}]})
        elif kind == "tool_call":
            call: Item = {"type": "function_call", "call_id": part.tool_call.id, "name": part.tool_call.name, "arguments": part.tool_call.arguments.data or part.tool_call.arguments.text or "{}"}
            if part.tool_call.item_id:
                call["id"] = part.tool_call.item_id
            items.append(call)
        elif kind == "reasoning" and part.reasoning.item_id:
            reasoning: Item = {"type": "reasoning", "id": part.reasoning.item_id, "summary": [{"type": "summary_text", "text": part.reasoning.text}] if part.reasoning.text else []}
            if part.reasoning.redacted_data:
                reasoning["encrypted_content"] = part.reasoning.redacted_data
            items.append(reasoning)
        elif kind == "tool_result":
            payload = part.tool_result.payload
            items.append({"type": "function_call_output", "call_id": part.tool_result.tool_call_id, "output": payload.text or payload.data})
    return items


def _call_names(history: Sequence[message_pb2.Message]) -> Dict[str, str]:
    """Tool names of the calls of the last ASSISTANT message (the calls an output may answer)."""
    for message in reversed(history):
        if message.role == message_pb2.ROLE_ASSISTANT:
            return {part.tool_call.id: part.tool_call.name for part in message.parts if part.WhichOneof("kind") == "tool_call"}
    return {}


def _round_start(history: Sequence[message_pb2.Message]) -> int:
    """Where the tail that must be rewritten as a whole starts: a TOOL message cannot be removed
    alone, only with its round (the ASSISTANT message whose calls it answers and every result)."""
    index = len(history) - 1
    while index > 0 and history[index].role == message_pb2.ROLE_TOOL:
        index -= 1
    return index


def _assistant_unit(message: message_pb2.Message) -> int:
    return 1 if message.role == message_pb2.ROLE_ASSISTANT else 0


def _history_delta_append(messages: Sequence[message_pb2.Message]) -> state_pb2.Delta:
    return state_pb2.Delta(append_messages=state_pb2.AppendMessages(segment=state_pb2.SEGMENT_HISTORY, messages=messages))


def _history_delta_remove(ids: Sequence[str]) -> state_pb2.Delta:
    return state_pb2.Delta(remove_messages=state_pb2.RemoveMessages(segment=state_pb2.SEGMENT_HISTORY, ids=ids))


class _BlockingConversation:
    """The session's calls over a blocking `Client`, each in a worker thread."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def history(self, conversation_id: str) -> List[message_pb2.Message]:
        """The whole history, in pages (`ReadMessages`): any size."""
        return await asyncio.to_thread(read_history, self.client, conversation_id)

    async def history_tail(self, conversation_id: str, wanted: int, units: Callable[[message_pb2.Message], int]) -> HistoryTail:
        """The shortest tail of the history holding `wanted` units, and its version (`read_history_tail`)."""
        return await asyncio.to_thread(read_history_tail, self.client, conversation_id, wanted, units)

    async def commit(self, request: conversation_pb2.CommitRequest) -> None:
        await asyncio.to_thread(self.client.commit, request)

    async def compile(self, request: compile_pb2.CompileRequest) -> compile_pb2.CompileResult:
        return (await asyncio.to_thread(self.client.compile, request)).result

    async def clear(self, conversation_id: str) -> None:
        await asyncio.to_thread(self.client.clear, conversation_pb2.ClearRequest(conversation_id=conversation_id))


class _AsyncConversation:
    """The session's calls over an `AsyncClient`, on the caller's event loop."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def history(self, conversation_id: str) -> List[message_pb2.Message]:
        return await read_history_async(self.client, conversation_id)

    async def history_tail(self, conversation_id: str, wanted: int, units: Callable[[message_pb2.Message], int]) -> HistoryTail:
        return await read_history_tail_async(self.client, conversation_id, wanted, units)

    async def commit(self, request: conversation_pb2.CommitRequest) -> None:
        await self.client.commit(request)

    async def compile(self, request: compile_pb2.CompileRequest) -> compile_pb2.CompileResult:
        return (await self.client.compile(request)).result

    async def clear(self, conversation_id: str) -> None:
        await self.client.clear(conversation_pb2.ClearRequest(conversation_id=conversation_id))


async def settled(write: Awaitable[T]) -> T:
    """Runs `write` to its outcome even when the caller is cancelled meanwhile, then re-raises the
    cancellation (as the SDK's own sessions do): a caller that sees CancelledError knows the write
    has either applied or failed, and can read the session to learn which, instead of retrying a
    write that may still land. The write's own error, if any, is hidden behind the cancellation."""
    task = asyncio.ensure_future(write)
    cancellation: Optional[asyncio.CancelledError] = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as error:
            cancellation = cancellation or error
    if cancellation is not None:
        if not task.cancelled():
            task.exception()  # retrieved, so the loop does not report it as never retrieved
        raise cancellation
    return task.result()


class ContextdSession:
    """A `agents.memory.Session` whose items live in the contextd conversation `session_id`
    (or `conversation_id` when given; the session id "" is the conversation
    `EMPTY_SESSION_CONVERSATION_ID`).

    Pass a `contextd.client.Client` (calls run in a worker thread, so the session may be used from
    any event loop and thread, as the SDK's SQLiteSession may), a `contextd.client.AsyncClient`
    (calls run on the event loop the client was created in; no threads), or an `address` for the
    session to connect a `Client` (and `close()` it) itself.

    Writes (`add_items`, `pop_item`, `clear_session`) run to their outcome when the caller is
    cancelled, then the cancellation is raised. A commit whose outcome the client could not learn
    (`OutcomeUnknown`, after a sidecar outage longer than the client's retries) is sent again with
    the idempotency key the error names, `unknown_outcome_retries` more times, so it applies at
    most once; then the last `OutcomeUnknown` is raised. `session_settings` may be a
    `SessionSettings` or a dict of its fields (unknown keys: TypeError), as in the SDK's stores."""

    session_settings: Optional[SessionSettings] = None

    def __init__(
        self,
        session_id: str,
        client: Union[Client, AsyncClient, None] = None,
        *,
        address: Optional[str] = None,
        conversation_id: Optional[str] = None,
        budget: Optional[compile_pb2.Budget] = None,
        session_settings: Union[SessionSettings, Dict[str, Any], None] = None,
        unknown_outcome_retries: int = 3,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        conflict_attempts: int = 10,
    ) -> None:
        self.session_id = session_id
        self.conversation_id = conversation_id or session_id or EMPTY_SESSION_CONVERSATION_ID
        self.session_settings = coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        self._owned = client is None
        if client is None:
            client = Client(address) if address else Client()
        self._conversation: Union[_BlockingConversation, _AsyncConversation] = (
            _AsyncConversation(client) if isinstance(client, AsyncClient) else _BlockingConversation(client)
        )
        self._budget = budget
        self._unknown_outcome_retries = max(unknown_outcome_retries, 0)
        self._retry = retry
        self._conflict_attempts = max(conflict_attempts, 1)
        self._closed = False

    def close(self) -> None:
        """Closes the session, as SQLiteSession.close: later calls raise RuntimeError. The client
        is closed too when the session created it."""
        self._closed = True
        if self._owned and isinstance(self._conversation, _BlockingConversation):
            self._conversation.client.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    async def get_items(self, limit: Optional[int] = None, *, budget: Optional[compile_pb2.Budget] = None) -> List[Item]:
        """The session's items in order; the last `limit` (or `session_settings.limit`) when set
        (0 gives none, a negative limit all, as SQLiteSession); with a budget, only the items of
        the messages contextd keeps within it. With a limit only the tail of the conversation that
        holds those items is read (`ReadMessages`), so `limit=10` costs the same at 1,000 items as
        at 10; without, the history is read in pages, at any size."""
        self._check_open()
        session_limit = resolve_session_limit(limit, self.session_settings)
        chosen_budget = budget if budget is not None else self._budget
        if chosen_budget is None and session_limit == 0:
            return []
        if chosen_budget is None and session_limit is not None and session_limit > 0:
            # Only the tail holding the last `limit` items is read, not the conversation.
            history = (await self._conversation.history_tail(self.conversation_id, session_limit, lambda message: len(items_of(message)))).messages
        else:
            history = await self._conversation.history(self.conversation_id)
        if chosen_budget is not None and history:
            # Stored history only: its latest user message is a past one, trimmed like any other.
            trimming = compile_pb2.Budget()
            trimming.CopyFrom(chosen_budget)
            trimming.trim_latest_user_message = True
            result = await self._conversation.compile(compile_pb2.CompileRequest(conversation_id=self.conversation_id, budget=trimming))
            kept = {message.id for message in result.payload.history}
            history = [message for message in history if message.id in kept]
        items = [item for message in history for item in items_of(message)]
        if session_limit is None or session_limit < 0:
            return items
        return items[-session_limit:] if session_limit > 0 else []

    async def add_items(self, items: List[Item]) -> None:
        """Appends `items`. Model-side items that continue the last stored model response join its
        ASSISTANT message (rewritten in one commit that checks the version, retried on conflict);
        anything else is appended without reading the conversation (outputs read it for their
        calls' tool names)."""
        self._check_open()
        if not items:
            return
        # A copy as JSON gives it (what SQLiteSession stores), so later changes to the caller's
        # items do not reach the stored ones.
        new_items = json.loads(json.dumps(items))
        await settled(self._add(new_items))

    async def _add(self, new_items: List[Item]) -> None:
        if _kind(new_items[0]) != "model":
            # An output's call names come from the last ASSISTANT message: the tail up to it is read, not the conversation.
            names = _call_names((await self._conversation.history_tail(self.conversation_id, 1, _assistant_unit)).messages) if _kind(new_items[0]) == "output" else {}
            request = conversation_pb2.CommitRequest(conversation_id=self.conversation_id, deltas=[_history_delta_append(messages_for_items(new_items, names))])
            await self._commit(request)
            return

        def apply(tail: List[message_pb2.Message]) -> List[state_pb2.Delta]:
            last = tail[-1] if tail else None
            if last is not None and last.role == message_pb2.ROLE_ASSISTANT and _has_items(last):
                merged = messages_for_items(items_of(last) + new_items)
                return [_history_delta_remove([last.id]), _history_delta_append(merged)]
            return [_history_delta_append(messages_for_items(new_items))]

        # Only the last message can be rewritten: it is all that is read.
        await self._commit_on_tail(1, lambda message: 1, apply)

    async def pop_item(self) -> Optional[Item]:
        """Removes and returns the most recent item (None when there is none). The messages from
        the last tool round's ASSISTANT message on are rewritten without it, in one commit that
        checks the version. Only the tail holding the last two ASSISTANT messages is read (the
        round and the calls before it that its outputs may answer), at any size of the
        conversation."""
        self._check_open()
        popped: List[Optional[Item]] = [None]

        def apply(history: List[message_pb2.Message]) -> Optional[List[state_pb2.Delta]]:
            popped[0] = None
            if not history:
                return None
            start = _round_start(history)
            tail = history[start:]
            tail_items = [item for message in tail for item in items_of(message)]
            deltas = [_history_delta_remove([message.id for message in tail])]
            if tail_items:
                popped[0] = tail_items.pop()
            if tail_items:
                deltas.append(_history_delta_append(messages_for_items(tail_items, _call_names(history[:start]))))
            return deltas

        await settled(self._commit_on_tail(2, _assistant_unit, apply))
        return popped[0]

    async def clear_session(self) -> None:
        """Empties the conversation (its version still advances)."""
        self._check_open()
        await settled(self._conversation.clear(self.conversation_id))

    async def _commit_on_tail(
        self,
        wanted: int,
        units: Callable[[message_pb2.Message], int],
        apply: Callable[[List[message_pb2.Message]], Optional[List[state_pb2.Delta]]],
    ) -> None:
        """Reads the shortest tail of the history holding `wanted` units (`read_history_tail`) and
        commits `apply`'s deltas expecting the version it was read at; on a conflict reads again,
        up to the session's conflict attempts. `apply` returning None commits nothing."""
        for attempt in range(1, self._conflict_attempts + 1):
            tail = await self._conversation.history_tail(self.conversation_id, wanted, units)
            deltas = apply(tail.messages)
            if deltas is None:
                return
            request = conversation_pb2.CommitRequest(conversation_id=self.conversation_id, expected_version=tail.version, deltas=deltas)
            try:
                await self._commit(request)
                return
            except VersionConflict:
                if attempt == self._conflict_attempts:
                    raise
            await asyncio.sleep(self._retry.backoff(attempt))

    async def _commit(self, request: conversation_pb2.CommitRequest) -> None:
        """Commits `request` under one idempotency key, sending it again with that key while its
        outcome stays unknown (up to `unknown_outcome_retries` times)."""
        keyed = keyed_commit(request)
        for attempt in range(1, self._unknown_outcome_retries + 2):
            try:
                await self._conversation.commit(keyed)
                return
            except OutcomeUnknown as error:
                if attempt > self._unknown_outcome_retries:
                    raise
                keyed.idempotency_key = error.idempotency_key
            await asyncio.sleep(self._retry.backoff_bound(attempt))


class ContextdInputFilter:
    """A `RunConfig(call_model_input_filter=...)` that budgets each model call's input through
    contextd, beside (or without) a session: the input items and the instructions are compiled
    inline (nothing is stored) within `budget`, with the compile options of `template` (clearing,
    tool-round repair, the estimator; no conversation or commit), and the model gets the items of
    the messages contextd keeps, in order: the newest first, whole tool rounds, the latest user
    message protected. Items contextd keeps unchanged are the run's own; items of a message
    contextd changed (a cleared tool result) carry its compiled strings. The session keeps every
    item: only what the model sees is budgeted. Takes a `Client` or an `AsyncClient`."""

    def __init__(
        self,
        client: Union[Client, AsyncClient],
        *,
        budget: Optional[compile_pb2.Budget] = None,
        template: Optional[compile_pb2.CompileRequest] = None,
    ) -> None:
        self._conversation: Union[_BlockingConversation, _AsyncConversation] = (
            _AsyncConversation(client) if isinstance(client, AsyncClient) else _BlockingConversation(client)
        )
        self._budget = budget
        self._template = template
        #: The last compile's result (tokens, decisions, warnings), for logs and tests.
        self.last_result: Optional[compile_pb2.CompileResult] = None

    async def __call__(self, data: Any) -> Any:
        from agents.run_config import ModelInputData

        model_data = data.model_data
        items = json.loads(json.dumps(model_data.input))
        sent = messages_for_items(items)
        for index, message in enumerate(sent):
            message.id = f"item-{index}"
        system = []
        if model_data.instructions:
            instructions = message_pb2.Message(id="instructions", role=message_pb2.ROLE_SYSTEM, parts=[message_pb2.Part(text=message_pb2.TextPart(text=wire_text(model_data.instructions)))])
            system.append(instructions)
        result = await self._conversation.compile(inline_request(sent, system, self._budget, self._template))
        self.last_result = result
        kept: List[Item] = []
        for index, changed, compiled in kept_history(sent, result):
            kept += items_of(compiled if changed or index is None else sent[index])
        return ModelInputData(input=kept, instructions=model_data.instructions)
