from contextd.v1 import telemetry_pb2 as _telemetry_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WatchEventsRequest(_message.Message):
    __slots__ = ("conversation_id",)
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    def __init__(self, conversation_id: _Optional[str] = ...) -> None: ...

class WatchEventsResponse(_message.Message):
    __slots__ = ("event", "dropped")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    event: _telemetry_pb2.ObserverEvent
    dropped: int
    def __init__(self, event: _Optional[_Union[_telemetry_pb2.ObserverEvent, _Mapping]] = ..., dropped: _Optional[int] = ...) -> None: ...
