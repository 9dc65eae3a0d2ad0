package contextd

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestNewErrorMatchesTheSentinelOfItsCode(t *testing.T) {
	for code, sentinel := range sentinels {
		err := newError(status.Error(code, "what and where"), nil)
		if !errors.Is(err, sentinel) {
			t.Errorf("%v: errors.Is(%v, %v) = false", code, err, sentinel)
		}
		for other, otherSentinel := range sentinels {
			if other != code && errors.Is(err, otherSentinel) {
				t.Errorf("%v also matches %v", code, otherSentinel)
			}
		}
		if got := status.Code(fmt.Errorf("wrapped: %w", err)); got != code {
			t.Errorf("status.Code of wrapped %v = %v", code, got)
		}
	}
	if err := newError(status.Error(codes.DataLoss, "x"), nil); !errors.Is(err, ErrInternal) {
		t.Errorf("DataLoss: %v does not match ErrInternal", err)
	}
}

func TestVersionConflictPrefersTheTrailer(t *testing.T) {
	trailer := metadata.Pairs(CurrentVersionTrailer, "12")
	err := newError(status.Error(codes.Aborted, "expected version 3, current version 11"), trailer)
	var conflict *VersionConflictError
	if !errors.As(err, &conflict) || conflict.CurrentVersion != 12 {
		t.Fatalf("got %#v, want a conflict at version 12", err)
	}
	if !errors.Is(err, ErrVersionConflict) {
		t.Fatalf("%v does not match ErrVersionConflict", err)
	}
}

func TestVersionConflictFallsBackToTheMessage(t *testing.T) {
	for message, want := range map[string]int64{
		"version conflict: expected version 3, current version 11": 11,
		"expected 3 but the current version is 7":                  7,
		"stale write": -1,
	} {
		var conflict *VersionConflictError
		if err := newError(status.Error(codes.Aborted, message), nil); !errors.As(err, &conflict) || conflict.CurrentVersion != want {
			t.Errorf("%q: got %#v, want current version %d", message, err, want)
		}
	}
}

func TestConnectErrorsCarryCodeAndTrailer(t *testing.T) {
	connectErr := connect.NewError(connect.CodeAborted, errors.New("stale"))
	connectErr.Meta().Set(CurrentVersionTrailer, "5")
	var conflict *VersionConflictError
	if err := newError(connectErr, nil); !errors.As(err, &conflict) || conflict.CurrentVersion != 5 {
		t.Fatalf("got %#v, want a conflict at version 5", err)
	}
	err := newError(connect.NewError(connect.CodeInvalidArgument, errors.New("deltas: empty")), nil)
	var typed *Error
	if !errors.As(err, &typed) || typed.Code != codes.InvalidArgument || typed.Message != "deltas: empty" {
		t.Fatalf("got %#v", err)
	}
}
