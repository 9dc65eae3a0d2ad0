"""The Python client of the contextd sidecar: the generated `contextd.v1` API plus what every agent
needs around it — deadlines, retries on UNAVAILABLE, commits retried with their idempotency key
until their outcome is known, one-RPC agent turns, compare-and-retry commits, exceptions per
status code, builders and stream iterators. `Client` blocks; `AsyncClient` runs on grpc.aio.
"""

from contextd.client._common import DEFAULT_ADDRESS, DEFAULT_MAX_MESSAGE_BYTES, channel_options
from contextd.client._sync import Client
from contextd.client.aio import AsyncClient
from contextd.client.builders import (
    ToolRound,
    append_assistant,
    append_messages,
    append_tool_result,
    append_user,
    assistant_text,
    error_payload,
    json_payload,
    remember,
    set_tool_definitions,
    system_text,
    text_message,
    text_part,
    text_payload,
    tool_call,
    tool_result_message,
    user_text,
)
from contextd.client.errors import (
    Cancelled,
    ContextdError,
    DeadlineExceeded,
    FailedPrecondition,
    FieldViolation,
    Internal,
    InvalidArgument,
    NotFound,
    OutcomeUnknown,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    VersionConflict,
)
from contextd.client.retry import DEFAULT_RETRY_POLICY, RetryPolicy

__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_RETRY_POLICY",
    "AsyncClient",
    "Cancelled",
    "Client",
    "ContextdError",
    "DeadlineExceeded",
    "FailedPrecondition",
    "FieldViolation",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "OutcomeUnknown",
    "PermissionDenied",
    "ResourceExhausted",
    "RetryPolicy",
    "ToolRound",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "VersionConflict",
    "append_assistant",
    "append_messages",
    "append_tool_result",
    "append_user",
    "assistant_text",
    "channel_options",
    "error_payload",
    "json_payload",
    "remember",
    "set_tool_definitions",
    "system_text",
    "text_message",
    "text_part",
    "text_payload",
    "tool_call",
    "tool_result_message",
    "user_text",
]
