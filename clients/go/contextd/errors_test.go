package contextd

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
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

func TestErrorDetailsFromStatus(t *testing.T) {
	st, err := status.New(codes.InvalidArgument, "deltas[0]: no operation set").WithDetails(
		&errdetails.ErrorInfo{Reason: "OTHER_DOMAIN_REASON", Domain: "example.com"},
		&errdetails.ErrorInfo{Reason: "INVALID_ARGUMENT", Domain: ErrorDomain, Metadata: map[string]string{"k": "v"}},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "deltas[0]", Description: "no operation set"}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	var typed *Error
	if !errors.As(newError(st.Err(), nil), &typed) {
		t.Fatal("want an *Error")
	}
	if details := status.Convert(typed).Details(); len(details) != 3 {
		t.Errorf("status.Convert of the typed error has %d details, want the server's 3", len(details))
	}
	if typed.Reason() != "INVALID_ARGUMENT" || typed.Metadata()["k"] != "v" || len(typed.FieldViolations()) != 1 || typed.FieldViolations()[0] != (FieldViolation{Field: "deltas[0]", Description: "no operation set"}) {
		t.Errorf("details = %q %v %+v; want contextd's ErrorInfo (not another domain's) and the violation", typed.Reason(), typed.Metadata(), typed.FieldViolations())
	}
	aborted, _ := status.New(codes.Aborted, "no version in this message").WithDetails(&errdetails.ErrorInfo{Reason: "VERSION_CONFLICT", Domain: ErrorDomain, Metadata: map[string]string{"current_version": "9"}})
	var conflict *VersionConflictError
	if !errors.As(newError(aborted.Err(), nil), &conflict) || conflict.CurrentVersion != 9 || conflict.Reason() != "VERSION_CONFLICT" {
		t.Errorf("conflict = %+v, want current version 9 from ErrorInfo", conflict)
	}
}
