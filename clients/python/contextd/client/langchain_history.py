"""A LangChain `BaseChatMessageHistory` (package `langchain-core`, extra `contextd[langchain]`)
that keeps a chat's messages in a contextd conversation.

Each LangChain message is one contextd message: HumanMessage → USER, SystemMessage → SYSTEM,
AIMessage → ASSISTANT (text and tool calls, the arguments as JSON text), ToolMessage → TOOL (the
result of its `tool_call_id`, `status="error"` as `is_error`). The rest of the message, as
`message_to_dict` gives it, is kept in the contextd message's `Extension` (type
`langchain.message/v2`, never sent to a provider), naming the typed fields that hold its long
strings instead of repeating them (each stored once), so reads give back equal messages, ids,
`additional_kwargs`, `response_metadata` and `usage_metadata` included. A lone surrogate comes back
as it was; the typed part a provider sees holds U+FFFD in its place. Messages the conversation
got some other way (for example `append_provider_stream`) are read from their typed parts.

Budgeted reads, the `trim_messages(strategy="last")` of contextd: with a `contextd.v1.Budget`
(given here or to `get_messages`), the messages are those a contextd compile keeps within the
budget — the newest first, whole tool rounds, and contextd's own token estimators.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Optional, Sequence

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage, message_to_dict, messages_from_dict

from contextd.client._common import keyed_commit
from contextd.client._stored_json import Path, PartsBuilder, json_text, restore, wire_text
from contextd.client._sync import Client
from contextd.client.errors import OutcomeUnknown
from contextd.client.history_reads import read_history
from contextd.client.retry import DEFAULT_RETRY_POLICY, RetryPolicy
from contextd.v1 import compile_pb2, conversation_service_pb2 as conversation_pb2, message_pb2, state_pb2

MESSAGE_EXTENSION = "langchain.message/v2"
"""The `Extension.type_id` under which a contextd message keeps its LangChain message, its long
strings held by the typed parts only (`contextd.client._stored_json`)."""

MESSAGE_EXTENSION_V1 = "langchain.message/v1"
"""The extension of earlier versions, a whole copy of the message; still read."""

_ROLES = {"human": message_pb2.ROLE_USER, "system": message_pb2.ROLE_SYSTEM, "ai": message_pb2.ROLE_ASSISTANT, "tool": message_pb2.ROLE_TOOL}
_CHAT_ROLES = {"user": message_pb2.ROLE_USER, "system": message_pb2.ROLE_SYSTEM, "developer": message_pb2.ROLE_DEVELOPER, "assistant": message_pb2.ROLE_ASSISTANT}


def _add_content(parts: PartsBuilder, path: Path, content: Any) -> None:
    """The typed parts of a message's `content` (at `path` in its `message_to_dict` form)."""
    if isinstance(content, str):
        if content:
            parts.add(message_pb2.Part(text=message_pb2.TextPart(text=wire_text(content))), (path, "text.text", content))
        return
    for index, block in enumerate(content or []):
        if isinstance(block, str):
            parts.add(message_pb2.Part(text=message_pb2.TextPart(text=wire_text(block))), (path + (index,), "text.text", block))
        elif block.get("type") == "text" and isinstance(block.get("text", ""), str):
            text = block.get("text", "")
            parts.add(message_pb2.Part(text=message_pb2.TextPart(text=wire_text(text))), (path + (index, "text"), "text.text", text))
        elif block.get("type") == "image_url":
            url = block.get("image_url")
            at = path + (index, "image_url")
            if isinstance(url, dict):
                url, at = url.get("url", ""), at + ("url",)
            if isinstance(url, str) and url:
                parts.add(message_pb2.Part(image=message_pb2.ImagePart(url=wire_text(url))), (at, "image.url", url))


def message_for(message: BaseMessage) -> message_pb2.Message:
    """The contextd message standing for a LangChain message (its id is left to the commit)."""
    role = _ROLES.get(message.type)
    if role is None:
        role = _CHAT_ROLES.get(getattr(message, "role", ""), message_pb2.ROLE_USER)
    as_dict = message_to_dict(message)
    parts = PartsBuilder()
    if role == message_pb2.ROLE_TOOL:
        content = message.content
        if isinstance(content, str):
            payload, field = message_pb2.ToolPayload(text=wire_text(content)), "tool_result.payload.text"
        else:
            payload, field = message_pb2.ToolPayload(data=json_text(content)), "tool_result.payload.data"
        result = message_pb2.ToolResultPart(
            tool_call_id=wire_text(getattr(message, "tool_call_id", "") or ""),
            name=wire_text(message.name or ""),
            payload=payload,
            is_error=getattr(message, "status", "success") == "error",
        )
        parts.add(message_pb2.Part(tool_result=result), (("data", "content"), field, content))
    else:
        _add_content(parts, ("data", "content"), message.content)
        for index, call in enumerate(getattr(message, "tool_calls", None) or []):
            arguments = message_pb2.ToolPayload(data=json_text(call.get("args") or {}))
            part = message_pb2.Part(tool_call=message_pb2.ToolCallPart(id=wire_text(call.get("id") or ""), name=wire_text(call["name"]), arguments=arguments))
            claims = [(("data", "tool_calls", index, "args"), "tool_call.arguments.data", call["args"])] if call.get("args") else []
            parts.add(part, *claims)
    # A ToolMessage's name is the tool's (kept in the result); other names are the speaker's.
    sender_name = wire_text(message.name or "") if role != message_pb2.ROLE_TOOL else ""
    stored = message_pb2.Message(role=role, parts=parts.parts, sender_name=sender_name)
    stored.extensions.append(parts.extension(MESSAGE_EXTENSION, as_dict))
    return stored


def langchain_message_of(message: message_pb2.Message) -> BaseMessage:
    """The LangChain message a contextd message stands for: its extension's, or one made from its
    typed parts."""
    for extension in message.extensions:
        if extension.type_id == MESSAGE_EXTENSION:
            return messages_from_dict([restore(extension.payload, message.parts)])[0]
        if extension.type_id == MESSAGE_EXTENSION_V1:
            return messages_from_dict([json.loads(extension.payload)])[0]
    text = "".join(part.text.text for part in message.parts if part.WhichOneof("kind") == "text")
    if message.role == message_pb2.ROLE_ASSISTANT:
        calls = [
            {"id": part.tool_call.id, "name": part.tool_call.name, "args": json.loads(part.tool_call.arguments.data or "{}")}
            for part in message.parts
            if part.WhichOneof("kind") == "tool_call"
        ]
        return AIMessage(content=text, tool_calls=calls)
    if message.role == message_pb2.ROLE_TOOL:
        result = next(part.tool_result for part in message.parts if part.WhichOneof("kind") == "tool_result")
        return ToolMessage(content=result.payload.text or result.payload.data, tool_call_id=result.tool_call_id, name=result.name or None, status="error" if result.is_error else "success")
    if message.role in (message_pb2.ROLE_SYSTEM, message_pb2.ROLE_DEVELOPER):
        return SystemMessage(content=text)
    return HumanMessage(content=text)


class ContextdChatMessageHistory(BaseChatMessageHistory):
    """Chat history in the contextd conversation `conversation_id`. Pass a
    `contextd.client.Client`, or an `address` for the history to connect (and `close()`) itself.
    `budget` makes `messages` a budgeted read. A commit whose outcome the client could not learn
    (`OutcomeUnknown`) is sent again with the key the error names, `unknown_outcome_retries`
    more times."""

    def __init__(
        self,
        conversation_id: str,
        client: Optional[Client] = None,
        *,
        address: Optional[str] = None,
        budget: Optional[compile_pb2.Budget] = None,
        unknown_outcome_retries: int = 3,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    ) -> None:
        super().__init__()
        self._unknown_outcome_retries = max(unknown_outcome_retries, 0)
        self._retry = retry
        self.conversation_id = conversation_id
        self._owned = client is None
        self._client = client if client is not None else Client(address) if address else Client()
        self._budget = budget

    def close(self) -> None:
        """Closes the client when the history created it."""
        if self._owned:
            self._client.close()

    @property
    def messages(self) -> List[BaseMessage]:  # type: ignore[override]
        """Every message, or with the history's budget the ones contextd keeps within it."""
        return self.get_messages(self._budget)

    def get_messages(self, budget: Optional[compile_pb2.Budget] = None) -> List[BaseMessage]:
        """The messages in order; with `budget`, those a contextd compile of the stored history
        keeps within it (its latest user message is trimmed like any other)."""
        # In pages (ReadMessages): a history of any size, where GetState refuses one over the message limit.
        history = read_history(self._client, self.conversation_id)
        if budget is not None and history:
            trimming = compile_pb2.Budget()
            trimming.CopyFrom(budget)
            trimming.trim_latest_user_message = True
            result = self._client.compile(compile_pb2.CompileRequest(conversation_id=self.conversation_id, budget=trimming)).result
            kept = {message.id for message in result.payload.history}
            history = [message for message in history if message.id in kept]
        return [langchain_message_of(message) for message in history]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Appends the messages in one commit (all or none). contextd's history rules apply: a
        ToolMessage must answer an open call of the last AIMessage, and nothing else may follow an
        AIMessage whose calls are not all answered."""
        if not messages:
            return
        names: Dict[str, str] = {}
        stored = []
        for message in messages:
            for call in getattr(message, "tool_calls", None) or []:
                names[call.get("id") or ""] = call["name"]
            converted = message_for(message)
            if converted.role == message_pb2.ROLE_TOOL and not converted.parts[0].tool_result.name:
                converted.parts[0].tool_result.name = names.get(converted.parts[0].tool_result.tool_call_id, "")
            stored.append(converted)
        delta = state_pb2.Delta(append_messages=state_pb2.AppendMessages(segment=state_pb2.SEGMENT_HISTORY, messages=stored))
        # One key for every attempt: a commit whose outcome the client could not learn is sent
        # again with it (`unknown_outcome_retries` times), so it applies at most once.
        request = keyed_commit(conversation_pb2.CommitRequest(conversation_id=self.conversation_id, deltas=[delta]))
        for attempt in range(1, self._unknown_outcome_retries + 2):
            try:
                self._client.commit(request)
                return
            except OutcomeUnknown as error:
                if attempt > self._unknown_outcome_retries:
                    raise
                request.idempotency_key = error.idempotency_key
            time.sleep(self._retry.backoff_bound(attempt))

    def clear(self) -> None:
        """Empties the conversation (its version still advances)."""
        self._client.clear(conversation_pb2.ClearRequest(conversation_id=self.conversation_id))
