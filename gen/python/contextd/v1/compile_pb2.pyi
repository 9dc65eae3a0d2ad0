from contextd.v1 import artifact_pb2 as _artifact_pb2
from contextd.v1 import message_pb2 as _message_pb2
from contextd.v1 import state_pb2 as _state_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CurrentTurnPersistence(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CURRENT_TURN_PERSISTENCE_UNSPECIFIED: _ClassVar[CurrentTurnPersistence]
    CURRENT_TURN_PERSISTENCE_PERSIST_RAW: _ClassVar[CurrentTurnPersistence]
    CURRENT_TURN_PERSISTENCE_PERSIST_PROMPT_SAFE: _ClassVar[CurrentTurnPersistence]
    CURRENT_TURN_PERSISTENCE_PERSIST_NONE: _ClassVar[CurrentTurnPersistence]

class IdentityPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IDENTITY_POLICY_UNSPECIFIED: _ClassVar[IdentityPolicy]
    IDENTITY_POLICY_RANDOM: _ClassVar[IdentityPolicy]
    IDENTITY_POLICY_STABLE: _ClassVar[IdentityPolicy]

class ToolRoundRepair(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_ROUND_REPAIR_UNSPECIFIED: _ClassVar[ToolRoundRepair]
    TOOL_ROUND_REPAIR_DROP_INCOMPLETE: _ClassVar[ToolRoundRepair]
    TOOL_ROUND_REPAIR_CLOSE_AS_CANCELLED: _ClassVar[ToolRoundRepair]
    TOOL_ROUND_REPAIR_REJECT: _ClassVar[ToolRoundRepair]

class ToolArgumentsRepair(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_ARGUMENTS_REPAIR_UNSPECIFIED: _ClassVar[ToolArgumentsRepair]
    TOOL_ARGUMENTS_REPAIR_AS_STRING: _ClassVar[ToolArgumentsRepair]
    TOOL_ARGUMENTS_REPAIR_DROP_ROUND: _ClassVar[ToolArgumentsRepair]

class HistoryStart(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HISTORY_START_UNSPECIFIED: _ClassVar[HistoryStart]
    HISTORY_START_USER_TURN: _ClassVar[HistoryStart]
    HISTORY_START_ANY: _ClassVar[HistoryStart]

class BudgetStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BUDGET_STRATEGY_UNSPECIFIED: _ClassVar[BudgetStrategy]
    BUDGET_STRATEGY_DROP_HEAD: _ClassVar[BudgetStrategy]
    BUDGET_STRATEGY_DROP_TAIL: _ClassVar[BudgetStrategy]
    BUDGET_STRATEGY_DROP: _ClassVar[BudgetStrategy]
    BUDGET_STRATEGY_STRICT: _ClassVar[BudgetStrategy]
    BUDGET_STRATEGY_SUMMARIZE: _ClassVar[BudgetStrategy]

class EstimatorKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ESTIMATOR_KIND_UNSPECIFIED: _ClassVar[EstimatorKind]
    ESTIMATOR_KIND_CHARS: _ClassVar[EstimatorKind]
    ESTIMATOR_KIND_CHAR_FALLBACK: _ClassVar[EstimatorKind]
    ESTIMATOR_KIND_FIXED: _ClassVar[EstimatorKind]
    ESTIMATOR_KIND_TOKENIZER: _ClassVar[EstimatorKind]

class TokenizerEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOKENIZER_ENCODING_UNSPECIFIED: _ClassVar[TokenizerEncoding]
    TOKENIZER_ENCODING_O200K_BASE: _ClassVar[TokenizerEncoding]
    TOKENIZER_ENCODING_CL100K_BASE: _ClassVar[TokenizerEncoding]
    TOKENIZER_ENCODING_O200K_HARMONY: _ClassVar[TokenizerEncoding]

class RedactionPattern(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REDACTION_PATTERN_UNSPECIFIED: _ClassVar[RedactionPattern]
    REDACTION_PATTERN_EMAIL: _ClassVar[RedactionPattern]
    REDACTION_PATTERN_PHONE: _ClassVar[RedactionPattern]
    REDACTION_PATTERN_CARD_NUMBER: _ClassVar[RedactionPattern]
    REDACTION_PATTERN_IP_ADDRESS: _ClassVar[RedactionPattern]
    REDACTION_PATTERN_API_KEY: _ClassVar[RedactionPattern]

class CompileResultPart(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPILE_RESULT_PART_UNSPECIFIED: _ClassVar[CompileResultPart]
    COMPILE_RESULT_PART_SOURCE: _ClassVar[CompileResultPart]
    COMPILE_RESULT_PART_NORMALIZED_SNAPSHOT: _ClassVar[CompileResultPart]
    COMPILE_RESULT_PART_WRITEBACK_SNAPSHOT: _ClassVar[CompileResultPart]
    COMPILE_RESULT_PART_PERSISTENCE: _ClassVar[CompileResultPart]
    COMPILE_RESULT_PART_ALL_TRANSFORMATIONS: _ClassVar[CompileResultPart]
    COMPILE_RESULT_PART_PAYLOAD: _ClassVar[CompileResultPart]
    COMPILE_RESULT_PART_MESSAGE_TOKENS: _ClassVar[CompileResultPart]

class TransformationAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSFORMATION_ACTION_UNSPECIFIED: _ClassVar[TransformationAction]
    TRANSFORMATION_ACTION_PASSED: _ClassVar[TransformationAction]
    TRANSFORMATION_ACTION_FORMATTED: _ClassVar[TransformationAction]
    TRANSFORMATION_ACTION_DROPPED: _ClassVar[TransformationAction]

class TransformationReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSFORMATION_REASON_UNSPECIFIED: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_PROTECTED_PENDING: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_REPLACED_BY_DEFERRED: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_TRANSFORM_HOOK: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_REPLACED_BY_HOOK: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_SEGMENT_FORMATTER: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_REPLACED_BY_FORMATTER: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_CURRENT_TURN_PROJECTION: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_TOKEN_BUDGET_EXCEEDED: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_TOOL_ROUND_REPAIR: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_ROLE_PROJECTION: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_TEXT_REPLACEMENT: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_SUMMARIZED: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_UNCHANGED: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_TOOL_ARGUMENTS_REPAIR: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_HISTORY_ALIGNMENT: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_SYSTEM_PROMPT_ASSEMBLY: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_TOOL_RESULT_CLEARED: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_REASONING_CLEARED: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_TOOL_RESULT_REFERENCED: _ClassVar[TransformationReason]
    TRANSFORMATION_REASON_PROVIDER_COMPACTION: _ClassVar[TransformationReason]

class TrimStep(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRIM_STEP_UNSPECIFIED: _ClassVar[TrimStep]
    TRIM_STEP_REASONING_CLEARING: _ClassVar[TrimStep]
    TRIM_STEP_TOOL_RESULT_CLEARING: _ClassVar[TrimStep]
    TRIM_STEP_HEAD_ROUNDING: _ClassVar[TrimStep]
CURRENT_TURN_PERSISTENCE_UNSPECIFIED: CurrentTurnPersistence
CURRENT_TURN_PERSISTENCE_PERSIST_RAW: CurrentTurnPersistence
CURRENT_TURN_PERSISTENCE_PERSIST_PROMPT_SAFE: CurrentTurnPersistence
CURRENT_TURN_PERSISTENCE_PERSIST_NONE: CurrentTurnPersistence
IDENTITY_POLICY_UNSPECIFIED: IdentityPolicy
IDENTITY_POLICY_RANDOM: IdentityPolicy
IDENTITY_POLICY_STABLE: IdentityPolicy
TOOL_ROUND_REPAIR_UNSPECIFIED: ToolRoundRepair
TOOL_ROUND_REPAIR_DROP_INCOMPLETE: ToolRoundRepair
TOOL_ROUND_REPAIR_CLOSE_AS_CANCELLED: ToolRoundRepair
TOOL_ROUND_REPAIR_REJECT: ToolRoundRepair
TOOL_ARGUMENTS_REPAIR_UNSPECIFIED: ToolArgumentsRepair
TOOL_ARGUMENTS_REPAIR_AS_STRING: ToolArgumentsRepair
TOOL_ARGUMENTS_REPAIR_DROP_ROUND: ToolArgumentsRepair
HISTORY_START_UNSPECIFIED: HistoryStart
HISTORY_START_USER_TURN: HistoryStart
HISTORY_START_ANY: HistoryStart
BUDGET_STRATEGY_UNSPECIFIED: BudgetStrategy
BUDGET_STRATEGY_DROP_HEAD: BudgetStrategy
BUDGET_STRATEGY_DROP_TAIL: BudgetStrategy
BUDGET_STRATEGY_DROP: BudgetStrategy
BUDGET_STRATEGY_STRICT: BudgetStrategy
BUDGET_STRATEGY_SUMMARIZE: BudgetStrategy
ESTIMATOR_KIND_UNSPECIFIED: EstimatorKind
ESTIMATOR_KIND_CHARS: EstimatorKind
ESTIMATOR_KIND_CHAR_FALLBACK: EstimatorKind
ESTIMATOR_KIND_FIXED: EstimatorKind
ESTIMATOR_KIND_TOKENIZER: EstimatorKind
TOKENIZER_ENCODING_UNSPECIFIED: TokenizerEncoding
TOKENIZER_ENCODING_O200K_BASE: TokenizerEncoding
TOKENIZER_ENCODING_CL100K_BASE: TokenizerEncoding
TOKENIZER_ENCODING_O200K_HARMONY: TokenizerEncoding
REDACTION_PATTERN_UNSPECIFIED: RedactionPattern
REDACTION_PATTERN_EMAIL: RedactionPattern
REDACTION_PATTERN_PHONE: RedactionPattern
REDACTION_PATTERN_CARD_NUMBER: RedactionPattern
REDACTION_PATTERN_IP_ADDRESS: RedactionPattern
REDACTION_PATTERN_API_KEY: RedactionPattern
COMPILE_RESULT_PART_UNSPECIFIED: CompileResultPart
COMPILE_RESULT_PART_SOURCE: CompileResultPart
COMPILE_RESULT_PART_NORMALIZED_SNAPSHOT: CompileResultPart
COMPILE_RESULT_PART_WRITEBACK_SNAPSHOT: CompileResultPart
COMPILE_RESULT_PART_PERSISTENCE: CompileResultPart
COMPILE_RESULT_PART_ALL_TRANSFORMATIONS: CompileResultPart
COMPILE_RESULT_PART_PAYLOAD: CompileResultPart
COMPILE_RESULT_PART_MESSAGE_TOKENS: CompileResultPart
TRANSFORMATION_ACTION_UNSPECIFIED: TransformationAction
TRANSFORMATION_ACTION_PASSED: TransformationAction
TRANSFORMATION_ACTION_FORMATTED: TransformationAction
TRANSFORMATION_ACTION_DROPPED: TransformationAction
TRANSFORMATION_REASON_UNSPECIFIED: TransformationReason
TRANSFORMATION_REASON_PROTECTED_PENDING: TransformationReason
TRANSFORMATION_REASON_REPLACED_BY_DEFERRED: TransformationReason
TRANSFORMATION_REASON_TRANSFORM_HOOK: TransformationReason
TRANSFORMATION_REASON_REPLACED_BY_HOOK: TransformationReason
TRANSFORMATION_REASON_SEGMENT_FORMATTER: TransformationReason
TRANSFORMATION_REASON_REPLACED_BY_FORMATTER: TransformationReason
TRANSFORMATION_REASON_CURRENT_TURN_PROJECTION: TransformationReason
TRANSFORMATION_REASON_TOKEN_BUDGET_EXCEEDED: TransformationReason
TRANSFORMATION_REASON_TOOL_ROUND_REPAIR: TransformationReason
TRANSFORMATION_REASON_ROLE_PROJECTION: TransformationReason
TRANSFORMATION_REASON_TEXT_REPLACEMENT: TransformationReason
TRANSFORMATION_REASON_SUMMARIZED: TransformationReason
TRANSFORMATION_REASON_UNCHANGED: TransformationReason
TRANSFORMATION_REASON_TOOL_ARGUMENTS_REPAIR: TransformationReason
TRANSFORMATION_REASON_HISTORY_ALIGNMENT: TransformationReason
TRANSFORMATION_REASON_SYSTEM_PROMPT_ASSEMBLY: TransformationReason
TRANSFORMATION_REASON_TOOL_RESULT_CLEARED: TransformationReason
TRANSFORMATION_REASON_REASONING_CLEARED: TransformationReason
TRANSFORMATION_REASON_TOOL_RESULT_REFERENCED: TransformationReason
TRANSFORMATION_REASON_PROVIDER_COMPACTION: TransformationReason
TRIM_STEP_UNSPECIFIED: TrimStep
TRIM_STEP_REASONING_CLEARING: TrimStep
TRIM_STEP_TOOL_RESULT_CLEARING: TrimStep
TRIM_STEP_HEAD_ROUNDING: TrimStep

class MessageList(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    def __init__(self, messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ...) -> None: ...

class ToolDefinitionList(_message.Message):
    __slots__ = ("tool_definitions",)
    TOOL_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
    tool_definitions: _containers.RepeatedCompositeFieldContainer[_state_pb2.ToolDefinition]
    def __init__(self, tool_definitions: _Optional[_Iterable[_Union[_state_pb2.ToolDefinition, _Mapping]]] = ...) -> None: ...

class ExperienceList(_message.Message):
    __slots__ = ("experiences",)
    EXPERIENCES_FIELD_NUMBER: _ClassVar[int]
    experiences: _containers.RepeatedCompositeFieldContainer[_state_pb2.Experience]
    def __init__(self, experiences: _Optional[_Iterable[_Union[_state_pb2.Experience, _Mapping]]] = ...) -> None: ...

class CurrentTurn(_message.Message):
    __slots__ = ("raw", "prompt_safe", "persistence")
    RAW_FIELD_NUMBER: _ClassVar[int]
    PROMPT_SAFE_FIELD_NUMBER: _ClassVar[int]
    PERSISTENCE_FIELD_NUMBER: _ClassVar[int]
    raw: _message_pb2.Message
    prompt_safe: _message_pb2.Message
    persistence: CurrentTurnPersistence
    def __init__(self, raw: _Optional[_Union[_message_pb2.Message, _Mapping]] = ..., prompt_safe: _Optional[_Union[_message_pb2.Message, _Mapping]] = ..., persistence: _Optional[_Union[CurrentTurnPersistence, str]] = ...) -> None: ...

class IdentityOptions(_message.Message):
    __slots__ = ("policy", "prefix", "require_durable")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_DURABLE_FIELD_NUMBER: _ClassVar[int]
    policy: IdentityPolicy
    prefix: str
    require_durable: bool
    def __init__(self, policy: _Optional[_Union[IdentityPolicy, str]] = ..., prefix: _Optional[str] = ..., require_durable: bool = ...) -> None: ...

class Estimator(_message.Message):
    __slots__ = ("kind", "chars_per_token", "fixed_per_message", "fixed_per_part", "fixed_per_tool_call", "encoding", "provider")
    KIND_FIELD_NUMBER: _ClassVar[int]
    CHARS_PER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FIXED_PER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIXED_PER_PART_FIELD_NUMBER: _ClassVar[int]
    FIXED_PER_TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    kind: EstimatorKind
    chars_per_token: float
    fixed_per_message: int
    fixed_per_part: int
    fixed_per_tool_call: int
    encoding: TokenizerEncoding
    provider: _message_pb2.Provider
    def __init__(self, kind: _Optional[_Union[EstimatorKind, str]] = ..., chars_per_token: _Optional[float] = ..., fixed_per_message: _Optional[int] = ..., fixed_per_part: _Optional[int] = ..., fixed_per_tool_call: _Optional[int] = ..., encoding: _Optional[_Union[TokenizerEncoding, str]] = ..., provider: _Optional[_Union[_message_pb2.Provider, str]] = ...) -> None: ...

class Budget(_message.Message):
    __slots__ = ("max_tokens", "strategy", "estimator", "min_messages", "protected_roles", "retained_ids", "context_window", "output_reserve", "auto_compact", "history_start", "trim_latest_user_message", "tool_result_clearing", "reasoning_clearing", "trim_step_tokens", "min_trim_gain")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    MIN_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PROTECTED_ROLES_FIELD_NUMBER: _ClassVar[int]
    RETAINED_IDS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_RESERVE_FIELD_NUMBER: _ClassVar[int]
    AUTO_COMPACT_FIELD_NUMBER: _ClassVar[int]
    HISTORY_START_FIELD_NUMBER: _ClassVar[int]
    TRIM_LATEST_USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_CLEARING_FIELD_NUMBER: _ClassVar[int]
    REASONING_CLEARING_FIELD_NUMBER: _ClassVar[int]
    TRIM_STEP_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MIN_TRIM_GAIN_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    strategy: BudgetStrategy
    estimator: Estimator
    min_messages: int
    protected_roles: _containers.RepeatedScalarFieldContainer[_message_pb2.Role]
    retained_ids: _containers.RepeatedScalarFieldContainer[str]
    context_window: int
    output_reserve: int
    auto_compact: bool
    history_start: HistoryStart
    trim_latest_user_message: bool
    tool_result_clearing: ToolResultClearing
    reasoning_clearing: ReasoningClearing
    trim_step_tokens: int
    min_trim_gain: float
    def __init__(self, max_tokens: _Optional[int] = ..., strategy: _Optional[_Union[BudgetStrategy, str]] = ..., estimator: _Optional[_Union[Estimator, _Mapping]] = ..., min_messages: _Optional[int] = ..., protected_roles: _Optional[_Iterable[_Union[_message_pb2.Role, str]]] = ..., retained_ids: _Optional[_Iterable[str]] = ..., context_window: _Optional[int] = ..., output_reserve: _Optional[int] = ..., auto_compact: bool = ..., history_start: _Optional[_Union[HistoryStart, str]] = ..., trim_latest_user_message: bool = ..., tool_result_clearing: _Optional[_Union[ToolResultClearing, _Mapping]] = ..., reasoning_clearing: _Optional[_Union[ReasoningClearing, _Mapping]] = ..., trim_step_tokens: _Optional[int] = ..., min_trim_gain: _Optional[float] = ...) -> None: ...

class ToolResultClearing(_message.Message):
    __slots__ = ("trigger_tokens", "keep_recent", "clear_at_least_tokens", "exclude_tools", "placeholder", "clear_inputs")
    TRIGGER_TOKENS_FIELD_NUMBER: _ClassVar[int]
    KEEP_RECENT_FIELD_NUMBER: _ClassVar[int]
    CLEAR_AT_LEAST_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_TOOLS_FIELD_NUMBER: _ClassVar[int]
    PLACEHOLDER_FIELD_NUMBER: _ClassVar[int]
    CLEAR_INPUTS_FIELD_NUMBER: _ClassVar[int]
    trigger_tokens: int
    keep_recent: int
    clear_at_least_tokens: int
    exclude_tools: _containers.RepeatedScalarFieldContainer[str]
    placeholder: str
    clear_inputs: bool
    def __init__(self, trigger_tokens: _Optional[int] = ..., keep_recent: _Optional[int] = ..., clear_at_least_tokens: _Optional[int] = ..., exclude_tools: _Optional[_Iterable[str]] = ..., placeholder: _Optional[str] = ..., clear_inputs: bool = ...) -> None: ...

class ReasoningClearing(_message.Message):
    __slots__ = ("keep_recent_turns",)
    KEEP_RECENT_TURNS_FIELD_NUMBER: _ClassVar[int]
    keep_recent_turns: int
    def __init__(self, keep_recent_turns: _Optional[int] = ...) -> None: ...

class DeferredBlock(_message.Message):
    __slots__ = ("segment", "messages", "merge_policy")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MERGE_POLICY_FIELD_NUMBER: _ClassVar[int]
    segment: _state_pb2.Segment
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    merge_policy: _artifact_pb2.MergePolicy
    def __init__(self, segment: _Optional[_Union[_state_pb2.Segment, str]] = ..., messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., merge_policy: _Optional[_Union[_artifact_pb2.MergePolicy, str]] = ...) -> None: ...

class CustomRedactionPattern(_message.Message):
    __slots__ = ("name", "regex")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REGEX_FIELD_NUMBER: _ClassVar[int]
    name: str
    regex: str
    def __init__(self, name: _Optional[str] = ..., regex: _Optional[str] = ...) -> None: ...

class RedactionHook(_message.Message):
    __slots__ = ("patterns", "custom_patterns", "replacement", "segments", "remove_message")
    PATTERNS_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_PATTERNS_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENT_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    REMOVE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    patterns: _containers.RepeatedScalarFieldContainer[RedactionPattern]
    custom_patterns: _containers.RepeatedCompositeFieldContainer[CustomRedactionPattern]
    replacement: str
    segments: _containers.RepeatedScalarFieldContainer[_state_pb2.Segment]
    remove_message: bool
    def __init__(self, patterns: _Optional[_Iterable[_Union[RedactionPattern, str]]] = ..., custom_patterns: _Optional[_Iterable[_Union[CustomRedactionPattern, _Mapping]]] = ..., replacement: _Optional[str] = ..., segments: _Optional[_Iterable[_Union[_state_pb2.Segment, str]]] = ..., remove_message: bool = ...) -> None: ...

class Hook(_message.Message):
    __slots__ = ("redaction",)
    REDACTION_FIELD_NUMBER: _ClassVar[int]
    redaction: RedactionHook
    def __init__(self, redaction: _Optional[_Union[RedactionHook, _Mapping]] = ...) -> None: ...

class SegmentFormatter(_message.Message):
    __slots__ = ("segment", "xml_tag", "prefix", "join", "template")
    class XmlTag(_message.Message):
        __slots__ = ("tag",)
        TAG_FIELD_NUMBER: _ClassVar[int]
        tag: str
        def __init__(self, tag: _Optional[str] = ...) -> None: ...
    class Prefix(_message.Message):
        __slots__ = ("text",)
        TEXT_FIELD_NUMBER: _ClassVar[int]
        text: str
        def __init__(self, text: _Optional[str] = ...) -> None: ...
    class Join(_message.Message):
        __slots__ = ("separator", "role", "id")
        SEPARATOR_FIELD_NUMBER: _ClassVar[int]
        ROLE_FIELD_NUMBER: _ClassVar[int]
        ID_FIELD_NUMBER: _ClassVar[int]
        separator: str
        role: _message_pb2.Role
        id: str
        def __init__(self, separator: _Optional[str] = ..., role: _Optional[_Union[_message_pb2.Role, str]] = ..., id: _Optional[str] = ...) -> None: ...
    class Template(_message.Message):
        __slots__ = ("template",)
        TEMPLATE_FIELD_NUMBER: _ClassVar[int]
        template: str
        def __init__(self, template: _Optional[str] = ...) -> None: ...
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    XML_TAG_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    JOIN_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    segment: _state_pb2.Segment
    xml_tag: SegmentFormatter.XmlTag
    prefix: SegmentFormatter.Prefix
    join: SegmentFormatter.Join
    template: SegmentFormatter.Template
    def __init__(self, segment: _Optional[_Union[_state_pb2.Segment, str]] = ..., xml_tag: _Optional[_Union[SegmentFormatter.XmlTag, _Mapping]] = ..., prefix: _Optional[_Union[SegmentFormatter.Prefix, _Mapping]] = ..., join: _Optional[_Union[SegmentFormatter.Join, _Mapping]] = ..., template: _Optional[_Union[SegmentFormatter.Template, _Mapping]] = ...) -> None: ...

class RoleProjection(_message.Message):
    __slots__ = ("rules",)
    class Rule(_message.Message):
        __slots__ = ("actor_kind", "role")
        ACTOR_KIND_FIELD_NUMBER: _ClassVar[int]
        ROLE_FIELD_NUMBER: _ClassVar[int]
        actor_kind: _message_pb2.ActorKind
        role: _message_pb2.Role
        def __init__(self, actor_kind: _Optional[_Union[_message_pb2.ActorKind, str]] = ..., role: _Optional[_Union[_message_pb2.Role, str]] = ...) -> None: ...
    RULES_FIELD_NUMBER: _ClassVar[int]
    rules: _containers.RepeatedCompositeFieldContainer[RoleProjection.Rule]
    def __init__(self, rules: _Optional[_Iterable[_Union[RoleProjection.Rule, _Mapping]]] = ...) -> None: ...

class TextReplacement(_message.Message):
    __slots__ = ("segment", "message_id", "text")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    segment: _state_pb2.Segment
    message_id: str
    text: str
    def __init__(self, segment: _Optional[_Union[_state_pb2.Segment, str]] = ..., message_id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class RenderOptions(_message.Message):
    __slots__ = ("provider", "model", "auto_cache_breakpoints", "prompt_cache_key", "drop_unsupported_media")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    AUTO_CACHE_BREAKPOINTS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_CACHE_KEY_FIELD_NUMBER: _ClassVar[int]
    DROP_UNSUPPORTED_MEDIA_FIELD_NUMBER: _ClassVar[int]
    provider: _message_pb2.Provider
    model: str
    auto_cache_breakpoints: bool
    prompt_cache_key: str
    drop_unsupported_media: bool
    def __init__(self, provider: _Optional[_Union[_message_pb2.Provider, str]] = ..., model: _Optional[str] = ..., auto_cache_breakpoints: bool = ..., prompt_cache_key: _Optional[str] = ..., drop_unsupported_media: bool = ...) -> None: ...

class Target(_message.Message):
    __slots__ = ("name", "view", "segments", "budget", "formatters", "render")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    FORMATTERS_FIELD_NUMBER: _ClassVar[int]
    RENDER_FIELD_NUMBER: _ClassVar[int]
    name: str
    view: str
    segments: _containers.RepeatedScalarFieldContainer[_state_pb2.Segment]
    budget: Budget
    formatters: _containers.RepeatedCompositeFieldContainer[SegmentFormatter]
    render: RenderOptions
    def __init__(self, name: _Optional[str] = ..., view: _Optional[str] = ..., segments: _Optional[_Iterable[_Union[_state_pb2.Segment, str]]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., formatters: _Optional[_Iterable[_Union[SegmentFormatter, _Mapping]]] = ..., render: _Optional[_Union[RenderOptions, _Mapping]] = ...) -> None: ...

class CommitOptions(_message.Message):
    __slots__ = ("expected_version", "idempotency_key", "deltas")
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    expected_version: int
    idempotency_key: str
    deltas: _containers.RepeatedCompositeFieldContainer[_state_pb2.Delta]
    def __init__(self, expected_version: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., deltas: _Optional[_Iterable[_Union[_state_pb2.Delta, _Mapping]]] = ...) -> None: ...

class CompileRequest(_message.Message):
    __slots__ = ("conversation_id", "system", "history", "memory", "tools", "tool_definitions", "experiences", "current_turn", "pending", "artifacts", "turn_id", "identity", "repair", "budget", "deferred_blocks", "resolve_vars", "hooks", "formatters", "role_projection", "text_replacements", "targets", "scratch", "render", "commit", "tool_arguments_repair", "include", "system_prompt", "large_tool_results", "recall_tools")
    class ResolveVarsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
    EXPERIENCES_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TURN_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    REPAIR_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    DEFERRED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    RESOLVE_VARS_FIELD_NUMBER: _ClassVar[int]
    HOOKS_FIELD_NUMBER: _ClassVar[int]
    FORMATTERS_FIELD_NUMBER: _ClassVar[int]
    ROLE_PROJECTION_FIELD_NUMBER: _ClassVar[int]
    TEXT_REPLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    SCRATCH_FIELD_NUMBER: _ClassVar[int]
    RENDER_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    TOOL_ARGUMENTS_REPAIR_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    LARGE_TOOL_RESULTS_FIELD_NUMBER: _ClassVar[int]
    RECALL_TOOLS_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    system: MessageList
    history: MessageList
    memory: MessageList
    tools: MessageList
    tool_definitions: ToolDefinitionList
    experiences: ExperienceList
    current_turn: CurrentTurn
    pending: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    artifacts: _containers.RepeatedCompositeFieldContainer[_artifact_pb2.Artifact]
    turn_id: str
    identity: IdentityOptions
    repair: ToolRoundRepair
    budget: Budget
    deferred_blocks: _containers.RepeatedCompositeFieldContainer[DeferredBlock]
    resolve_vars: _containers.ScalarMap[str, str]
    hooks: _containers.RepeatedCompositeFieldContainer[Hook]
    formatters: _containers.RepeatedCompositeFieldContainer[SegmentFormatter]
    role_projection: RoleProjection
    text_replacements: _containers.RepeatedCompositeFieldContainer[TextReplacement]
    targets: _containers.RepeatedCompositeFieldContainer[Target]
    scratch: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    render: RenderOptions
    commit: CommitOptions
    tool_arguments_repair: ToolArgumentsRepair
    include: _containers.RepeatedScalarFieldContainer[CompileResultPart]
    system_prompt: SystemPromptOptions
    large_tool_results: LargeToolResults
    recall_tools: bool
    def __init__(self, conversation_id: _Optional[str] = ..., system: _Optional[_Union[MessageList, _Mapping]] = ..., history: _Optional[_Union[MessageList, _Mapping]] = ..., memory: _Optional[_Union[MessageList, _Mapping]] = ..., tools: _Optional[_Union[MessageList, _Mapping]] = ..., tool_definitions: _Optional[_Union[ToolDefinitionList, _Mapping]] = ..., experiences: _Optional[_Union[ExperienceList, _Mapping]] = ..., current_turn: _Optional[_Union[CurrentTurn, _Mapping]] = ..., pending: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., artifacts: _Optional[_Iterable[_Union[_artifact_pb2.Artifact, _Mapping]]] = ..., turn_id: _Optional[str] = ..., identity: _Optional[_Union[IdentityOptions, _Mapping]] = ..., repair: _Optional[_Union[ToolRoundRepair, str]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., deferred_blocks: _Optional[_Iterable[_Union[DeferredBlock, _Mapping]]] = ..., resolve_vars: _Optional[_Mapping[str, str]] = ..., hooks: _Optional[_Iterable[_Union[Hook, _Mapping]]] = ..., formatters: _Optional[_Iterable[_Union[SegmentFormatter, _Mapping]]] = ..., role_projection: _Optional[_Union[RoleProjection, _Mapping]] = ..., text_replacements: _Optional[_Iterable[_Union[TextReplacement, _Mapping]]] = ..., targets: _Optional[_Iterable[_Union[Target, _Mapping]]] = ..., scratch: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., render: _Optional[_Union[RenderOptions, _Mapping]] = ..., commit: _Optional[_Union[CommitOptions, _Mapping]] = ..., tool_arguments_repair: _Optional[_Union[ToolArgumentsRepair, str]] = ..., include: _Optional[_Iterable[_Union[CompileResultPart, str]]] = ..., system_prompt: _Optional[_Union[SystemPromptOptions, _Mapping]] = ..., large_tool_results: _Optional[_Union[LargeToolResults, _Mapping]] = ..., recall_tools: bool = ...) -> None: ...

class LargeToolResults(_message.Message):
    __slots__ = ("min_bytes", "preview_bytes", "exclude_tools", "add_read_tool")
    MIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_TOOLS_FIELD_NUMBER: _ClassVar[int]
    ADD_READ_TOOL_FIELD_NUMBER: _ClassVar[int]
    min_bytes: int
    preview_bytes: int
    exclude_tools: _containers.RepeatedScalarFieldContainer[str]
    add_read_tool: bool
    def __init__(self, min_bytes: _Optional[int] = ..., preview_bytes: _Optional[int] = ..., exclude_tools: _Optional[_Iterable[str]] = ..., add_read_tool: bool = ...) -> None: ...

class SystemPromptOptions(_message.Message):
    __slots__ = ("tool_guidance", "tool_call_rules")
    TOOL_GUIDANCE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_RULES_FIELD_NUMBER: _ClassVar[int]
    tool_guidance: bool
    tool_call_rules: bool
    def __init__(self, tool_guidance: bool = ..., tool_call_rules: bool = ...) -> None: ...

class Transformation(_message.Message):
    __slots__ = ("action", "reason", "segment")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    action: TransformationAction
    reason: TransformationReason
    segment: _state_pb2.Segment
    def __init__(self, action: _Optional[_Union[TransformationAction, str]] = ..., reason: _Optional[_Union[TransformationReason, str]] = ..., segment: _Optional[_Union[_state_pb2.Segment, str]] = ...) -> None: ...

class WritebackMessage(_message.Message):
    __slots__ = ("segment", "index", "id", "origin")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    segment: _state_pb2.Segment
    index: int
    id: str
    origin: str
    def __init__(self, segment: _Optional[_Union[_state_pb2.Segment, str]] = ..., index: _Optional[int] = ..., id: _Optional[str] = ..., origin: _Optional[str] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ("system", "history", "memory", "tools", "artifacts")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    system: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    history: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    memory: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    tools: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    artifacts: _containers.RepeatedCompositeFieldContainer[_artifact_pb2.Artifact]
    def __init__(self, system: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., history: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., memory: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., artifacts: _Optional[_Iterable[_Union[_artifact_pb2.Artifact, _Mapping]]] = ...) -> None: ...

class Writeback(_message.Message):
    __slots__ = ("messages", "snapshot")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[WritebackMessage]
    snapshot: Snapshot
    def __init__(self, messages: _Optional[_Iterable[_Union[WritebackMessage, _Mapping]]] = ..., snapshot: _Optional[_Union[Snapshot, _Mapping]] = ...) -> None: ...

class IntroducedMessage(_message.Message):
    __slots__ = ("segment", "message")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    segment: _state_pb2.Segment
    message: _message_pb2.Message
    def __init__(self, segment: _Optional[_Union[_state_pb2.Segment, str]] = ..., message: _Optional[_Union[_message_pb2.Message, _Mapping]] = ...) -> None: ...

class CompileSource(_message.Message):
    __slots__ = ("snapshot", "pending", "current_turn")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TURN_FIELD_NUMBER: _ClassVar[int]
    snapshot: Snapshot
    pending: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    current_turn: CurrentTurn
    def __init__(self, snapshot: _Optional[_Union[Snapshot, _Mapping]] = ..., pending: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., current_turn: _Optional[_Union[CurrentTurn, _Mapping]] = ...) -> None: ...

class CompiledPayload(_message.Message):
    __slots__ = ("system", "history", "tools", "memory", "scratch", "tool_definitions")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    SCRATCH_FIELD_NUMBER: _ClassVar[int]
    TOOL_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
    system: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    history: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    tools: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    memory: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    scratch: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    tool_definitions: _containers.RepeatedCompositeFieldContainer[_state_pb2.ToolDefinition]
    def __init__(self, system: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., history: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., memory: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., scratch: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., tool_definitions: _Optional[_Iterable[_Union[_state_pb2.ToolDefinition, _Mapping]]] = ...) -> None: ...

class RenderedRequest(_message.Message):
    __slots__ = ("provider", "model", "json", "warnings", "renamed_tool_call_ids")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    RENAMED_TOOL_CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    provider: _message_pb2.Provider
    model: str
    json: bytes
    warnings: _containers.RepeatedCompositeFieldContainer[Warning]
    renamed_tool_call_ids: _containers.RepeatedCompositeFieldContainer[RenamedToolCallId]
    def __init__(self, provider: _Optional[_Union[_message_pb2.Provider, str]] = ..., model: _Optional[str] = ..., json: _Optional[bytes] = ..., warnings: _Optional[_Iterable[_Union[Warning, _Mapping]]] = ..., renamed_tool_call_ids: _Optional[_Iterable[_Union[RenamedToolCallId, _Mapping]]] = ...) -> None: ...

class RenamedToolCallId(_message.Message):
    __slots__ = ("message_id", "stored", "rendered")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    RENDERED_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    stored: str
    rendered: str
    def __init__(self, message_id: _Optional[str] = ..., stored: _Optional[str] = ..., rendered: _Optional[str] = ...) -> None: ...

class Projection(_message.Message):
    __slots__ = ("name", "text", "messages", "transformations", "artifact_ids", "rendered", "usage", "calibration")
    class TransformationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Transformation
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Transformation, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TRANSFORMATIONS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_IDS_FIELD_NUMBER: _ClassVar[int]
    RENDERED_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    text: str
    messages: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    transformations: _containers.MessageMap[str, Transformation]
    artifact_ids: _containers.RepeatedScalarFieldContainer[str]
    rendered: RenderedRequest
    usage: Usage
    calibration: TokenCalibration
    def __init__(self, name: _Optional[str] = ..., text: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., transformations: _Optional[_Mapping[str, Transformation]] = ..., artifact_ids: _Optional[_Iterable[str]] = ..., rendered: _Optional[_Union[RenderedRequest, _Mapping]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., calibration: _Optional[_Union[TokenCalibration, _Mapping]] = ...) -> None: ...

class Persistence(_message.Message):
    __slots__ = ("system", "history", "memory", "tools", "artifacts")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    system: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    history: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    memory: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    tools: _containers.RepeatedCompositeFieldContainer[_message_pb2.Message]
    artifacts: _containers.RepeatedCompositeFieldContainer[_artifact_pb2.Artifact]
    def __init__(self, system: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., history: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., memory: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[_message_pb2.Message, _Mapping]]] = ..., artifacts: _Optional[_Iterable[_Union[_artifact_pb2.Artifact, _Mapping]]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("system", "history", "memory", "tools", "tool_definitions", "pending", "reserved", "limit", "total", "estimator", "history_before_trim", "reply_priming", "cleared_tokens")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    HISTORY_BEFORE_TRIM_FIELD_NUMBER: _ClassVar[int]
    REPLY_PRIMING_FIELD_NUMBER: _ClassVar[int]
    CLEARED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    system: int
    history: int
    memory: int
    tools: int
    tool_definitions: int
    pending: int
    reserved: int
    limit: int
    total: int
    estimator: EstimatorKind
    history_before_trim: int
    reply_priming: int
    cleared_tokens: int
    def __init__(self, system: _Optional[int] = ..., history: _Optional[int] = ..., memory: _Optional[int] = ..., tools: _Optional[int] = ..., tool_definitions: _Optional[int] = ..., pending: _Optional[int] = ..., reserved: _Optional[int] = ..., limit: _Optional[int] = ..., total: _Optional[int] = ..., estimator: _Optional[_Union[EstimatorKind, str]] = ..., history_before_trim: _Optional[int] = ..., reply_priming: _Optional[int] = ..., cleared_tokens: _Optional[int] = ...) -> None: ...

class Warning(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class StageTiming(_message.Message):
    __slots__ = ("stage", "duration_ns")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    stage: str
    duration_ns: int
    def __init__(self, stage: _Optional[str] = ..., duration_ns: _Optional[int] = ...) -> None: ...

class CompileResult(_message.Message):
    __slots__ = ("payload", "rendered", "source", "normalized_snapshot", "writeback", "introduced", "transformations", "projections", "persistence", "usage", "warnings", "stage_timings", "prefix_fingerprint", "version", "committed_version", "budget_dropped_messages", "cache_impact", "calibration", "message_tokens")
    class TransformationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Transformation
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Transformation, _Mapping]] = ...) -> None: ...
    class MessageTokensEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    RENDERED_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    NORMALIZED_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    WRITEBACK_FIELD_NUMBER: _ClassVar[int]
    INTRODUCED_FIELD_NUMBER: _ClassVar[int]
    TRANSFORMATIONS_FIELD_NUMBER: _ClassVar[int]
    PROJECTIONS_FIELD_NUMBER: _ClassVar[int]
    PERSISTENCE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    STAGE_TIMINGS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    BUDGET_DROPPED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CACHE_IMPACT_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    payload: CompiledPayload
    rendered: RenderedRequest
    source: CompileSource
    normalized_snapshot: Snapshot
    writeback: Writeback
    introduced: _containers.RepeatedCompositeFieldContainer[IntroducedMessage]
    transformations: _containers.MessageMap[str, Transformation]
    projections: _containers.RepeatedCompositeFieldContainer[Projection]
    persistence: Persistence
    usage: Usage
    warnings: _containers.RepeatedCompositeFieldContainer[Warning]
    stage_timings: _containers.RepeatedCompositeFieldContainer[StageTiming]
    prefix_fingerprint: str
    version: int
    committed_version: int
    budget_dropped_messages: int
    cache_impact: CacheImpact
    calibration: TokenCalibration
    message_tokens: _containers.ScalarMap[str, int]
    def __init__(self, payload: _Optional[_Union[CompiledPayload, _Mapping]] = ..., rendered: _Optional[_Union[RenderedRequest, _Mapping]] = ..., source: _Optional[_Union[CompileSource, _Mapping]] = ..., normalized_snapshot: _Optional[_Union[Snapshot, _Mapping]] = ..., writeback: _Optional[_Union[Writeback, _Mapping]] = ..., introduced: _Optional[_Iterable[_Union[IntroducedMessage, _Mapping]]] = ..., transformations: _Optional[_Mapping[str, Transformation]] = ..., projections: _Optional[_Iterable[_Union[Projection, _Mapping]]] = ..., persistence: _Optional[_Union[Persistence, _Mapping]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., warnings: _Optional[_Iterable[_Union[Warning, _Mapping]]] = ..., stage_timings: _Optional[_Iterable[_Union[StageTiming, _Mapping]]] = ..., prefix_fingerprint: _Optional[str] = ..., version: _Optional[int] = ..., committed_version: _Optional[int] = ..., budget_dropped_messages: _Optional[int] = ..., cache_impact: _Optional[_Union[CacheImpact, _Mapping]] = ..., calibration: _Optional[_Union[TokenCalibration, _Mapping]] = ..., message_tokens: _Optional[_Mapping[str, int]] = ...) -> None: ...

class TokenCalibration(_message.Message):
    __slots__ = ("provider", "model", "estimator", "estimated_tokens", "correction", "corrected_tokens", "requested_limit", "reports", "mean_absolute_relative_error", "store_read_error")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CORRECTION_FIELD_NUMBER: _ClassVar[int]
    CORRECTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_LIMIT_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    MEAN_ABSOLUTE_RELATIVE_ERROR_FIELD_NUMBER: _ClassVar[int]
    STORE_READ_ERROR_FIELD_NUMBER: _ClassVar[int]
    provider: _message_pb2.Provider
    model: str
    estimator: EstimatorKind
    estimated_tokens: int
    correction: float
    corrected_tokens: int
    requested_limit: int
    reports: int
    mean_absolute_relative_error: float
    store_read_error: str
    def __init__(self, provider: _Optional[_Union[_message_pb2.Provider, str]] = ..., model: _Optional[str] = ..., estimator: _Optional[_Union[EstimatorKind, str]] = ..., estimated_tokens: _Optional[int] = ..., correction: _Optional[float] = ..., corrected_tokens: _Optional[int] = ..., requested_limit: _Optional[int] = ..., reports: _Optional[int] = ..., mean_absolute_relative_error: _Optional[float] = ..., store_read_error: _Optional[str] = ...) -> None: ...

class CacheImpact(_message.Message):
    __slots__ = ("previous_version", "unchanged_prefix_tokens", "rewritten_tokens", "unchanged_prefix_messages", "trim_steps")
    PREVIOUS_VERSION_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_PREFIX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REWRITTEN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_PREFIX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TRIM_STEPS_FIELD_NUMBER: _ClassVar[int]
    previous_version: int
    unchanged_prefix_tokens: int
    rewritten_tokens: int
    unchanged_prefix_messages: int
    trim_steps: _containers.RepeatedCompositeFieldContainer[TrimStepForecast]
    def __init__(self, previous_version: _Optional[int] = ..., unchanged_prefix_tokens: _Optional[int] = ..., rewritten_tokens: _Optional[int] = ..., unchanged_prefix_messages: _Optional[int] = ..., trim_steps: _Optional[_Iterable[_Union[TrimStepForecast, _Mapping]]] = ...) -> None: ...

class TrimStepForecast(_message.Message):
    __slots__ = ("step", "freed_tokens", "invalidated_tokens", "needed", "skipped", "first_message_id")
    STEP_FIELD_NUMBER: _ClassVar[int]
    FREED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INVALIDATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NEEDED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    FIRST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    step: TrimStep
    freed_tokens: int
    invalidated_tokens: int
    needed: bool
    skipped: bool
    first_message_id: str
    def __init__(self, step: _Optional[_Union[TrimStep, str]] = ..., freed_tokens: _Optional[int] = ..., invalidated_tokens: _Optional[int] = ..., needed: bool = ..., skipped: bool = ..., first_message_id: _Optional[str] = ...) -> None: ...
