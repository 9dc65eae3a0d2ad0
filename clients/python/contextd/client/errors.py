"""Exceptions for failed contextd calls, one class per gRPC status code the API uses."""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple, Union

import grpc
from google.rpc import error_details_pb2, status_pb2

#: The trailer in which the server reports the stored version of a version conflict.
CURRENT_VERSION_TRAILER = "contextd-current-version"

# For servers (or proxies) that drop trailers: "expected version 3, current version 5".
_CURRENT_VERSION_IN_MESSAGE = re.compile(r"current version\D{0,4}(\d+)")

#: The domain of the google.rpc.ErrorInfo every contextd error carries.
ERROR_DOMAIN = "contextd.dev"

_STATUS_DETAILS_TRAILER = "grpc-status-details-bin"

Metadata = Iterable[Tuple[str, Union[str, bytes]]]


class FieldViolation(NamedTuple):
    """One google.rpc.BadRequest field violation: the request field in protobuf field names
    (``deltas[1].append_messages.messages[0].parts[0].tool_call.arguments``) and what is wrong."""

    field: str
    description: str


class ContextdError(Exception):
    """A failed contextd call. `message` says what was wrong and where.

    The structured details (docs/errors.md): `reason` is the stable reason of the error's
    google.rpc.ErrorInfo ("TOOL_ARGUMENTS_INVALID", "VERSION_CONFLICT", or the code's name; "" when
    the server sent none), `metadata` its metadata ("rule", "current_version", ...), and
    `field_violations` the google.rpc.BadRequest violations of an INVALID_ARGUMENT.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str) -> None:
        super().__init__(f"{self.code.name}: {message}")
        self.message = message
        self.reason = ""
        self.metadata: Dict[str, str] = {}
        self.field_violations: List[FieldViolation] = []


class InvalidArgument(ContextdError):
    """Malformed request, duplicate ids, invalid tool round, unknown enum, bad target."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class FailedPrecondition(ContextdError):
    """Missing identity policy or a provider rule violated."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(ContextdError):
    """Over the token budget or a size limit."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class VersionConflict(ContextdError):
    """The conversation is no longer at the expected version (ABORTED).

    `current_version` is the stored version when the server rejected the call, or None when the
    server did not say.
    """

    code = grpc.StatusCode.ABORTED

    def __init__(self, message: str, current_version: Optional[int]) -> None:
        super().__init__(message)
        self.current_version = current_version


class NotFound(ContextdError):
    """Unknown conversation where one is required."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ContextdError):
    """What the call would create exists already (a `fork` into an id that was ever written)."""

    code = grpc.StatusCode.ALREADY_EXISTS


class OutOfRange(ContextdError):
    """A version outside what the sidecar keeps: past the current one, or before a conversation's
    history window (`get_state` with `at_version`, `fork`, `rewind`, a `watch` resumed too late);
    the message names the oldest version still readable."""

    code = grpc.StatusCode.OUT_OF_RANGE


class Unavailable(ContextdError):
    """The sidecar is starting or stopping, or its store is unreachable; safe calls are retried."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(ContextdError):
    """The call's deadline passed."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Cancelled(ContextdError):
    """The call was cancelled."""

    code = grpc.StatusCode.CANCELLED


class Unauthenticated(ContextdError):
    """Missing or wrong bearer token."""

    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(ContextdError):
    """Not allowed, for example a conversation of another tenant."""

    code = grpc.StatusCode.PERMISSION_DENIED


class Unimplemented(ContextdError):
    """The sidecar does not implement this RPC."""

    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(ContextdError):
    """Any other code: a bug in the sidecar or the transport. `grpc_code` is the real code."""

    code = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, grpc_code: grpc.StatusCode) -> None:
        super().__init__(message)
        self.grpc_code = grpc_code


class OutcomeUnknown(ContextdError):
    """A write (a commit, or a compile with `commit`) whose outcome the client could not learn
    within its retries: it may or may not have applied. Sending the same request again with
    `idempotency_key` applies it at most once. `last` is the last attempt's error (Unavailable,
    DeadlineExceeded, or ResourceExhausted for an answer over the receive limit)."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, idempotency_key: str, last: ContextdError) -> None:
        super().__init__(
            "outcome unknown (the write may have applied; send it again with idempotency key "
            f"{idempotency_key!r} to apply it at most once): {last}"
        )
        self.idempotency_key = idempotency_key
        self.last = last


def response_too_large(failure: ContextdError) -> bool:
    """Whether `failure` is this client refusing an answer over its receive limit (grpcio:
    "Received message larger than max"), as opposed to the sidecar refusing a request, which
    applied nothing."""
    return isinstance(failure, ResourceExhausted) and "eceived message larger than max" in failure.message


def outcome_unknown(failure: ContextdError) -> bool:
    """Whether `failure` leaves open whether the sidecar applied a write: the sidecar commits
    before it answers, so a lost connection, a deadline that ran out after the commit, or an
    answer refused for its size may all hide a commit that happened."""
    return isinstance(failure, (Unavailable, DeadlineExceeded)) or response_too_large(failure)


_BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        FailedPrecondition,
        ResourceExhausted,
        NotFound,
        AlreadyExists,
        OutOfRange,
        Unavailable,
        DeadlineExceeded,
        Cancelled,
        Unauthenticated,
        PermissionDenied,
        Unimplemented,
    )
}


def from_status(code: grpc.StatusCode, message: str, trailer: Optional[Metadata]) -> ContextdError:
    """The exception for a call that ended with `code`, `message` and trailing metadata."""
    trailer = list(trailer or ())
    reason, metadata, violations = _details(trailer)
    error: ContextdError
    if code == grpc.StatusCode.ABORTED:
        version = metadata.get("current_version", "")
        error = VersionConflict(message, int(version) if version.isdigit() else _current_version(trailer, message))
    else:
        cls = _BY_CODE.get(code)
        error = Internal(message, code) if cls is None else cls(message)
    error.reason, error.metadata, error.field_violations = reason, metadata, violations
    return error


def from_rpc_error(error: grpc.RpcError) -> ContextdError:
    """Converts the error grpcio raised (sync or aio) into a ContextdError."""
    call = error if isinstance(error, (grpc.Call, grpc.aio.AioRpcError)) else None
    if call is None:
        return Internal(str(error), grpc.StatusCode.UNKNOWN)
    return from_status(call.code(), call.details() or "", call.trailing_metadata())


def _details(trailer: Metadata) -> Tuple[str, Dict[str, str], List[FieldViolation]]:
    """ErrorInfo (of contextd's domain) and BadRequest from the `grpc-status-details-bin` trailer."""
    reason, metadata, violations = "", {}, []  # type: Tuple[str, Dict[str, str], List[FieldViolation]]
    for key, value in trailer:
        if key != _STATUS_DETAILS_TRAILER or not isinstance(value, bytes):
            continue
        status = status_pb2.Status()
        try:
            status.ParseFromString(value)
        except Exception:  # a proxy's garbage is not the caller's error
            continue
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            bad_request = error_details_pb2.BadRequest()
            if detail.Is(info.DESCRIPTOR) and detail.Unpack(info) and info.domain == ERROR_DOMAIN and not reason:
                reason, metadata = info.reason, dict(info.metadata)
            elif detail.Is(bad_request.DESCRIPTOR) and detail.Unpack(bad_request):
                violations.extend(FieldViolation(v.field, v.description) for v in bad_request.field_violations)
    return reason, metadata, violations


def _current_version(trailer: Metadata, message: str) -> Optional[int]:
    for key, value in trailer:
        if key == CURRENT_VERSION_TRAILER:
            text = value.decode() if isinstance(value, bytes) else value
            if text.isdigit():
                return int(text)
    match = _CURRENT_VERSION_IN_MESSAGE.search(message)
    return int(match.group(1)) if match else None
