from contextd.v1 import message_pb2 as _message_pb2
from contextd.v1 import state_pb2 as _state_pb2
from contextd.v1 import usage_ledger_pb2 as _usage_ledger_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ConversationOrder(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONVERSATION_ORDER_UNSPECIFIED: _ClassVar[ConversationOrder]
    CONVERSATION_ORDER_ID: _ClassVar[ConversationOrder]
    CONVERSATION_ORDER_UPDATED_DESC: _ClassVar[ConversationOrder]
CONVERSATION_ORDER_UNSPECIFIED: ConversationOrder
CONVERSATION_ORDER_ID: ConversationOrder
CONVERSATION_ORDER_UPDATED_DESC: ConversationOrder

class ForkRequest(_message.Message):
    __slots__ = ("conversation_id", "at_version", "new_conversation_id")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    AT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NEW_CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    at_version: int
    new_conversation_id: str
    def __init__(self, conversation_id: _Optional[str] = ..., at_version: _Optional[int] = ..., new_conversation_id: _Optional[str] = ...) -> None: ...

class ForkResponse(_message.Message):
    __slots__ = ("version", "forked_from")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_FIELD_NUMBER: _ClassVar[int]
    version: int
    forked_from: _state_pb2.ForkOrigin
    def __init__(self, version: _Optional[int] = ..., forked_from: _Optional[_Union[_state_pb2.ForkOrigin, _Mapping]] = ...) -> None: ...

class RewindRequest(_message.Message):
    __slots__ = ("conversation_id", "to_version", "expected_version", "idempotency_key")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    to_version: int
    expected_version: int
    idempotency_key: str
    def __init__(self, conversation_id: _Optional[str] = ..., to_version: _Optional[int] = ..., expected_version: _Optional[int] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class RewindResponse(_message.Message):
    __slots__ = ("version", "replayed")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    version: int
    replayed: bool
    def __init__(self, version: _Optional[int] = ..., replayed: bool = ...) -> None: ...

class GetStateRequest(_message.Message):
    __slots__ = ("conversation_id", "without_messages", "at_version")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    WITHOUT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    AT_VERSION_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    without_messages: bool
    at_version: int
    def __init__(self, conversation_id: _Optional[str] = ..., without_messages: bool = ..., at_version: _Optional[int] = ...) -> None: ...

class GetStateResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: _state_pb2.ConversationState
    def __init__(self, state: _Optional[_Union[_state_pb2.ConversationState, _Mapping]] = ...) -> None: ...

class ReadMessagesRequest(_message.Message):
    __slots__ = ("conversation_id", "segment", "last", "start", "end", "version", "max_bytes", "page_token")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    segment: _state_pb2.Segment
    last: int
    start: int
    end: int
    version: int
    max_bytes: int
    page_token: str
    def __init__(self, conversation_id: _Optional[str] = ..., segment: _Optional[_Union[_state_pb2.Segment, str]] = ..., last: _Optional[int] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., version: _Optional[int] = ..., max_bytes: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class SegmentSizes(_message.Message):
    __slots__ = ("system", "history", "memory", "tools")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    system: int
    history: int
    memory: int
    tools: int
    def __init__(self, system: _Optional[int] = ..., history: _Optional[int] = ..., memory: _Optional[int] = ..., tools: _Optional[int] = ...) -> None: ...

class ReadMessagesResponse(_message.Message):
    __slots__ = ("messages", "version", "segment", "position", "window_start", "window_end", "segment_sizes", "next_page_token", "page_bytes")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_SIZES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    version: int
    segment: _state_pb2.Segment
    position: int
    window_start: int
    window_end: int
    segment_sizes: SegmentSizes
    next_page_token: str
    page_bytes: int
    def __init__(self, messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., version: _Optional[int] = ..., segment: _Optional[_Union[_state_pb2.Segment, str]] = ..., position: _Optional[int] = ..., window_start: _Optional[int] = ..., window_end: _Optional[int] = ..., segment_sizes: _Optional[_Union[SegmentSizes, _Mapping]] = ..., next_page_token: _Optional[str] = ..., page_bytes: _Optional[int] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("conversation_id", "expected_version", "deltas", "idempotency_key", "include_state")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STATE_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    expected_version: int
    deltas: _containers.RepeatedCompositeFieldContainer[_state_pb2.Delta]
    idempotency_key: str
    include_state: bool
    def __init__(self, conversation_id: _Optional[str] = ..., expected_version: _Optional[int] = ..., deltas: _Optional[_Iterable[_Union[_state_pb2.Delta, _Mapping]]] = ..., idempotency_key: _Optional[str] = ..., include_state: bool = ...) -> None: ...

class CommitResponse(_message.Message):
    __slots__ = ("version", "replayed", "state")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    version: int
    replayed: bool
    state: _state_pb2.ConversationState
    def __init__(self, version: _Optional[int] = ..., replayed: bool = ..., state: _Optional[_Union[_state_pb2.ConversationState, _Mapping]] = ...) -> None: ...

class ClearRequest(_message.Message):
    __slots__ = ("conversation_id", "expected_version")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    expected_version: int
    def __init__(self, conversation_id: _Optional[str] = ..., expected_version: _Optional[int] = ...) -> None: ...

class ClearResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("conversation_id", "from_version")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    from_version: int
    def __init__(self, conversation_id: _Optional[str] = ..., from_version: _Optional[int] = ...) -> None: ...

class Change(_message.Message):
    __slots__ = ("conversation_id", "version", "deltas", "idempotency_key", "committed_at_unix_ms", "cleared", "assigned_message_ids", "rewound_to_version", "forked_from", "undo")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    CLEARED_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    REWOUND_TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_FIELD_NUMBER: _ClassVar[int]
    UNDO_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    version: int
    deltas: _containers.RepeatedCompositeFieldContainer[_state_pb2.Delta]
    idempotency_key: str
    committed_at_unix_ms: int
    cleared: bool
    assigned_message_ids: _containers.RepeatedScalarFieldContainer[str]
    rewound_to_version: int
    forked_from: _state_pb2.ForkOrigin
    undo: ChangeUndo
    def __init__(self, conversation_id: _Optional[str] = ..., version: _Optional[int] = ..., deltas: _Optional[_Iterable[_Union[_state_pb2.Delta, _Mapping]]] = ..., idempotency_key: _Optional[str] = ..., committed_at_unix_ms: _Optional[int] = ..., cleared: bool = ..., assigned_message_ids: _Optional[_Iterable[str]] = ..., rewound_to_version: _Optional[int] = ..., forked_from: _Optional[_Union[_state_pb2.ForkOrigin, _Mapping]] = ..., undo: _Optional[_Union[ChangeUndo, _Mapping]] = ...) -> None: ...

class ChangeUndo(_message.Message):
    __slots__ = ("segments", "rest_before", "rest_fields", "not_undoable")
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    REST_BEFORE_FIELD_NUMBER: _ClassVar[int]
    REST_FIELDS_FIELD_NUMBER: _ClassVar[int]
    NOT_UNDOABLE_FIELD_NUMBER: _ClassVar[int]
    segments: _containers.RepeatedCompositeFieldContainer[SegmentUndo]
    rest_before: _state_pb2.ConversationState
    rest_fields: _containers.RepeatedScalarFieldContainer[str]
    not_undoable: str
    def __init__(self, segments: _Optional[_Iterable[_Union[SegmentUndo, _Mapping]]] = ..., rest_before: _Optional[_Union[_state_pb2.ConversationState, _Mapping]] = ..., rest_fields: _Optional[_Iterable[str]] = ..., not_undoable: _Optional[str] = ...) -> None: ...

class SegmentUndo(_message.Message):
    __slots__ = ("segment", "keep_head", "keep", "messages")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    KEEP_HEAD_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    segment: _state_pb2.Segment
    keep_head: bool
    keep: int
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    def __init__(self, segment: _Optional[_Union[_state_pb2.Segment, str]] = ..., keep_head: bool = ..., keep: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("change", "heartbeat")
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    change: Change
    heartbeat: Heartbeat
    def __init__(self, change: _Optional[_Union[Change, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class ListConversationsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "prefix", "labels", "updated_since_unix_ms", "order")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_SINCE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    prefix: str
    labels: _containers.ScalarMap[str, str]
    updated_since_unix_ms: int
    order: ConversationOrder
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., prefix: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., updated_since_unix_ms: _Optional[int] = ..., order: _Optional[_Union[ConversationOrder, str]] = ...) -> None: ...

class ConversationSummary(_message.Message):
    __slots__ = ("conversation_id", "version", "created_at_unix_ms", "updated_at_unix_ms", "title", "labels", "expires_at_unix_ms")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    version: int
    created_at_unix_ms: int
    updated_at_unix_ms: int
    title: str
    labels: _containers.ScalarMap[str, str]
    expires_at_unix_ms: int
    def __init__(self, conversation_id: _Optional[str] = ..., version: _Optional[int] = ..., created_at_unix_ms: _Optional[int] = ..., updated_at_unix_ms: _Optional[int] = ..., title: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., expires_at_unix_ms: _Optional[int] = ...) -> None: ...

class ListConversationsResponse(_message.Message):
    __slots__ = ("conversations", "next_page_token")
    CONVERSATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    conversations: _containers.RepeatedCompositeFieldContainer[ConversationSummary]
    next_page_token: str
    def __init__(self, conversations: _Optional[_Iterable[_Union[ConversationSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ReadToolResultRequest(_message.Message):
    __slots__ = ("conversation_id", "tool_call_id", "offset", "max_bytes")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    tool_call_id: str
    offset: int
    max_bytes: int
    def __init__(self, conversation_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class ReadToolResultResponse(_message.Message):
    __slots__ = ("text", "offset", "next_offset", "total_bytes", "name", "version")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    text: str
    offset: int
    next_offset: int
    total_bytes: int
    name: str
    version: int
    def __init__(self, text: _Optional[str] = ..., offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., total_bytes: _Optional[int] = ..., name: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class DeleteConversationRequest(_message.Message):
    __slots__ = ("conversation_id", "expected_version")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    expected_version: int
    def __init__(self, conversation_id: _Optional[str] = ..., expected_version: _Optional[int] = ...) -> None: ...

class DeleteConversationResponse(_message.Message):
    __slots__ = ("deleted_version",)
    DELETED_VERSION_FIELD_NUMBER: _ClassVar[int]
    deleted_version: int
    def __init__(self, deleted_version: _Optional[int] = ...) -> None: ...

class DeleteConversationsRequest(_message.Message):
    __slots__ = ("prefix", "page_token", "page_size")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    page_token: str
    page_size: int
    def __init__(self, prefix: _Optional[str] = ..., page_token: _Optional[str] = ..., page_size: _Optional[int] = ...) -> None: ...

class DeleteConversationsResponse(_message.Message):
    __slots__ = ("deleted", "next_page_token")
    DELETED_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    deleted: int
    next_page_token: str
    def __init__(self, deleted: _Optional[int] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ExportConversationsRequest(_message.Message):
    __slots__ = ("prefix", "resume_token")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    resume_token: str
    def __init__(self, prefix: _Optional[str] = ..., resume_token: _Optional[str] = ...) -> None: ...

class ExportConversationsResponse(_message.Message):
    __slots__ = ("state", "without_messages", "resume_token")
    STATE_FIELD_NUMBER: _ClassVar[int]
    WITHOUT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    state: _state_pb2.ConversationState
    without_messages: bool
    resume_token: str
    def __init__(self, state: _Optional[_Union[_state_pb2.ConversationState, _Mapping]] = ..., without_messages: bool = ..., resume_token: _Optional[str] = ...) -> None: ...

class RecallRequest(_message.Message):
    __slots__ = ("conversation_id", "message_ids", "query", "tool_call", "max_results", "max_bytes")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    query: str
    tool_call: RecallToolCall
    max_results: int
    max_bytes: int
    def __init__(self, conversation_id: _Optional[str] = ..., message_ids: _Optional[_Iterable[str]] = ..., query: _Optional[str] = ..., tool_call: _Optional[_Union[RecallToolCall, _Mapping]] = ..., max_results: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class RecallToolCall(_message.Message):
    __slots__ = ("name", "arguments")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    arguments: str
    def __init__(self, name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class RecallHit(_message.Message):
    __slots__ = ("message_id", "position", "score", "role", "excerpt")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EXCERPT_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    position: int
    score: float
    role: _message_pb2.Role
    excerpt: str
    def __init__(self, message_id: _Optional[str] = ..., position: _Optional[int] = ..., score: _Optional[float] = ..., role: _Optional[_Union[_message_pb2.Role, str]] = ..., excerpt: _Optional[str] = ...) -> None: ...

class RecallResponse(_message.Message):
    __slots__ = ("text", "hits", "version", "history_messages", "examined_messages", "scanned_bytes", "complete", "missing_ids")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HISTORY_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    EXAMINED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SCANNED_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    MISSING_IDS_FIELD_NUMBER: _ClassVar[int]
    text: str
    hits: _containers.RepeatedCompositeFieldContainer[RecallHit]
    version: int
    history_messages: int
    examined_messages: int
    scanned_bytes: int
    complete: bool
    missing_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, text: _Optional[str] = ..., hits: _Optional[_Iterable[_Union[RecallHit, _Mapping]]] = ..., version: _Optional[int] = ..., history_messages: _Optional[int] = ..., examined_messages: _Optional[int] = ..., scanned_bytes: _Optional[int] = ..., complete: bool = ..., missing_ids: _Optional[_Iterable[str]] = ...) -> None: ...
