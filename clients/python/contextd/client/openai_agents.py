"""An OpenAI Agents SDK `Session` (package `openai-agents`, extra `contextd[openai-agents]`) that
keeps a session's items in a contextd conversation.

Each item is stored twice in one place: as contextd's typed parts (text, tool calls with their
arguments, tool results, reasoning with its item id and encrypted content), so contextd can count,
trim, compile and render the conversation for any provider, and as the item's own JSON in the
message's `Extension` (type `openai-agents.items/v1`, never sent to a provider), so `get_items`
gives back exactly what `add_items` was given. Consecutive model-side items (reasoning, assistant
messages, function calls, built-in tool items) share one ASSISTANT message, as one provider
response does; each function call output is one TOOL message; each input message is one message.
Messages the conversation got some other way (for example `append_provider_stream`) have no
extension and are read back from their typed parts.

`get_items(limit=None, budget=None)`: with a `contextd.v1.Budget` (given here or to the session),
the items are those of the messages a contextd compile keeps within the budget, whole tool rounds
at a time, instead of a count; `limit` then keeps the last N of those. The compile reads stored
history only, so its latest user message is trimmed like any other
(`trim_latest_user_message` is set).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, List, Optional, Sequence

from agents.memory import SessionSettings
from agents.memory.session_settings import resolve_session_limit

from contextd.client._sync import Client
from contextd.client.history_reads import read_history, read_history_tail
from contextd.v1 import compile_pb2, conversation_service_pb2 as conversation_pb2, message_pb2, state_pb2

ITEMS_EXTENSION = "openai-agents.items/v1"
"""The `Extension.type_id` under which a message keeps the JSON list of the items it stands for."""

_INPUT_ROLES = {
    "user": message_pb2.ROLE_USER,
    "system": message_pb2.ROLE_SYSTEM,
    "developer": message_pb2.ROLE_DEVELOPER,
}
_REASONING_SEPARATOR = "\n\n"

Item = Dict[str, Any]


def _kind(item: Item) -> str:
    """"input" (one message each), "output" (a function call output: one TOOL message each) or
    "model" (grouped into the ASSISTANT message of one model response)."""
    item_type = item.get("type")
    if item_type in (None, "message") and item.get("role") in _INPUT_ROLES:
        return "input"
    if item_type == "function_call_output":
        return "output"
    return "model"


def _text_parts(content: Any) -> List[message_pb2.Part]:
    if isinstance(content, str):
        return [message_pb2.Part(text=message_pb2.TextPart(text=content))] if content else []
    parts = []
    for block in content or []:
        block_type = block.get("type")
        if block_type in ("input_text", "output_text", "text"):
            parts.append(message_pb2.Part(text=message_pb2.TextPart(text=block.get("text", ""))))
        elif block_type == "refusal":
            parts.append(message_pb2.Part(text=message_pb2.TextPart(text=block.get("refusal", ""))))
        elif block_type == "input_image" and block.get("image_url"):
            detail = {"low": message_pb2.IMAGE_DETAIL_LOW, "high": message_pb2.IMAGE_DETAIL_HIGH, "auto": message_pb2.IMAGE_DETAIL_AUTO}
            parts.append(message_pb2.Part(image=message_pb2.ImagePart(url=block["image_url"], detail=detail.get(block.get("detail", ""), 0))))
        elif block_type == "input_file":
            parts.append(message_pb2.Part(file=message_pb2.FilePart(name=block.get("filename", ""), uri=block.get("file_url") or block.get("file_id") or "")))
    return parts


def _model_parts(item: Item) -> List[message_pb2.Part]:
    item_type = item.get("type")
    if item_type in (None, "message"):
        return _text_parts(item.get("content"))
    if item_type == "function_call":
        call = message_pb2.ToolCallPart(
            id=item.get("call_id", ""),
            name=item.get("name", ""),
            arguments=message_pb2.ToolPayload(data=item.get("arguments") or "{}"),
            item_id=item.get("id") or "",
        )
        return [message_pb2.Part(tool_call=call)]
    if item_type == "reasoning":
        summary = [entry.get("text", "") for entry in item.get("summary") or []]
        reasoning = message_pb2.ReasoningPart(
            provider=message_pb2.PROVIDER_OPENAI_RESPONSES,
            item_id=item.get("id") or "",
            text=_REASONING_SEPARATOR.join(summary),
            redacted_data=item.get("encrypted_content") or "",
        )
        return [message_pb2.Part(reasoning=reasoning)]
    # Built-in tool items (web search, computer use, ...) have no typed form: kept in the extension.
    return []


def _with_items(message: message_pb2.Message, items: Sequence[Item]) -> message_pb2.Message:
    payload = json.dumps(list(items), ensure_ascii=False, separators=(",", ":"))
    message.extensions.append(message_pb2.Extension(type_id=ITEMS_EXTENSION, payload=payload))
    return message


def messages_for_items(items: Sequence[Item], call_names: Optional[Dict[str, str]] = None) -> List[message_pb2.Message]:
    """The contextd messages standing for `items`, in order (grouped as the module says).
    `call_names` maps call ids to tool names for outputs whose call came earlier."""
    names = dict(call_names or {})
    messages: List[message_pb2.Message] = []
    group: List[Item] = []

    def close_group() -> None:
        if group:
            parts = [part for item in group for part in _model_parts(item)]
            messages.append(_with_items(message_pb2.Message(role=message_pb2.ROLE_ASSISTANT, parts=parts), group[:]))
            group.clear()

    for item in items:
        kind = _kind(item)
        if kind == "model":
            if item.get("type") == "function_call":
                names[item.get("call_id", "")] = item.get("name", "")
            group.append(item)
            continue
        close_group()
        if kind == "input":
            message = message_pb2.Message(role=_INPUT_ROLES[item["role"]], parts=_text_parts(item.get("content")))
        else:
            output = item.get("output")
            payload = message_pb2.ToolPayload(text=output) if isinstance(output, str) else message_pb2.ToolPayload(data=json.dumps(output))
            result = message_pb2.ToolResultPart(tool_call_id=item.get("call_id", ""), name=names.get(item.get("call_id", ""), ""), payload=payload)
            message = message_pb2.Message(role=message_pb2.ROLE_TOOL, parts=[message_pb2.Part(tool_result=result)])
        messages.append(_with_items(message, [item]))
    close_group()
    return messages


def items_of(message: message_pb2.Message) -> List[Item]:
    """The items a message stands for: its extension's, or for a message written some other way,
    items made from its typed parts."""
    for extension in message.extensions:
        if extension.type_id == ITEMS_EXTENSION:
            return json.loads(extension.payload)
    return _items_from_parts(message)


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


def _history_delta_append(messages: Sequence[message_pb2.Message]) -> state_pb2.Delta:
    return state_pb2.Delta(append_messages=state_pb2.AppendMessages(segment=state_pb2.SEGMENT_HISTORY, messages=messages))


def _history_delta_remove(ids: Sequence[str]) -> state_pb2.Delta:
    return state_pb2.Delta(remove_messages=state_pb2.RemoveMessages(segment=state_pb2.SEGMENT_HISTORY, ids=ids))


class ContextdSession:
    """A `agents.memory.Session` whose items live in the contextd conversation `session_id`
    (or `conversation_id` when given). Pass a `contextd.client.Client`, or an `address` for the
    session to connect (and `close()`) itself. Calls run in a worker thread, so one session may
    be used from any event loop and thread, as the SDK's SQLiteSession may."""

    session_settings: Optional[SessionSettings] = None

    def __init__(
        self,
        session_id: str,
        client: Optional[Client] = None,
        *,
        address: Optional[str] = None,
        conversation_id: Optional[str] = None,
        budget: Optional[compile_pb2.Budget] = None,
        session_settings: Optional[SessionSettings] = None,
    ) -> None:
        self.session_id = session_id
        self.conversation_id = conversation_id or session_id
        self.session_settings = session_settings or SessionSettings()
        self._owned = client is None
        self._client = client if client is not None else Client(address) if address else Client()
        self._budget = budget

    def close(self) -> None:
        """Closes the client when the session created it."""
        if self._owned:
            self._client.close()

    def _history(self) -> state_pb2.ConversationState:
        return self._client.get_state(conversation_pb2.GetStateRequest(conversation_id=self.conversation_id)).state

    async def get_items(self, limit: Optional[int] = None, *, budget: Optional[compile_pb2.Budget] = None) -> List[Item]:
        """The session's items in order; the last `limit` (or `session_settings.limit`) when set
        (0 gives none, a negative limit all, as SQLiteSession); with a budget, only the items of
        the messages contextd keeps within it. With a limit only the tail of the conversation that
        holds those items is read (`ReadMessages`), so `limit=10` costs the same at 1,000 items as
        at 10; without, the history is read in pages, at any size."""
        session_limit = resolve_session_limit(limit, self.session_settings)
        chosen_budget = budget if budget is not None else self._budget

        def read() -> List[Item]:
            if chosen_budget is None:
                if session_limit is not None and session_limit == 0:
                    return []
                if session_limit is not None and session_limit > 0:
                    # Only the tail holding the last `limit` items is read (ReadMessages), not the conversation.
                    messages = read_history_tail(self._client, self.conversation_id, session_limit, lambda message: len(items_of(message)))
                else:
                    messages = read_history(self._client, self.conversation_id)
            else:
                history = read_history(self._client, self.conversation_id)
                if not history:
                    return []
                # Stored history only: its latest user message is a past one, trimmed like any other.
                trimming = compile_pb2.Budget()
                trimming.CopyFrom(chosen_budget)
                trimming.trim_latest_user_message = True
                request = compile_pb2.CompileRequest(conversation_id=self.conversation_id, budget=trimming)
                kept = {message.id for message in self._client.compile(request).result.payload.history}
                messages = [message for message in history if message.id in kept]
            return [item for message in messages for item in items_of(message)]

        items = await asyncio.to_thread(read)
        if session_limit is None or session_limit < 0:
            return items
        return items[-session_limit:] if session_limit > 0 else []

    async def add_items(self, items: List[Item]) -> None:
        """Appends `items`. Model-side items that continue the last stored model response join its
        ASSISTANT message (rewritten in one commit that checks the version, retried on conflict);
        anything else is appended without reading the conversation."""
        if not items:
            return
        new_items = [json.loads(json.dumps(item)) for item in items]

        def write() -> None:
            if _kind(new_items[0]) != "model":
                names = _call_names(self._history().history) if _kind(new_items[0]) == "output" else {}
                request = conversation_pb2.CommitRequest(conversation_id=self.conversation_id, deltas=[_history_delta_append(messages_for_items(new_items, names))])
                self._client.commit(request)
                return

            def apply(state: state_pb2.ConversationState) -> List[state_pb2.Delta]:
                history = state.history
                last = history[-1] if history else None
                if last is not None and last.role == message_pb2.ROLE_ASSISTANT and any(e.type_id == ITEMS_EXTENSION for e in last.extensions):
                    merged = messages_for_items(items_of(last) + new_items)
                    return [_history_delta_remove([last.id]), _history_delta_append(merged)]
                return [_history_delta_append(messages_for_items(new_items))]

            self._client.commit_with_retry(self.conversation_id, apply)

        await asyncio.to_thread(write)

    async def pop_item(self) -> Optional[Item]:
        """Removes and returns the most recent item (None when there is none). The messages from
        the last tool round's ASSISTANT message on are rewritten without it, in one commit that
        checks the version."""
        popped: List[Optional[Item]] = [None]

        def apply(state: state_pb2.ConversationState) -> List[state_pb2.Delta]:
            history = list(state.history)
            popped[0] = None
            if not history:
                return [_history_delta_remove([])]
            start = _round_start(history)
            tail = history[start:]
            tail_items = [item for message in tail for item in items_of(message)]
            deltas = [_history_delta_remove([message.id for message in tail])]
            if tail_items:
                popped[0] = tail_items.pop()
            if tail_items:
                deltas.append(_history_delta_append(messages_for_items(tail_items, _call_names(history[:start]))))
            return deltas

        def write() -> None:
            if not self._history().history:
                return
            self._client.commit_with_retry(self.conversation_id, apply)

        await asyncio.to_thread(write)
        return popped[0]

    async def clear_session(self) -> None:
        """Empties the conversation (its version still advances)."""
        await asyncio.to_thread(self._client.clear, conversation_pb2.ClearRequest(conversation_id=self.conversation_id))
