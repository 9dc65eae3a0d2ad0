from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_SYSTEM: _ClassVar[Role]
    ROLE_DEVELOPER: _ClassVar[Role]
    ROLE_USER: _ClassVar[Role]
    ROLE_ASSISTANT: _ClassVar[Role]
    ROLE_TOOL: _ClassVar[Role]

class ActorKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTOR_KIND_UNSPECIFIED: _ClassVar[ActorKind]
    ACTOR_KIND_HUMAN: _ClassVar[ActorKind]
    ACTOR_KIND_AGENT: _ClassVar[ActorKind]
    ACTOR_KIND_PEER_AGENT: _ClassVar[ActorKind]
    ACTOR_KIND_TOOL: _ClassVar[ActorKind]
    ACTOR_KIND_SYSTEM: _ClassVar[ActorKind]

class CacheType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CACHE_TYPE_UNSPECIFIED: _ClassVar[CacheType]
    CACHE_TYPE_EPHEMERAL: _ClassVar[CacheType]

class ImageDetail(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IMAGE_DETAIL_UNSPECIFIED: _ClassVar[ImageDetail]
    IMAGE_DETAIL_AUTO: _ClassVar[ImageDetail]
    IMAGE_DETAIL_LOW: _ClassVar[ImageDetail]
    IMAGE_DETAIL_HIGH: _ClassVar[ImageDetail]

class Provider(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROVIDER_UNSPECIFIED: _ClassVar[Provider]
    PROVIDER_OPENAI_CHAT: _ClassVar[Provider]
    PROVIDER_OPENAI_RESPONSES: _ClassVar[Provider]
    PROVIDER_ANTHROPIC_MESSAGES: _ClassVar[Provider]
    PROVIDER_GEMINI: _ClassVar[Provider]
ROLE_UNSPECIFIED: Role
ROLE_SYSTEM: Role
ROLE_DEVELOPER: Role
ROLE_USER: Role
ROLE_ASSISTANT: Role
ROLE_TOOL: Role
ACTOR_KIND_UNSPECIFIED: ActorKind
ACTOR_KIND_HUMAN: ActorKind
ACTOR_KIND_AGENT: ActorKind
ACTOR_KIND_PEER_AGENT: ActorKind
ACTOR_KIND_TOOL: ActorKind
ACTOR_KIND_SYSTEM: ActorKind
CACHE_TYPE_UNSPECIFIED: CacheType
CACHE_TYPE_EPHEMERAL: CacheType
IMAGE_DETAIL_UNSPECIFIED: ImageDetail
IMAGE_DETAIL_AUTO: ImageDetail
IMAGE_DETAIL_LOW: ImageDetail
IMAGE_DETAIL_HIGH: ImageDetail
PROVIDER_UNSPECIFIED: Provider
PROVIDER_OPENAI_CHAT: Provider
PROVIDER_OPENAI_RESPONSES: Provider
PROVIDER_ANTHROPIC_MESSAGES: Provider
PROVIDER_GEMINI: Provider

class SourceRef(_message.Message):
    __slots__ = ("namespace", "kind", "id", "checkpoint_id", "uri")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    kind: str
    id: str
    checkpoint_id: str
    uri: str
    def __init__(self, namespace: _Optional[str] = ..., kind: _Optional[str] = ..., id: _Optional[str] = ..., checkpoint_id: _Optional[str] = ..., uri: _Optional[str] = ...) -> None: ...

class Actor(_message.Message):
    __slots__ = ("kind", "id", "display_name", "source_refs")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_REFS_FIELD_NUMBER: _ClassVar[int]
    kind: ActorKind
    id: str
    display_name: str
    source_refs: _containers.RepeatedCompositeFieldContainer[SourceRef]
    def __init__(self, kind: _Optional[_Union[ActorKind, str]] = ..., id: _Optional[str] = ..., display_name: _Optional[str] = ..., source_refs: _Optional[_Iterable[_Union[SourceRef, _Mapping]]] = ...) -> None: ...

class Origin(_message.Message):
    __slots__ = ("template_id", "layer_id")
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    LAYER_ID_FIELD_NUMBER: _ClassVar[int]
    template_id: str
    layer_id: str
    def __init__(self, template_id: _Optional[str] = ..., layer_id: _Optional[str] = ...) -> None: ...

class CacheHint(_message.Message):
    __slots__ = ("type", "ttl")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    type: CacheType
    ttl: str
    def __init__(self, type: _Optional[_Union[CacheType, str]] = ..., ttl: _Optional[str] = ...) -> None: ...

class Provenance(_message.Message):
    __slots__ = ("user", "system", "summary", "host")
    class User(_message.Message):
        __slots__ = ("channel", "user_id")
        CHANNEL_FIELD_NUMBER: _ClassVar[int]
        USER_ID_FIELD_NUMBER: _ClassVar[int]
        channel: str
        user_id: str
        def __init__(self, channel: _Optional[str] = ..., user_id: _Optional[str] = ...) -> None: ...
    class System(_message.Message):
        __slots__ = ("component",)
        COMPONENT_FIELD_NUMBER: _ClassVar[int]
        component: str
        def __init__(self, component: _Optional[str] = ...) -> None: ...
    class Summary(_message.Message):
        __slots__ = ("covered_message_ids", "replaced_summary_ids")
        COVERED_MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
        REPLACED_SUMMARY_IDS_FIELD_NUMBER: _ClassVar[int]
        covered_message_ids: _containers.RepeatedScalarFieldContainer[str]
        replaced_summary_ids: _containers.RepeatedScalarFieldContainer[str]
        def __init__(self, covered_message_ids: _Optional[_Iterable[str]] = ..., replaced_summary_ids: _Optional[_Iterable[str]] = ...) -> None: ...
    class Host(_message.Message):
        __slots__ = ("type_id", "payload")
        TYPE_ID_FIELD_NUMBER: _ClassVar[int]
        PAYLOAD_FIELD_NUMBER: _ClassVar[int]
        type_id: str
        payload: str
        def __init__(self, type_id: _Optional[str] = ..., payload: _Optional[str] = ...) -> None: ...
    USER_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    user: Provenance.User
    system: Provenance.System
    summary: Provenance.Summary
    host: Provenance.Host
    def __init__(self, user: _Optional[_Union[Provenance.User, _Mapping]] = ..., system: _Optional[_Union[Provenance.System, _Mapping]] = ..., summary: _Optional[_Union[Provenance.Summary, _Mapping]] = ..., host: _Optional[_Union[Provenance.Host, _Mapping]] = ...) -> None: ...

class Extension(_message.Message):
    __slots__ = ("type_id", "payload")
    TYPE_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    type_id: str
    payload: str
    def __init__(self, type_id: _Optional[str] = ..., payload: _Optional[str] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("id", "role", "actor", "parts", "source_refs", "origin", "cache", "provenance", "extensions", "created_at_unix_ms", "sender_name")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_REFS_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    EXTENSIONS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SENDER_NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    role: Role
    actor: Actor
    parts: _containers.RepeatedCompositeFieldContainer[Part]
    source_refs: _containers.RepeatedCompositeFieldContainer[SourceRef]
    origin: Origin
    cache: CacheHint
    provenance: Provenance
    extensions: _containers.RepeatedCompositeFieldContainer[Extension]
    created_at_unix_ms: int
    sender_name: str
    def __init__(self, id: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., actor: _Optional[_Union[Actor, _Mapping]] = ..., parts: _Optional[_Iterable[_Union[Part, _Mapping]]] = ..., source_refs: _Optional[_Iterable[_Union[SourceRef, _Mapping]]] = ..., origin: _Optional[_Union[Origin, _Mapping]] = ..., cache: _Optional[_Union[CacheHint, _Mapping]] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ..., extensions: _Optional[_Iterable[_Union[Extension, _Mapping]]] = ..., created_at_unix_ms: _Optional[int] = ..., sender_name: _Optional[str] = ...) -> None: ...

class Part(_message.Message):
    __slots__ = ("text", "image", "tool_call", "tool_result", "reasoning", "file", "provider_compaction")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_COMPACTION_FIELD_NUMBER: _ClassVar[int]
    text: TextPart
    image: ImagePart
    tool_call: ToolCallPart
    tool_result: ToolResultPart
    reasoning: ReasoningPart
    file: FilePart
    provider_compaction: ProviderCompactionPart
    def __init__(self, text: _Optional[_Union[TextPart, _Mapping]] = ..., image: _Optional[_Union[ImagePart, _Mapping]] = ..., tool_call: _Optional[_Union[ToolCallPart, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResultPart, _Mapping]] = ..., reasoning: _Optional[_Union[ReasoningPart, _Mapping]] = ..., file: _Optional[_Union[FilePart, _Mapping]] = ..., provider_compaction: _Optional[_Union[ProviderCompactionPart, _Mapping]] = ...) -> None: ...

class TextPart(_message.Message):
    __slots__ = ("text", "signature")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    text: str
    signature: str
    def __init__(self, text: _Optional[str] = ..., signature: _Optional[str] = ...) -> None: ...

class ImagePart(_message.Message):
    __slots__ = ("url", "data", "mime_type", "detail")
    URL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    url: str
    data: bytes
    mime_type: str
    detail: ImageDetail
    def __init__(self, url: _Optional[str] = ..., data: _Optional[bytes] = ..., mime_type: _Optional[str] = ..., detail: _Optional[_Union[ImageDetail, str]] = ...) -> None: ...

class ToolCallPart(_message.Message):
    __slots__ = ("id", "name", "arguments", "signature", "item_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments: ToolPayload
    signature: str
    item_id: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[_Union[ToolPayload, _Mapping]] = ..., signature: _Optional[str] = ..., item_id: _Optional[str] = ...) -> None: ...

class ToolResultPart(_message.Message):
    __slots__ = ("tool_call_id", "name", "payload", "is_error", "content_parts")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTENT_PARTS_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    name: str
    payload: ToolPayload
    is_error: bool
    content_parts: _containers.RepeatedCompositeFieldContainer[Part]
    def __init__(self, tool_call_id: _Optional[str] = ..., name: _Optional[str] = ..., payload: _Optional[_Union[ToolPayload, _Mapping]] = ..., is_error: bool = ..., content_parts: _Optional[_Iterable[_Union[Part, _Mapping]]] = ...) -> None: ...

class ReasoningPart(_message.Message):
    __slots__ = ("text", "signature", "redacted_data", "provider", "item_id")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    REDACTED_DATA_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    text: str
    signature: str
    redacted_data: str
    provider: Provider
    item_id: str
    def __init__(self, text: _Optional[str] = ..., signature: _Optional[str] = ..., redacted_data: _Optional[str] = ..., provider: _Optional[_Union[Provider, str]] = ..., item_id: _Optional[str] = ...) -> None: ...

class ProviderCompactionPart(_message.Message):
    __slots__ = ("provider", "summary", "encrypted_content", "signature", "tool_changes_json", "item_id")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    ENCRYPTED_CONTENT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHANGES_JSON_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    provider: Provider
    summary: str
    encrypted_content: str
    signature: str
    tool_changes_json: str
    item_id: str
    def __init__(self, provider: _Optional[_Union[Provider, str]] = ..., summary: _Optional[str] = ..., encrypted_content: _Optional[str] = ..., signature: _Optional[str] = ..., tool_changes_json: _Optional[str] = ..., item_id: _Optional[str] = ...) -> None: ...

class FilePart(_message.Message):
    __slots__ = ("mime_type", "data", "uri", "name")
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    mime_type: str
    data: bytes
    uri: str
    name: str
    def __init__(self, mime_type: _Optional[str] = ..., data: _Optional[bytes] = ..., uri: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ToolPayload(_message.Message):
    __slots__ = ("text", "data", "binary", "error", "progress", "control")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    BINARY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    CONTROL_FIELD_NUMBER: _ClassVar[int]
    text: str
    data: str
    binary: BinaryPayload
    error: ToolError
    progress: ToolProgress
    control: ToolControl
    def __init__(self, text: _Optional[str] = ..., data: _Optional[str] = ..., binary: _Optional[_Union[BinaryPayload, _Mapping]] = ..., error: _Optional[_Union[ToolError, _Mapping]] = ..., progress: _Optional[_Union[ToolProgress, _Mapping]] = ..., control: _Optional[_Union[ToolControl, _Mapping]] = ...) -> None: ...

class BinaryPayload(_message.Message):
    __slots__ = ("data", "mime_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ...) -> None: ...

class ToolError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ToolProgress(_message.Message):
    __slots__ = ("current", "total", "message")
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    current: float
    total: float
    message: str
    def __init__(self, current: _Optional[float] = ..., total: _Optional[float] = ..., message: _Optional[str] = ...) -> None: ...

class ToolControl(_message.Message):
    __slots__ = ("action", "reason")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    action: str
    reason: str
    def __init__(self, action: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...
