from contextd.v1 import compile_pb2 as _compile_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ObserverEvent(_message.Message):
    __slots__ = ("conversation_id", "compile_id", "timestamp_unix_ms", "tokens_estimated", "message_dropped", "context_summarized", "pipeline_compiled", "stage_timing", "budget_pressure", "history_head_dropped", "message_cleared")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    COMPILE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_DROPPED_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_SUMMARIZED_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_COMPILED_FIELD_NUMBER: _ClassVar[int]
    STAGE_TIMING_FIELD_NUMBER: _ClassVar[int]
    BUDGET_PRESSURE_FIELD_NUMBER: _ClassVar[int]
    HISTORY_HEAD_DROPPED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_CLEARED_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    compile_id: str
    timestamp_unix_ms: int
    tokens_estimated: TokensEstimated
    message_dropped: MessageDropped
    context_summarized: ContextSummarized
    pipeline_compiled: PipelineCompiled
    stage_timing: _compile_pb2.StageTiming
    budget_pressure: BudgetPressure
    history_head_dropped: HistoryHeadDropped
    message_cleared: MessageCleared
    def __init__(self, conversation_id: _Optional[str] = ..., compile_id: _Optional[str] = ..., timestamp_unix_ms: _Optional[int] = ..., tokens_estimated: _Optional[_Union[TokensEstimated, _Mapping]] = ..., message_dropped: _Optional[_Union[MessageDropped, _Mapping]] = ..., context_summarized: _Optional[_Union[ContextSummarized, _Mapping]] = ..., pipeline_compiled: _Optional[_Union[PipelineCompiled, _Mapping]] = ..., stage_timing: _Optional[_Union[_compile_pb2.StageTiming, _Mapping]] = ..., budget_pressure: _Optional[_Union[BudgetPressure, _Mapping]] = ..., history_head_dropped: _Optional[_Union[HistoryHeadDropped, _Mapping]] = ..., message_cleared: _Optional[_Union[MessageCleared, _Mapping]] = ...) -> None: ...

class TokensEstimated(_message.Message):
    __slots__ = ("block", "count")
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    block: str
    count: int
    def __init__(self, block: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class MessageDropped(_message.Message):
    __slots__ = ("message_id", "reason")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    reason: _compile_pb2.TransformationReason
    def __init__(self, message_id: _Optional[str] = ..., reason: _Optional[_Union[_compile_pb2.TransformationReason, str]] = ...) -> None: ...

class HistoryHeadDropped(_message.Message):
    __slots__ = ("count", "first_message_id", "last_message_id")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    count: int
    first_message_id: str
    last_message_id: str
    def __init__(self, count: _Optional[int] = ..., first_message_id: _Optional[str] = ..., last_message_id: _Optional[str] = ...) -> None: ...

class MessageCleared(_message.Message):
    __slots__ = ("message_id", "reason", "freed_tokens")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FREED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    reason: _compile_pb2.TransformationReason
    freed_tokens: int
    def __init__(self, message_id: _Optional[str] = ..., reason: _Optional[_Union[_compile_pb2.TransformationReason, str]] = ..., freed_tokens: _Optional[int] = ...) -> None: ...

class ContextSummarized(_message.Message):
    __slots__ = ("ratio",)
    RATIO_FIELD_NUMBER: _ClassVar[int]
    ratio: float
    def __init__(self, ratio: _Optional[float] = ...) -> None: ...

class PipelineCompiled(_message.Message):
    __slots__ = ("total_cost", "duration_ns")
    TOTAL_COST_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    total_cost: int
    duration_ns: int
    def __init__(self, total_cost: _Optional[int] = ..., duration_ns: _Optional[int] = ...) -> None: ...

class BudgetPressure(_message.Message):
    __slots__ = ("total", "limit", "ratio", "headroom")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    RATIO_FIELD_NUMBER: _ClassVar[int]
    HEADROOM_FIELD_NUMBER: _ClassVar[int]
    total: int
    limit: int
    ratio: float
    headroom: int
    def __init__(self, total: _Optional[int] = ..., limit: _Optional[int] = ..., ratio: _Optional[float] = ..., headroom: _Optional[int] = ...) -> None: ...
