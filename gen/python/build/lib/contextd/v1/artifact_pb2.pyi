from contextd.v1 import message_pb2 as _message_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ArtifactKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ARTIFACT_KIND_UNSPECIFIED: _ClassVar[ArtifactKind]
    ARTIFACT_KIND_RETRIEVAL_DOCUMENT: _ClassVar[ArtifactKind]
    ARTIFACT_KIND_MEMORY_BLOCK: _ClassVar[ArtifactKind]
    ARTIFACT_KIND_EXPERIENCE: _ClassVar[ArtifactKind]
    ARTIFACT_KIND_TOOL_OUTPUT: _ClassVar[ArtifactKind]

class ArtifactLifecycle(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ARTIFACT_LIFECYCLE_UNSPECIFIED: _ClassVar[ArtifactLifecycle]
    ARTIFACT_LIFECYCLE_TURN_BOUND: _ClassVar[ArtifactLifecycle]
    ARTIFACT_LIFECYCLE_PERSISTENT: _ClassVar[ArtifactLifecycle]
    ARTIFACT_LIFECYCLE_EPHEMERAL: _ClassVar[ArtifactLifecycle]

class MergePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MERGE_POLICY_UNSPECIFIED: _ClassVar[MergePolicy]
    MERGE_POLICY_APPEND: _ClassVar[MergePolicy]
    MERGE_POLICY_REPLACE_BY_ORIGIN: _ClassVar[MergePolicy]
    MERGE_POLICY_DEDUPLICATE_BY_LAYER: _ClassVar[MergePolicy]

class ArtifactPersistence(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ARTIFACT_PERSISTENCE_UNSPECIFIED: _ClassVar[ArtifactPersistence]
    ARTIFACT_PERSISTENCE_STORE: _ClassVar[ArtifactPersistence]
    ARTIFACT_PERSISTENCE_SKIP: _ClassVar[ArtifactPersistence]
ARTIFACT_KIND_UNSPECIFIED: ArtifactKind
ARTIFACT_KIND_RETRIEVAL_DOCUMENT: ArtifactKind
ARTIFACT_KIND_MEMORY_BLOCK: ArtifactKind
ARTIFACT_KIND_EXPERIENCE: ArtifactKind
ARTIFACT_KIND_TOOL_OUTPUT: ArtifactKind
ARTIFACT_LIFECYCLE_UNSPECIFIED: ArtifactLifecycle
ARTIFACT_LIFECYCLE_TURN_BOUND: ArtifactLifecycle
ARTIFACT_LIFECYCLE_PERSISTENT: ArtifactLifecycle
ARTIFACT_LIFECYCLE_EPHEMERAL: ArtifactLifecycle
MERGE_POLICY_UNSPECIFIED: MergePolicy
MERGE_POLICY_APPEND: MergePolicy
MERGE_POLICY_REPLACE_BY_ORIGIN: MergePolicy
MERGE_POLICY_DEDUPLICATE_BY_LAYER: MergePolicy
ARTIFACT_PERSISTENCE_UNSPECIFIED: ArtifactPersistence
ARTIFACT_PERSISTENCE_STORE: ArtifactPersistence
ARTIFACT_PERSISTENCE_SKIP: ArtifactPersistence

class ArtifactBudget(_message.Message):
    __slots__ = ("group", "token_limit")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOKEN_LIMIT_FIELD_NUMBER: _ClassVar[int]
    group: str
    token_limit: int
    def __init__(self, group: _Optional[str] = ..., token_limit: _Optional[int] = ...) -> None: ...

class Artifact(_message.Message):
    __slots__ = ("id", "kind", "type_id", "payload", "lifecycle", "bound_turn_id", "owner", "source_refs", "merge_policy", "budget", "persistence")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TYPE_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    BOUND_TURN_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SOURCE_REFS_FIELD_NUMBER: _ClassVar[int]
    MERGE_POLICY_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    PERSISTENCE_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: ArtifactKind
    type_id: str
    payload: _message_pb2.ToolPayload
    lifecycle: ArtifactLifecycle
    bound_turn_id: str
    owner: _message_pb2.SourceRef
    source_refs: _containers.RepeatedCompositeFieldContainer[_message_pb2.SourceRef]
    merge_policy: MergePolicy
    budget: ArtifactBudget
    persistence: ArtifactPersistence
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[_Union[ArtifactKind, str]] = ..., type_id: _Optional[str] = ..., payload: _Optional[_Union[_message_pb2.ToolPayload, _Mapping]] = ..., lifecycle: _Optional[_Union[ArtifactLifecycle, str]] = ..., bound_turn_id: _Optional[str] = ..., owner: _Optional[_Union[_message_pb2.SourceRef, _Mapping]] = ..., source_refs: _Optional[_Iterable[_Union[_message_pb2.SourceRef, _Mapping]]] = ..., merge_policy: _Optional[_Union[MergePolicy, str]] = ..., budget: _Optional[_Union[ArtifactBudget, _Mapping]] = ..., persistence: _Optional[_Union[ArtifactPersistence, str]] = ...) -> None: ...
