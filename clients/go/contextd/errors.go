package contextd

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// CurrentVersionTrailer is the trailer in which the server reports the stored version when a
// commit's expected version is stale.
const CurrentVersionTrailer = "contextd-current-version"

// ErrorDomain is the domain of the google.rpc.ErrorInfo every contextd error carries.
const ErrorDomain = "contextd.dev"

// FieldViolation is one google.rpc.BadRequest field violation: the request field, in protobuf
// field names ("deltas[1].append_messages.messages[0].parts[0].tool_call.arguments"), and what is
// wrong with it.
type FieldViolation struct {
	Field       string
	Description string
}

// Details are the structured details of a failed call (see docs/errors.md): the stable reason of
// its google.rpc.ErrorInfo ("TOOL_ARGUMENTS_INVALID", "VERSION_CONFLICT", or the code's name),
// its metadata, and the google.rpc.BadRequest field violations of an INVALID_ARGUMENT.
type Details struct {
	reason     string
	metadata   map[string]string
	violations []FieldViolation
}

// Reason is the ErrorInfo reason, "" when the server sent none (an error from the transport).
func (d Details) Reason() string { return d.reason }

// Metadata is the ErrorInfo metadata ("rule", "current_version", ...); nil when there is none.
func (d Details) Metadata() map[string]string { return d.metadata }

// FieldViolations are the BadRequest field violations, in the server's order.
func (d Details) FieldViolations() []FieldViolation { return d.violations }

// readDetails collects ErrorInfo (of contextd's domain) and BadRequest from the decoded details.
func readDetails(messages []any) Details {
	var d Details
	for _, message := range messages {
		switch detail := message.(type) {
		case *errdetails.ErrorInfo:
			if detail.GetDomain() == ErrorDomain && d.reason == "" {
				d.reason = detail.GetReason()
				d.metadata = detail.GetMetadata()
			}
		case *errdetails.BadRequest:
			for _, violation := range detail.GetFieldViolations() {
				d.violations = append(d.violations, FieldViolation{Field: violation.GetField(), Description: violation.GetDescription()})
			}
		}
	}
	return d
}

// Sentinels for errors.Is, one per gRPC code the contextd API uses (see the errors section of the
// semantics). A failed RPC is a *VersionConflictError (ABORTED) or an *Error (every other code),
// and matches exactly one sentinel.
var (
	ErrInvalidArgument    = errors.New("contextd: invalid argument")
	ErrFailedPrecondition = errors.New("contextd: failed precondition")
	ErrResourceExhausted  = errors.New("contextd: resource exhausted")
	ErrVersionConflict    = errors.New("contextd: version conflict")
	ErrNotFound           = errors.New("contextd: not found")
	ErrUnavailable        = errors.New("contextd: unavailable")
	ErrDeadlineExceeded   = errors.New("contextd: deadline exceeded")
	ErrCanceled           = errors.New("contextd: canceled")
	ErrUnauthenticated    = errors.New("contextd: unauthenticated")
	ErrPermissionDenied   = errors.New("contextd: permission denied")
	ErrUnimplemented      = errors.New("contextd: unimplemented")
	ErrInternal           = errors.New("contextd: internal")
)

var sentinels = map[codes.Code]error{
	codes.InvalidArgument:    ErrInvalidArgument,
	codes.FailedPrecondition: ErrFailedPrecondition,
	codes.ResourceExhausted:  ErrResourceExhausted,
	codes.Aborted:            ErrVersionConflict,
	codes.NotFound:           ErrNotFound,
	codes.Unavailable:        ErrUnavailable,
	codes.DeadlineExceeded:   ErrDeadlineExceeded,
	codes.Canceled:           ErrCanceled,
	codes.Unauthenticated:    ErrUnauthenticated,
	codes.PermissionDenied:   ErrPermissionDenied,
	codes.Unimplemented:      ErrUnimplemented,
}

// Error is a failed RPC. It matches the sentinel of its code with errors.Is, and status.Code
// still reports its code.
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the server's message, which says what was wrong and where.
	Message string
	Details
	cause  error
	status *status.Status // the server's status, details included, when the transport was gRPC
}

func (e *Error) Error() string {
	return fmt.Sprintf("contextd: %s: %s", e.Code, e.Message)
}

// Is matches the sentinel of the error's code; codes without their own sentinel match
// ErrInternal.
func (e *Error) Is(target error) bool {
	if sentinel, ok := sentinels[e.Code]; ok {
		return target == sentinel
	}
	return target == ErrInternal
}

// Unwrap returns the transport's original error.
func (e *Error) Unwrap() error { return e.cause }

// GRPCStatus lets status.Code and status.FromError see through the wrapper, details included
// when the call went over gRPC.
func (e *Error) GRPCStatus() *status.Status {
	if e.status != nil {
		return e.status
	}
	return status.New(e.Code, e.Message)
}

// VersionConflictError is an ABORTED call: the conversation is no longer at the version the
// caller expected. It matches ErrVersionConflict with errors.Is.
type VersionConflictError struct {
	// Message is the server's message.
	Message string
	// CurrentVersion is the stored version when the server rejected the call; -1 when the server
	// did not say.
	CurrentVersion int64
	Details
	cause  error
	status *status.Status
}

func (e *VersionConflictError) Error() string {
	return fmt.Sprintf("contextd: version conflict (current version %d): %s", e.CurrentVersion, e.Message)
}

// Is matches ErrVersionConflict.
func (e *VersionConflictError) Is(target error) bool { return target == ErrVersionConflict }

// Unwrap returns the transport's original error.
func (e *VersionConflictError) Unwrap() error { return e.cause }

// GRPCStatus lets status.Code and status.FromError see through the wrapper.
func (e *VersionConflictError) GRPCStatus() *status.Status {
	if e.status != nil {
		return e.status
	}
	return status.New(codes.Aborted, e.Message)
}

// currentVersionInMessage finds the version in messages such as "expected version 3, current
// version 5", for servers (or proxies) that drop trailers.
var currentVersionInMessage = regexp.MustCompile(`current version\D{0,4}(\d+)`)

// newError converts a transport error into the package's typed errors; trailer is the RPC's
// trailing metadata (nil when the transport has none).
func newError(err error, trailer metadata.MD) error {
	if err == nil {
		return nil
	}
	var code codes.Code
	var message string
	var decoded []any
	var grpcStatus *status.Status
	var connectErr *connect.Error
	if errors.As(err, &connectErr) {
		code = codes.Code(connectErr.Code())
		message = connectErr.Message()
		for _, detail := range connectErr.Details() {
			if value, err := detail.Value(); err == nil {
				decoded = append(decoded, value)
			}
		}
		if trailer == nil {
			trailer = metadata.MD{}
			for key, values := range connectErr.Meta() {
				trailer.Append(key, values...)
			}
		}
	} else if s, ok := status.FromError(err); ok {
		code = s.Code()
		message = s.Message()
		decoded = s.Details()
		grpcStatus = s
	} else {
		// A local failure before the RPC went out (for example a canceled context).
		code = status.FromContextError(err).Code()
		message = err.Error()
	}
	details := readDetails(decoded)
	if code == codes.Aborted {
		return &VersionConflictError{Message: message, CurrentVersion: currentVersion(details, trailer, message), Details: details, cause: err, status: grpcStatus}
	}
	return &Error{Code: code, Message: message, Details: details, cause: err, status: grpcStatus}
}

// currentVersion reads the ErrorInfo's current_version, then the trailer, then the message.
func currentVersion(details Details, trailer metadata.MD, message string) int64 {
	if version, err := strconv.ParseInt(details.metadata["current_version"], 10, 64); err == nil {
		return version
	}
	for _, value := range trailer.Get(CurrentVersionTrailer) {
		if version, err := strconv.ParseInt(value, 10, 64); err == nil {
			return version
		}
	}
	if match := currentVersionInMessage.FindStringSubmatch(message); match != nil {
		if version, err := strconv.ParseInt(match[1], 10, 64); err == nil {
			return version
		}
	}
	return -1
}
