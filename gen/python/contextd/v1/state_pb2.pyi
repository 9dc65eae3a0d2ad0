from contextd.v1 import artifact_pb2 as _artifact_pb2
from contextd.v1 import message_pb2 as _message_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Segment(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEGMENT_UNSPECIFIED: _ClassVar[Segment]
    SEGMENT_SYSTEM: _ClassVar[Segment]
    SEGMENT_HISTORY: _ClassVar[Segment]
    SEGMENT_MEMORY: _ClassVar[Segment]
    SEGMENT_TOOLS: _ClassVar[Segment]
SEGMENT_UNSPECIFIED: Segment
SEGMENT_SYSTEM: Segment
SEGMENT_HISTORY: Segment
SEGMENT_MEMORY: Segment
SEGMENT_TOOLS: Segment

class Experience(_message.Message):
    __slots__ = ("id", "text")
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class ToolDefinition(_message.Message):
    __slots__ = ("name", "description", "parameters", "best_practices", "prompt_injection")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    BEST_PRACTICES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_INJECTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters: str
    best_practices: _containers.RepeatedScalarFieldContainer[str]
    prompt_injection: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters: _Optional[str] = ..., best_practices: _Optional[_Iterable[str]] = ..., prompt_injection: _Optional[str] = ...) -> None: ...

class ConversationState(_message.Message):
    __slots__ = ("conversation_id", "version", "system", "history", "memory", "tools", "artifacts", "experiences", "tool_definitions", "last_experience_number", "title", "labels", "idle_ttl_ms", "forked_from")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    EXPERIENCES_FIELD_NUMBER: _ClassVar[int]
    TOOL_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
    LAST_EXPERIENCE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    IDLE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    version: int
    system: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    history: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    memory: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    tools: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    artifacts: _containers.RepeatedCompositeFieldContainer[_artifact_pb2.Artifact]
    experiences: _containers.RepeatedCompositeFieldContainer[Experience]
    tool_definitions: _containers.RepeatedCompositeFieldContainer[ToolDefinition]
    last_experience_number: int
    title: str
    labels: _containers.ScalarMap[str, str]
    idle_ttl_ms: int
    forked_from: ForkOrigin
    def __init__(self, conversation_id: _Optional[str] = ..., version: _Optional[int] = ..., system: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., history: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., memory: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., artifacts: _Optional[_Iterable[_Union[_artifact_pb2.Artifact, _Mapping]]] = ..., experiences: _Optional[_Iterable[_Union[Experience, _Mapping]]] = ..., tool_definitions: _Optional[_Iterable[_Union[ToolDefinition, _Mapping]]] = ..., last_experience_number: _Optional[int] = ..., title: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., idle_ttl_ms: _Optional[int] = ..., forked_from: _Optional[_Union[ForkOrigin, _Mapping]] = ...) -> None: ...

class ForkOrigin(_message.Message):
    __slots__ = ("conversation_id", "version")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    version: int
    def __init__(self, conversation_id: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class Delta(_message.Message):
    __slots__ = ("append_messages", "replace_segment", "remove_messages", "clear_segment", "clear_state", "upsert_artifact", "remove_artifacts", "append_tool_round", "append_assistant", "append_tool_result", "append_user", "truncate_assistant", "cancel_tool_calls", "compact", "remember", "forget", "append_provider_response", "set_tool_definitions", "append_provider_stream", "set_metadata", "prune_history")
    APPEND_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REPLACE_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    REMOVE_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CLEAR_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    CLEAR_STATE_FIELD_NUMBER: _ClassVar[int]
    UPSERT_ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    REMOVE_ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    APPEND_TOOL_ROUND_FIELD_NUMBER: _ClassVar[int]
    APPEND_ASSISTANT_FIELD_NUMBER: _ClassVar[int]
    APPEND_TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    APPEND_USER_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_ASSISTANT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    COMPACT_FIELD_NUMBER: _ClassVar[int]
    REMEMBER_FIELD_NUMBER: _ClassVar[int]
    FORGET_FIELD_NUMBER: _ClassVar[int]
    APPEND_PROVIDER_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    SET_TOOL_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
    APPEND_PROVIDER_STREAM_FIELD_NUMBER: _ClassVar[int]
    SET_METADATA_FIELD_NUMBER: _ClassVar[int]
    PRUNE_HISTORY_FIELD_NUMBER: _ClassVar[int]
    append_messages: AppendMessages
    replace_segment: ReplaceSegment
    remove_messages: RemoveMessages
    clear_segment: ClearSegment
    clear_state: ClearState
    upsert_artifact: UpsertArtifact
    remove_artifacts: RemoveArtifacts
    append_tool_round: AppendToolRound
    append_assistant: AppendAssistant
    append_tool_result: AppendToolResult
    append_user: AppendUser
    truncate_assistant: TruncateAssistant
    cancel_tool_calls: CancelToolCalls
    compact: Compact
    remember: Remember
    forget: Forget
    append_provider_response: AppendProviderResponse
    set_tool_definitions: SetToolDefinitions
    append_provider_stream: AppendProviderStream
    set_metadata: SetMetadata
    prune_history: PruneHistory
    def __init__(self, append_messages: _Optional[_Union[AppendMessages, _Mapping]] = ..., replace_segment: _Optional[_Union[ReplaceSegment, _Mapping]] = ..., remove_messages: _Optional[_Union[RemoveMessages, _Mapping]] = ..., clear_segment: _Optional[_Union[ClearSegment, _Mapping]] = ..., clear_state: _Optional[_Union[ClearState, _Mapping]] = ..., upsert_artifact: _Optional[_Union[UpsertArtifact, _Mapping]] = ..., remove_artifacts: _Optional[_Union[RemoveArtifacts, _Mapping]] = ..., append_tool_round: _Optional[_Union[AppendToolRound, _Mapping]] = ..., append_assistant: _Optional[_Union[AppendAssistant, _Mapping]] = ..., append_tool_result: _Optional[_Union[AppendToolResult, _Mapping]] = ..., append_user: _Optional[_Union[AppendUser, _Mapping]] = ..., truncate_assistant: _Optional[_Union[TruncateAssistant, _Mapping]] = ..., cancel_tool_calls: _Optional[_Union[CancelToolCalls, _Mapping]] = ..., compact: _Optional[_Union[Compact, _Mapping]] = ..., remember: _Optional[_Union[Remember, _Mapping]] = ..., forget: _Optional[_Union[Forget, _Mapping]] = ..., append_provider_response: _Optional[_Union[AppendProviderResponse, _Mapping]] = ..., set_tool_definitions: _Optional[_Union[SetToolDefinitions, _Mapping]] = ..., append_provider_stream: _Optional[_Union[AppendProviderStream, _Mapping]] = ..., set_metadata: _Optional[_Union[SetMetadata, _Mapping]] = ..., prune_history: _Optional[_Union[PruneHistory, _Mapping]] = ...) -> None: ...

class AppendMessages(_message.Message):
    __slots__ = ("segment", "messages")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    segment: Segment
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    def __init__(self, segment: _Optional[_Union[Segment, str]] = ..., messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ...) -> None: ...

class ReplaceSegment(_message.Message):
    __slots__ = ("segment", "messages")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    segment: Segment
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    def __init__(self, segment: _Optional[_Union[Segment, str]] = ..., messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ...) -> None: ...

class RemoveMessages(_message.Message):
    __slots__ = ("segment", "ids")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    segment: Segment
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, segment: _Optional[_Union[Segment, str]] = ..., ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ClearSegment(_message.Message):
    __slots__ = ("segment",)
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    segment: Segment
    def __init__(self, segment: _Optional[_Union[Segment, str]] = ...) -> None: ...

class ClearState(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpsertArtifact(_message.Message):
    __slots__ = ("artifact",)
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    artifact: _artifact_pb2.Artifact
    def __init__(self, artifact: _Optional[_Union[_artifact_pb2.Artifact, _Mapping]] = ...) -> None: ...

class RemoveArtifacts(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ids: _Optional[_Iterable[str]] = ...) -> None: ...

class AppendToolRound(_message.Message):
    __slots__ = ("assistant", "results")
    ASSISTANT_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    assistant: _message_pb2.Message
    results: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    def __init__(self, assistant: _Optional[_Union[_message_pb2.Message, _Mapping]] = ..., results: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ...) -> None: ...

class AppendAssistant(_message.Message):
    __slots__ = ("text", "tool_calls", "reasoning", "message_id")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    text: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[_message_pb2.ToolCallPart]
    reasoning: _containers.RepeatedCompositeFieldContainer[_message_pb2.ReasoningPart]
    message_id: str
    def __init__(self, text: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[_message_pb2.ToolCallPart, _Mapping]]] = ..., reasoning: _Optional[_Iterable[_Union[_message_pb2.ReasoningPart, _Mapping]]] = ..., message_id: _Optional[str] = ...) -> None: ...

class AppendToolResult(_message.Message):
    __slots__ = ("tool_call_id", "name", "payload", "is_error", "content_parts", "message_id")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTENT_PARTS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    name: str
    payload: _message_pb2.ToolPayload
    is_error: bool
    content_parts: _containers.RepeatedCompositeFieldContainer[_message_pb2.Part]
    message_id: str
    def __init__(self, tool_call_id: _Optional[str] = ..., name: _Optional[str] = ..., payload: _Optional[_Union[_message_pb2.ToolPayload, _Mapping]] = ..., is_error: bool = ..., content_parts: _Optional[_Iterable[_Union[_message_pb2.Part, _Mapping]]] = ..., message_id: _Optional[str] = ...) -> None: ...

class AppendUser(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: _message_pb2.Message
    def __init__(self, message: _Optional[_Union[_message_pb2.Message, _Mapping]] = ...) -> None: ...

class TruncateAssistant(_message.Message):
    __slots__ = ("partial_text", "abort_reason")
    PARTIAL_TEXT_FIELD_NUMBER: _ClassVar[int]
    ABORT_REASON_FIELD_NUMBER: _ClassVar[int]
    partial_text: str
    abort_reason: str
    def __init__(self, partial_text: _Optional[str] = ..., abort_reason: _Optional[str] = ...) -> None: ...

class CancelToolCalls(_message.Message):
    __slots__ = ("tool_call_ids", "abort_reason")
    TOOL_CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    ABORT_REASON_FIELD_NUMBER: _ClassVar[int]
    tool_call_ids: _containers.RepeatedScalarFieldContainer[str]
    abort_reason: str
    def __init__(self, tool_call_ids: _Optional[_Iterable[str]] = ..., abort_reason: _Optional[str] = ...) -> None: ...

class Compact(_message.Message):
    __slots__ = ("summary", "through_message_id", "remember")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    THROUGH_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    REMEMBER_FIELD_NUMBER: _ClassVar[int]
    summary: _message_pb2.Message
    through_message_id: str
    remember: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, summary: _Optional[_Union[_message_pb2.Message, _Mapping]] = ..., through_message_id: _Optional[str] = ..., remember: _Optional[_Iterable[str]] = ...) -> None: ...

class Remember(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class Forget(_message.Message):
    __slots__ = ("experience_id",)
    EXPERIENCE_ID_FIELD_NUMBER: _ClassVar[int]
    experience_id: str
    def __init__(self, experience_id: _Optional[str] = ...) -> None: ...

class AppendProviderResponse(_message.Message):
    __slots__ = ("provider", "json")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    provider: _message_pb2.Provider
    json: bytes
    def __init__(self, provider: _Optional[_Union[_message_pb2.Provider, str]] = ..., json: _Optional[bytes] = ...) -> None: ...

class AppendProviderStream(_message.Message):
    __slots__ = ("provider", "events", "interrupted", "abort_reason")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    ABORT_REASON_FIELD_NUMBER: _ClassVar[int]
    provider: _message_pb2.Provider
    events: _containers.RepeatedScalarFieldContainer[bytes]
    interrupted: bool
    abort_reason: str
    def __init__(self, provider: _Optional[_Union[_message_pb2.Provider, str]] = ..., events: _Optional[_Iterable[bytes]] = ..., interrupted: bool = ..., abort_reason: _Optional[str] = ...) -> None: ...

class SetMetadata(_message.Message):
    __slots__ = ("title", "labels", "remove_labels", "idle_ttl_ms")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TITLE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REMOVE_LABELS_FIELD_NUMBER: _ClassVar[int]
    IDLE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    title: str
    labels: _containers.ScalarMap[str, str]
    remove_labels: _containers.RepeatedScalarFieldContainer[str]
    idle_ttl_ms: int
    def __init__(self, title: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., remove_labels: _Optional[_Iterable[str]] = ..., idle_ttl_ms: _Optional[int] = ...) -> None: ...

class PruneHistory(_message.Message):
    __slots__ = ("max_messages", "max_bytes", "summary")
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    max_messages: int
    max_bytes: int
    summary: _message_pb2.Message
    def __init__(self, max_messages: _Optional[int] = ..., max_bytes: _Optional[int] = ..., summary: _Optional[_Union[_message_pb2.Message, _Mapping]] = ...) -> None: ...

class SetToolDefinitions(_message.Message):
    __slots__ = ("tool_definitions",)
    TOOL_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
    tool_definitions: _containers.RepeatedCompositeFieldContainer[ToolDefinition]
    def __init__(self, tool_definitions: _Optional[_Iterable[_Union[ToolDefinition, _Mapping]]] = ...) -> None: ...
