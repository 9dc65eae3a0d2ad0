package contextd

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
)

// A write whose answer did not arrive may have applied: the sidecar commits before it answers, so
// a lost connection, a deadline that ran out after the commit, or an answer refused for its size
// all hide a commit that happened. Reporting such a write as failed invites the natural retry that
// appends twice; this file retries it instead, with the same idempotency key, until the outcome is
// known.

// OutcomeUnknownError is a write (a Commit, or a Compile with Commit) whose outcome the Client
// could not learn within its retries: it may or may not have applied. Sending the same request
// again with IdempotencyKey applies it at most once. errors.Is sees the last attempt's error
// (ErrUnavailable, ErrDeadlineExceeded or ErrResourceExhausted).
type OutcomeUnknownError struct {
	// IdempotencyKey is the key every attempt carried.
	IdempotencyKey string
	// Err is the last attempt's error.
	Err error
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("contextd: outcome unknown (the write may have applied; send it again with idempotency key %q to apply it at most once): %v", e.IdempotencyKey, e.Err)
}

// Unwrap returns the last attempt's error.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// outcomeUnknown reports whether err leaves open whether the server applied the write.
func outcomeUnknown(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrDeadlineExceeded) || responseTooLarge(err)
}

// responseTooLarge reports whether err is this client refusing an answer over its receive limit
// (grpc-go: "grpc: received message larger than max"; connect-go: "message size N is larger than
// configured max M"), as opposed to the sidecar refusing a request, which applied nothing.
func responseTooLarge(err error) bool {
	var failure *Error
	if !errors.As(err, &failure) || failure.Code != codes.ResourceExhausted {
		return false
	}
	return strings.Contains(failure.Message, "received message larger than max") ||
		strings.Contains(failure.Message, "message after decompression larger than max") ||
		(strings.Contains(failure.Message, "larger than configured max") && !strings.Contains(failure.Message, "readMaxBytes"))
}

// keyedWrite runs a write that carries idempotency key `key` under the client's deadline, sending
// it again while its outcome is unknown and the retry policy and deadline allow. lean tells call
// that an earlier answer was over the receive limit, so it should ask for less.
func keyedWrite[Res any](c *Client, ctx context.Context, key string, call func(ctx context.Context, lean bool) (*Res, error)) (*Res, error) {
	ctx, cancel := c.withCallTimeout(ctx)
	defer cancel()
	lean := false
	for attempt := 1; ; attempt++ {
		response, err := call(ctx, lean)
		if err == nil || !outcomeUnknown(err) {
			return response, err
		}
		if attempt >= c.retry.MaxAttempts || ctx.Err() != nil {
			return nil, &OutcomeUnknownError{IdempotencyKey: key, Err: err}
		}
		if responseTooLarge(err) {
			// Asking for less is what helps here, not waiting.
			lean = true
			continue
		}
		if sleepErr := c.retry.sleep(ctx, attempt); sleepErr != nil {
			return nil, &OutcomeUnknownError{IdempotencyKey: key, Err: err}
		}
	}
}
