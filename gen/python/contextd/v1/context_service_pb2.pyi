from contextd.v1 import compile_pb2 as _compile_pb2
from contextd.v1 import message_pb2 as _message_pb2
from contextd.v1 import state_pb2 as _state_pb2
from contextd.v1 import telemetry_pb2 as _telemetry_pb2
from contextd.v1 import usage_ledger_pb2 as _usage_ledger_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SummaryFactKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SUMMARY_FACT_KIND_UNSPECIFIED: _ClassVar[SummaryFactKind]
    SUMMARY_FACT_KIND_FILE_PATH: _ClassVar[SummaryFactKind]
    SUMMARY_FACT_KIND_URL: _ClassVar[SummaryFactKind]
    SUMMARY_FACT_KIND_COMMAND: _ClassVar[SummaryFactKind]
    SUMMARY_FACT_KIND_ERROR_MESSAGE: _ClassVar[SummaryFactKind]
    SUMMARY_FACT_KIND_TOOL_NAME: _ClassVar[SummaryFactKind]
    SUMMARY_FACT_KIND_ID: _ClassVar[SummaryFactKind]
SUMMARY_FACT_KIND_UNSPECIFIED: SummaryFactKind
SUMMARY_FACT_KIND_FILE_PATH: SummaryFactKind
SUMMARY_FACT_KIND_URL: SummaryFactKind
SUMMARY_FACT_KIND_COMMAND: SummaryFactKind
SUMMARY_FACT_KIND_ERROR_MESSAGE: SummaryFactKind
SUMMARY_FACT_KIND_TOOL_NAME: SummaryFactKind
SUMMARY_FACT_KIND_ID: SummaryFactKind

class ReportUsageRequest(_message.Message):
    __slots__ = ("provider", "model", "estimator", "estimated_tokens", "actual_input_tokens", "conversation_id", "turn_id", "report_id", "output_tokens", "cached_input_tokens")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    REPORT_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    provider: _message_pb2.Provider
    model: str
    estimator: _compile_pb2.EstimatorKind
    estimated_tokens: int
    actual_input_tokens: int
    conversation_id: str
    turn_id: str
    report_id: str
    output_tokens: int
    cached_input_tokens: int
    def __init__(self, provider: _Optional[_Union[_message_pb2.Provider, str]] = ..., model: _Optional[str] = ..., estimator: _Optional[_Union[_compile_pb2.EstimatorKind, str]] = ..., estimated_tokens: _Optional[int] = ..., actual_input_tokens: _Optional[int] = ..., conversation_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., report_id: _Optional[str] = ..., output_tokens: _Optional[int] = ..., cached_input_tokens: _Optional[int] = ...) -> None: ...

class ReportUsageResponse(_message.Message):
    __slots__ = ("correction", "reports", "mean_absolute_relative_error", "relative_error", "duplicate", "conversation_totals")
    CORRECTION_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    MEAN_ABSOLUTE_RELATIVE_ERROR_FIELD_NUMBER: _ClassVar[int]
    RELATIVE_ERROR_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_TOTALS_FIELD_NUMBER: _ClassVar[int]
    correction: float
    reports: int
    mean_absolute_relative_error: float
    relative_error: float
    duplicate: bool
    conversation_totals: _usage_ledger_pb2.UsageTotals
    def __init__(self, correction: _Optional[float] = ..., reports: _Optional[int] = ..., mean_absolute_relative_error: _Optional[float] = ..., relative_error: _Optional[float] = ..., duplicate: bool = ..., conversation_totals: _Optional[_Union[_usage_ledger_pb2.UsageTotals, _Mapping]] = ...) -> None: ...

class CompileResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _compile_pb2.CompileResult
    def __init__(self, result: _Optional[_Union[_compile_pb2.CompileResult, _Mapping]] = ...) -> None: ...

class CompileStreamRequest(_message.Message):
    __slots__ = ("request",)
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: _compile_pb2.CompileRequest
    def __init__(self, request: _Optional[_Union[_compile_pb2.CompileRequest, _Mapping]] = ...) -> None: ...

class CompileStreamResponse(_message.Message):
    __slots__ = ("event", "result")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    event: _telemetry_pb2.ObserverEvent
    result: _compile_pb2.CompileResult
    def __init__(self, event: _Optional[_Union[_telemetry_pb2.ObserverEvent, _Mapping]] = ..., result: _Optional[_Union[_compile_pb2.CompileResult, _Mapping]] = ...) -> None: ...

class CountTokensRequest(_message.Message):
    __slots__ = ("messages", "tool_definitions", "estimator")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOL_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    tool_definitions: _containers.RepeatedCompositeFieldContainer[_state_pb2.ToolDefinition]
    estimator: _compile_pb2.Estimator
    def __init__(self, messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., tool_definitions: _Optional[_Iterable[_Union[_state_pb2.ToolDefinition, _Mapping]]] = ..., estimator: _Optional[_Union[_compile_pb2.Estimator, _Mapping]] = ...) -> None: ...

class CountTokensResponse(_message.Message):
    __slots__ = ("total", "per_message", "tool_definitions", "reply_priming")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    PER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLY_PRIMING_FIELD_NUMBER: _ClassVar[int]
    total: int
    per_message: _containers.RepeatedScalarFieldContainer[int]
    tool_definitions: int
    reply_priming: int
    def __init__(self, total: _Optional[int] = ..., per_message: _Optional[_Iterable[int]] = ..., tool_definitions: _Optional[int] = ..., reply_priming: _Optional[int] = ...) -> None: ...

class RenderRequest(_message.Message):
    __slots__ = ("view", "conversation_id", "snapshot", "segments")
    VIEW_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    view: str
    conversation_id: str
    snapshot: _compile_pb2.Snapshot
    segments: _containers.RepeatedScalarFieldContainer[_state_pb2.Segment]
    def __init__(self, view: _Optional[str] = ..., conversation_id: _Optional[str] = ..., snapshot: _Optional[_Union[_compile_pb2.Snapshot, _Mapping]] = ..., segments: _Optional[_Iterable[_Union[_state_pb2.Segment, str]]] = ...) -> None: ...

class RenderResponse(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class SummarizeRequest(_message.Message):
    __slots__ = ("request_id", "messages", "target_tokens", "previous_summary", "reason", "template", "facts", "facts_truncated")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    FACTS_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    target_tokens: int
    previous_summary: _message_pb2.Message
    reason: str
    template: SummaryTemplate
    facts: _containers.RepeatedCompositeFieldContainer[SummaryFact]
    facts_truncated: bool
    def __init__(self, request_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., target_tokens: _Optional[int] = ..., previous_summary: _Optional[_Union[_message_pb2.Message, _Mapping]] = ..., reason: _Optional[str] = ..., template: _Optional[_Union[SummaryTemplate, _Mapping]] = ..., facts: _Optional[_Iterable[_Union[SummaryFact, _Mapping]]] = ..., facts_truncated: bool = ...) -> None: ...

class SummaryTemplate(_message.Message):
    __slots__ = ("sections", "text")
    SECTIONS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    sections: _containers.RepeatedCompositeFieldContainer[SummaryTemplateSection]
    text: str
    def __init__(self, sections: _Optional[_Iterable[_Union[SummaryTemplateSection, _Mapping]]] = ..., text: _Optional[str] = ...) -> None: ...

class SummaryTemplateSection(_message.Message):
    __slots__ = ("key", "title", "instruction")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    key: str
    title: str
    instruction: str
    def __init__(self, key: _Optional[str] = ..., title: _Optional[str] = ..., instruction: _Optional[str] = ...) -> None: ...

class SummaryFact(_message.Message):
    __slots__ = ("kind", "text", "message_id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    kind: SummaryFactKind
    text: str
    message_id: str
    def __init__(self, kind: _Optional[_Union[SummaryFactKind, str]] = ..., text: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class SummarizeResponse(_message.Message):
    __slots__ = ("request_id", "summary", "remember")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    REMEMBER_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    summary: _message_pb2.Message
    remember: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_id: _Optional[str] = ..., summary: _Optional[_Union[_message_pb2.Message, _Mapping]] = ..., remember: _Optional[_Iterable[str]] = ...) -> None: ...

class CompileSessionRequest(_message.Message):
    __slots__ = ("compile", "summarize_response")
    COMPILE_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    compile: _compile_pb2.CompileRequest
    summarize_response: SummarizeResponse
    def __init__(self, compile: _Optional[_Union[_compile_pb2.CompileRequest, _Mapping]] = ..., summarize_response: _Optional[_Union[SummarizeResponse, _Mapping]] = ...) -> None: ...

class CompileSessionResponse(_message.Message):
    __slots__ = ("summarize_request", "event", "result")
    SUMMARIZE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    summarize_request: SummarizeRequest
    event: _telemetry_pb2.ObserverEvent
    result: _compile_pb2.CompileResult
    def __init__(self, summarize_request: _Optional[_Union[SummarizeRequest, _Mapping]] = ..., event: _Optional[_Union[_telemetry_pb2.ObserverEvent, _Mapping]] = ..., result: _Optional[_Union[_compile_pb2.CompileResult, _Mapping]] = ...) -> None: ...
