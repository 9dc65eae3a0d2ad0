package contextd

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestBackoffGrowsToTheCap(t *testing.T) {
	policy := RetryPolicy{MaxAttempts: 10, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, Multiplier: 2}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, bound := range want {
		if got := policy.backoffBound(i + 1); got != bound*time.Millisecond {
			t.Errorf("retry %d: bound %v, want %v", i+1, got, bound*time.Millisecond)
		}
	}
}

func TestDoRetriesOnlyUnavailable(t *testing.T) {
	policy := RetryPolicy{MaxAttempts: 4, InitialBackoff: time.Microsecond, MaxBackoff: time.Microsecond, Multiplier: 1}
	calls := 0
	err := policy.do(context.Background(), func() error {
		calls++
		return newError(status.Error(codes.Unavailable, "store down"), nil)
	})
	if calls != 4 || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("unavailable: %d calls, err %v; want 4 calls", calls, err)
	}
	calls = 0
	err = policy.do(context.Background(), func() error {
		calls++
		if calls == 1 {
			return newError(status.Error(codes.Unavailable, "starting"), nil)
		}
		return newError(status.Error(codes.InvalidArgument, "bad"), nil)
	})
	if calls != 2 || !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("invalid argument: %d calls, err %v; want 2 calls", calls, err)
	}
}

func TestDoStopsWhenTheContextEnds(t *testing.T) {
	policy := RetryPolicy{MaxAttempts: 100, InitialBackoff: time.Hour, MaxBackoff: time.Hour, Multiplier: 1}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := policy.do(ctx, func() error {
		calls++
		cancel()
		return newError(status.Error(codes.Unavailable, "down"), nil)
	})
	if calls != 1 || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("%d calls, err %v; want 1 call returning the last error", calls, err)
	}
}
