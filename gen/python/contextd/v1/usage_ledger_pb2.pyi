from contextd.v1 import message_pb2 as _message_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UsageTotals(_message.Message):
    __slots__ = ("reports", "input_tokens", "output_tokens", "cached_input_tokens", "compiled_tokens", "first_reported_at_unix_ms", "last_reported_at_unix_ms")
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPILED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FIRST_REPORTED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_REPORTED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    reports: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    compiled_tokens: int
    first_reported_at_unix_ms: int
    last_reported_at_unix_ms: int
    def __init__(self, reports: _Optional[int] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cached_input_tokens: _Optional[int] = ..., compiled_tokens: _Optional[int] = ..., first_reported_at_unix_ms: _Optional[int] = ..., last_reported_at_unix_ms: _Optional[int] = ...) -> None: ...

class UsageEntry(_message.Message):
    __slots__ = ("report_id", "turn_id", "provider", "model", "input_tokens", "output_tokens", "cached_input_tokens", "compiled_tokens", "reported_at_unix_ms")
    REPORT_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPILED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REPORTED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    report_id: str
    turn_id: str
    provider: _message_pb2.Provider
    model: str
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    compiled_tokens: int
    reported_at_unix_ms: int
    def __init__(self, report_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., provider: _Optional[_Union[_message_pb2.Provider, str]] = ..., model: _Optional[str] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cached_input_tokens: _Optional[int] = ..., compiled_tokens: _Optional[int] = ..., reported_at_unix_ms: _Optional[int] = ...) -> None: ...

class GetUsageRequest(_message.Message):
    __slots__ = ("conversation_id",)
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    def __init__(self, conversation_id: _Optional[str] = ...) -> None: ...

class GetUsageResponse(_message.Message):
    __slots__ = ("conversation_id", "totals", "entries", "entries_rolled_up")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_ROLLED_UP_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    totals: UsageTotals
    entries: _containers.RepeatedCompositeFieldContainer[UsageEntry]
    entries_rolled_up: int
    def __init__(self, conversation_id: _Optional[str] = ..., totals: _Optional[_Union[UsageTotals, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[UsageEntry, _Mapping]]] = ..., entries_rolled_up: _Optional[int] = ...) -> None: ...

class ListTenantUsageRequest(_message.Message):
    __slots__ = ("tenant", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ConversationUsage(_message.Message):
    __slots__ = ("conversation_id", "totals")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    totals: UsageTotals
    def __init__(self, conversation_id: _Optional[str] = ..., totals: _Optional[_Union[UsageTotals, _Mapping]] = ...) -> None: ...

class ListTenantUsageResponse(_message.Message):
    __slots__ = ("tenant", "totals", "conversations", "next_page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    CONVERSATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    totals: UsageTotals
    conversations: _containers.RepeatedCompositeFieldContainer[ConversationUsage]
    next_page_token: str
    def __init__(self, tenant: _Optional[str] = ..., totals: _Optional[_Union[UsageTotals, _Mapping]] = ..., conversations: _Optional[_Iterable[_Union[ConversationUsage, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
