package contextd

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// CurrentVersionTrailer is the trailer in which the server reports the stored version when a
// commit's expected version is stale.
const CurrentVersionTrailer = "contextd-current-version"

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
	cause   error
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

// GRPCStatus lets status.Code and status.FromError see through the wrapper.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

// VersionConflictError is an ABORTED call: the conversation is no longer at the version the
// caller expected. It matches ErrVersionConflict with errors.Is.
type VersionConflictError struct {
	// Message is the server's message.
	Message string
	// CurrentVersion is the stored version when the server rejected the call; -1 when the server
	// did not say.
	CurrentVersion int64
	cause          error
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
	var connectErr *connect.Error
	if errors.As(err, &connectErr) {
		code = codes.Code(connectErr.Code())
		message = connectErr.Message()
		if trailer == nil {
			trailer = metadata.MD{}
			for key, values := range connectErr.Meta() {
				trailer.Append(key, values...)
			}
		}
	} else if s, ok := status.FromError(err); ok {
		code = s.Code()
		message = s.Message()
	} else {
		// A local failure before the RPC went out (for example a canceled context).
		code = status.FromContextError(err).Code()
		message = err.Error()
	}
	if code == codes.Aborted {
		return &VersionConflictError{Message: message, CurrentVersion: currentVersion(trailer, message), cause: err}
	}
	return &Error{Code: code, Message: message, cause: err}
}

func currentVersion(trailer metadata.MD, message string) int64 {
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
