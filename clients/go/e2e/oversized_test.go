package e2e

import (
	"errors"
	"strings"
	"testing"

	"github.com/contextd-dev/contextd/clients/go/contextd"
	"github.com/contextd-dev/contextd/clients/go/internal/sidecartest"
	contextdv1 "github.com/contextd-dev/contextd/gen/go/contextd/v1"
)

// TestOversizedRequestsAreResourceExhausted sends 17-40 MB compiles (over the sidecar's default
// 16 MiB --max-request-bytes) with the client's own send limit raised: the answer is
// RESOURCE_EXHAUSTED naming the flag on gRPC (issue 29: node clients saw INTERNAL
// NGHTTP2_ENHANCE_YOUR_CALM), and RESOURCE_EXHAUSTED on Connect.
func TestOversizedRequestsAreResourceExhausted(t *testing.T) {
	sidecar := sidecartest.Start(t)
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			client := dial(t, sidecar.Address, append([]contextd.Option{contextd.WithMaxSendBytes(64 << 20)}, opts...)...)
			for _, megabytes := range []int{17, 40} {
				request := &contextdv1.CompileRequest{History: &contextdv1.MessageList{Messages: []*contextdv1.Message{contextd.UserText(strings.Repeat("x", megabytes<<20))}}}
				_, err := client.Compile(testContext(t), request)
				var refused *contextd.Error
				if !errors.Is(err, contextd.ErrResourceExhausted) || !errors.As(err, &refused) {
					t.Fatalf("%d MB: err = %v, want RESOURCE_EXHAUSTED", megabytes, err)
				}
				if name == "grpc" && !strings.Contains(err.Error(), "--max-request-bytes") {
					t.Errorf("%d MB: %v, want it to name --max-request-bytes", megabytes, err)
				}
			}
		})
	}
}
