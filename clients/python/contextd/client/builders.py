"""Builders for the messages, tool rounds and deltas an agent writes most often."""

from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional, Union

from contextd.v1 import message_pb2, state_pb2


def text_message(role: message_pb2.Role.ValueType, text: str) -> message_pb2.Message:
    """A message with one text part and no id (the server or the compile assigns one)."""
    return message_pb2.Message(role=role, parts=[text_part(text)])


def user_text(text: str) -> message_pb2.Message:
    """A USER text message."""
    return text_message(message_pb2.ROLE_USER, text)


def assistant_text(text: str) -> message_pb2.Message:
    """An ASSISTANT text message."""
    return text_message(message_pb2.ROLE_ASSISTANT, text)


def system_text(text: str) -> message_pb2.Message:
    """A SYSTEM text message."""
    return text_message(message_pb2.ROLE_SYSTEM, text)


def text_part(text: str) -> message_pb2.Part:
    """A text part."""
    return message_pb2.Part(text=message_pb2.TextPart(text=text))


def tool_call(call_id: str, name: str, arguments_json: str) -> message_pb2.ToolCallPart:
    """A call of the tool `name` with arguments given as the JSON text of an object."""
    return message_pb2.ToolCallPart(id=call_id, name=name, arguments=json_payload(arguments_json))


def text_payload(text: str) -> message_pb2.ToolPayload:
    """A tool payload holding text."""
    return message_pb2.ToolPayload(text=text)


def json_payload(json: str) -> message_pb2.ToolPayload:
    """A tool payload holding a JSON value as JSON text."""
    return message_pb2.ToolPayload(data=json)


def error_payload(code: str, message: str) -> message_pb2.ToolPayload:
    """A tool payload describing a failure."""
    return message_pb2.ToolPayload(error=message_pb2.ToolError(code=code, message=message))


def tool_result_message(
    call_id: str, name: str, payload: message_pb2.ToolPayload, is_error: bool = False
) -> message_pb2.Message:
    """The TOOL message answering one call."""
    result = message_pb2.ToolResultPart(tool_call_id=call_id, name=name, payload=payload, is_error=is_error)
    return message_pb2.Message(role=message_pb2.ROLE_TOOL, parts=[message_pb2.Part(tool_result=result)])


class ToolRound:
    """One assistant turn that calls tools (in parallel when there are several) and the results
    answering them, so the round can be stored or sent as a unit."""

    def __init__(self, text: str, *calls: message_pb2.ToolCallPart) -> None:
        parts = [text_part(text)] if text else []
        parts += [message_pb2.Part(tool_call=call) for call in calls]
        self.assistant = message_pb2.Message(role=message_pb2.ROLE_ASSISTANT, parts=parts)
        self._calls = list(calls)
        self._results: Dict[str, message_pb2.Message] = {}

    def answer(self, call_id: str, payload: message_pb2.ToolPayload, is_error: bool = False) -> "ToolRound":
        """Records the result of the call `call_id`; a later answer to the same call replaces an
        earlier one."""
        call = self._find(call_id)
        self._results[call_id] = tool_result_message(call_id, call.name if call else "", payload, is_error)
        return self

    def messages(self) -> List[message_pb2.Message]:
        """The assistant message, then one TOOL message per call in call order. Raises ValueError
        when a call has no answer or an answer has no call, since providers reject such a round."""
        for call_id in self._results:
            if self._find(call_id) is None:
                raise ValueError(f"tool round: result for unknown call {call_id!r}")
        missing = [call.id for call in self._calls if call.id not in self._results]
        if missing:
            raise ValueError(f"tool round: calls without a result: {', '.join(missing)}")
        return [self.assistant] + [self._results[call.id] for call in self._calls]

    def delta(self) -> state_pb2.Delta:
        """The round as an append_tool_round delta."""
        assistant, *results = self.messages()
        return state_pb2.Delta(append_tool_round=state_pb2.AppendToolRound(assistant=assistant, results=results))

    def _find(self, call_id: str) -> Optional[message_pb2.ToolCallPart]:
        return next((call for call in self._calls if call.id == call_id), None)


def append_user(message: message_pb2.Message) -> state_pb2.Delta:
    """A delta appending a user message to history."""
    return state_pb2.Delta(append_user=state_pb2.AppendUser(message=message))


def append_assistant(text: str, *calls: message_pb2.ToolCallPart) -> state_pb2.Delta:
    """A delta appending an assistant turn (text and/or calls, which open a tool round)."""
    return state_pb2.Delta(append_assistant=state_pb2.AppendAssistant(text=text, tool_calls=calls))


def append_tool_result(
    call_id: str, name: str, payload: message_pb2.ToolPayload, is_error: bool = False
) -> state_pb2.Delta:
    """A delta answering one open call of the last assistant turn."""
    return state_pb2.Delta(
        append_tool_result=state_pb2.AppendToolResult(
            tool_call_id=call_id, name=name, payload=payload, is_error=is_error
        )
    )


def append_provider_response(provider: message_pb2.Provider.ValueType, body: Union[bytes, str]) -> state_pb2.Delta:
    """A delta appending a provider's non-streaming response body, as received, as ASSISTANT
    messages (text, tool calls, reasoning): the sidecar parses it (`provider` says which format;
    a shape it does not know is INVALID_ARGUMENT naming the JSON path)."""
    data = body.encode("utf-8") if isinstance(body, str) else body
    return state_pb2.Delta(append_provider_response=state_pb2.AppendProviderResponse(provider=provider, json=data))


def append_messages(segment: state_pb2.Segment.ValueType, *messages: message_pb2.Message) -> state_pb2.Delta:
    """A delta appending messages to a segment."""
    return state_pb2.Delta(append_messages=state_pb2.AppendMessages(segment=segment, messages=messages))


def remember(text: str) -> state_pb2.Delta:
    """A delta remembering a fact as an experience."""
    return state_pb2.Delta(remember=state_pb2.Remember(text=text))


def set_tool_definitions(*definitions: state_pb2.ToolDefinition) -> state_pb2.Delta:
    """A delta replacing the tools the model may call."""
    return state_pb2.Delta(set_tool_definitions=state_pb2.SetToolDefinitions(tool_definitions=definitions))


def set_metadata(
    *,
    title: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
    remove_labels: Iterable[str] = (),
    idle_ttl_ms: Optional[int] = None,
) -> state_pb2.Delta:
    """A delta setting the conversation's title (None = unchanged) and labels (`labels` added or
    changed, `remove_labels` removed; the others kept). Committed like any batch; at most 32
    labels, keys 1 to 64 UTF-8 bytes, values at most 256, a title at most 512. `idle_ttl_ms`: how
    long the conversation lives without a commit (None = unchanged, 0 = the tenant's default,
    -1 = forever)."""
    operation = state_pb2.SetMetadata(labels=dict(labels or {}), remove_labels=list(remove_labels))
    if title is not None:
        operation.title = title
    if idle_ttl_ms is not None:
        operation.idle_ttl_ms = idle_ttl_ms
    return state_pb2.Delta(set_metadata=operation)


def prune_history(*, max_messages: int = 0, max_bytes: int = 0, summary: Optional[message_pb2.Message] = None) -> state_pb2.Delta:
    """A delta dropping the oldest history beyond `max_messages` and/or `max_bytes` (whole tool
    rounds only), leaving one summary at its head that names what was dropped (`summary`, or a
    marker text)."""
    operation = state_pb2.PruneHistory(max_messages=max_messages, max_bytes=max_bytes)
    if summary is not None:
        operation.summary.CopyFrom(summary)
    return state_pb2.Delta(prune_history=operation)


def append_provider_stream(
    provider: message_pb2.Provider.ValueType,
    events: Iterable[Union[bytes, str]],
    *,
    interrupted: bool = False,
    abort_reason: str = "",
) -> state_pb2.Delta:
    """A delta appending a streamed response from its events, each the JSON text of one event as
    the provider sent it (str or UTF-8 bytes). With `interrupted` the text so far is appended as a
    truncated message (docs/streaming-and-frameworks.md)."""
    encoded = [event.encode() if isinstance(event, str) else event for event in events]
    return state_pb2.Delta(
        append_provider_stream=state_pb2.AppendProviderStream(
            provider=provider, events=encoded, interrupted=interrupted, abort_reason=abort_reason
        )
    )
