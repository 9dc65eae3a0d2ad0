package contextd

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// RetryPolicy says how a Client retries calls that failed with UNAVAILABLE (the sidecar is
// starting, shutting down, or its store is unreachable). Only calls that are safe to repeat are
// retried: reads, compiles that do not commit, and writes with an idempotency key; the keyed
// writes (Commit, Compile with Commit, Turn) are also retried after DEADLINE_EXCEEDED and after
// an answer over the receive limit, since they may have applied.
type RetryPolicy struct {
	// MaxAttempts counts the first try; 1 disables retries.
	MaxAttempts int
	// InitialBackoff is the upper bound of the first wait; each later bound is Multiplier times
	// the previous one, capped at MaxBackoff. The actual wait is random below the bound ("full
	// jitter"), so many agents retrying at once do not stampede the sidecar.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	Multiplier     float64
}

// DefaultRetryPolicy rides out a sidecar restart of a few seconds.
var DefaultRetryPolicy = RetryPolicy{
	MaxAttempts:    6,
	InitialBackoff: 100 * time.Millisecond,
	MaxBackoff:     2 * time.Second,
	Multiplier:     2,
}

// backoffBound is the upper bound of the wait before retry number `retry` (1-based).
func (p RetryPolicy) backoffBound(retry int) time.Duration {
	bound := float64(p.InitialBackoff)
	for i := 1; i < retry && bound < float64(p.MaxBackoff); i++ {
		bound *= p.Multiplier
	}
	return min(time.Duration(bound), p.MaxBackoff)
}

// sleep waits a jittered backoff before retry number `retry`, or returns the context's error.
func (p RetryPolicy) sleep(ctx context.Context, retry int) error {
	bound := p.backoffBound(retry)
	if bound <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(rand.N(bound) + 1)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// do runs call until it succeeds, fails with something other than UNAVAILABLE, or the policy
// gives up; the last error is returned.
func (p RetryPolicy) do(ctx context.Context, call func() error) error {
	err := call()
	for retry := 1; retry < p.MaxAttempts && errors.Is(err, ErrUnavailable); retry++ {
		if sleepErr := p.sleep(ctx, retry); sleepErr != nil {
			return err
		}
		err = call()
	}
	return err
}
