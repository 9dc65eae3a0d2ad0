package contextd

import (
	"errors"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestOutcomeUnknownTellsTheClientsRefusalFromTheSidecars(t *testing.T) {
	cases := map[string]struct {
		err  error
		want bool
	}{
		"grpc-go receive limit":    {status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5000 vs. 2048)"), true},
		"connect-go receive limit": {connect.NewError(connect.CodeResourceExhausted, errors.New("message size 5000 is larger than configured max 2048")), true},
		// The sidecar refusing a request applied nothing.
		"sidecar request limit": {status.Error(codes.ResourceExhausted, "message size 17000000 is larger than configured readMaxBytes 16777216"), false},
		"budget":                {status.Error(codes.ResourceExhausted, "pending exceeds budget"), false},
		"unavailable":           {status.Error(codes.Unavailable, "connection refused"), true},
		"deadline":              {status.Error(codes.DeadlineExceeded, "deadline exceeded"), true},
		"invalid":               {status.Error(codes.InvalidArgument, "deltas: empty"), false},
	}
	for name, c := range cases {
		if got := outcomeUnknown(newError(c.err, nil)); got != c.want {
			t.Errorf("%s: outcomeUnknown = %v, want %v", name, got, c.want)
		}
	}
}
